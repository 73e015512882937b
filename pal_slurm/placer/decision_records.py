"""What the audit says of a decision: the records of a placement, a wait and an observe-mode
placement, with the GPUs each names and the reason it gives (no I/O: the cycle adds them to
the audit sink).

Why apart from the cycle: the reason texts and GPU entries are what `pal explain` and the
audit table show of every decision; the cycle (placer/cycle.py) decides and writes, and asks
here for the record that says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from pal_slurm.placement.model import Assignment, Wait
from pal_slurm.placer.audit import Record, gpu_entry
from pal_slurm.placer.cluster_view import View
from pal_slurm.placer.shapes import HeldJob
from pal_slurm.placer.slurm_updates import Update
from pal_slurm.slurm.model import SlurmJob

#: the alternatives a placement's record keeps, best first
ALTERNATIVES_KEPT = 8


def applied(job: SlurmJob, held: HeldJob, a: Assignment, update: Update, sfs: Sequence[float], view: View, *,
            policy: str, version: int | None, waited: tuple[float, tuple[str, ...]] | None, now: float,
            at: datetime) -> Record:
    """A placement's record: `job` as read, its class and why, the slots `update` sets with
    their slowdowns `sfs`, the alternatives weighed, and how long it `waited` (since, for which
    GPUs) when it waited on purpose first."""
    why = f"class {held.job_class} ({held.class_source}); {a.reason}"
    if waited is not None:
        why += f"; waited {now - waited[0]:.0f} s for {','.join(waited[1])}"
    why += held.estimate_note
    return Record.applied(job, policy=policy, job_class=held.job_class, version=version,
                          gpus=[gpu_entry(s.node, s.minor, f, s.gres_type) for s, f in zip(update.slots, sfs)],
                          alternatives=[{"gpus": [view.slots[g].name for g in gpus], "weight": w}
                                        for gpus, w in a.alternatives[:ALTERNATIVES_KEPT]],
                          reason=why, at=at)


def waiting(job: SlurmJob, held: HeldJob, w: Wait, target: Sequence[str], view: View, *, policy: str,
            now: float, at: datetime) -> Record:
    """A job that waits on purpose for `target` (w.gpus by name): for how long at most, and how
    much sooner it is expected to finish there than on the GPUs free now."""
    sfs = [view.cluster.sf(held.job_class)[g] for g in w.gpus]
    return Record.waiting(
        job, policy=policy, job_class=held.job_class, at=at,
        gpus=[gpu_entry(view.slots[g].node, view.slots[g].minor, f, view.slots[g].gres_type)
              for g, f in zip(w.gpus, sfs)],
        reason=(f"class {held.job_class}; waits up to {max(w.free_at - now, 0):.0f} s for {','.join(target)}, "
                f"expected to finish {w.sooner_s:.0f} s sooner than on the GPUs free now{held.estimate_note}"))


def observed(job: SlurmJob, held: HeldJob, a: Assignment, view: View, *, policy: str, version: int | None,
             at: datetime) -> Record:
    """Observe mode's record of where it would place `job`."""
    sf = view.cluster.sf(held.job_class)
    return Record.observed(
        job, policy=policy, job_class=held.job_class, version=version,
        gpus=[gpu_entry(view.slots[g].node, view.slots[g].minor, sf[g], view.slots[g].gres_type) for g in a.gpus],
        reason=f"observe: would place; {a.reason}", at=at)


__all__ = ["ALTERNATIVES_KEPT", "applied", "observed", "waiting"]
