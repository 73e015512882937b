"""Per-job accounting of the variability tax: what each finished GPU job paid for the GPUs it
got, and what the other choice would have given (pure).

Why: an admin decides to enforce on the site's own numbers. In observe mode the placer
records what it would have chosen; this ledger turns that, and what Slurm really gave each
job, into GPU-hours: the *tax* a job paid on slower-than-typical GPUs and the *saving* the
other choice gives.

- A job's factor is the slowest of its GPUs for its class (the typical GPU reads 1.000,
  docs/classification.md); it ran `runtime` on them, so on typical GPUs it would have taken
  `runtime / factor`. Its tax is ``gpus x runtime x (1 - 1 / factor)`` GPU-hours (negative
  on faster-than-typical GPUs).
- Observe mode: the *alternative* is the factor of the GPUs the placer would have chosen
  when it saw the job pending; the saving is ``gpus x runtime x (1 - alternative / factor)``
  (what the placer's choice would have avoided).
- Enforce mode: the job ran where the placer put it; the alternative is the factor Slurm's
  first fit would have given, computed from the same snapshot, and the saving is
  ``gpus x runtime x (alternative / factor - 1)``.
- A job whose GPUs or their factors are unknown (no per-GPU record in Slurm's answer, a GPU
  never classified for its class) is *unaccounted*: it gets no tax, never a tax of zero.

Run time is from Slurm's start time to its end time when a cycle sees the job COMPLETING
(to the second), else to halfway between the last cycle that saw it running and the first
that no longer lists it (within half a cycle of the truth).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from pal_slurm.jobs.fingerprint import fingerprint
from pal_slurm.placement.decide import decide
from pal_slurm.placement.model import Decision, PlacementContext, Snapshot
from pal_slurm.placement.orders import QueueOrder
from pal_slurm.placement.policies import get_policy
from pal_slurm.placement.variability import GpuVariability
from pal_slurm.placer.cluster_view import View
from pal_slurm.placer.shapes import Planned
from pal_slurm.savings import JobAccount
from pal_slurm.slurm.gresconf import slot_of_type
from pal_slurm.slurm.model import SlurmJob
from pal_slurm.slurm.hostlist import expand_nodes
from pal_slurm.slurm.tres import parsed_gres_alloc

#: the most pending choices remembered (a queue of jobs that never start must not grow memory)
MAX_CHOICES = 200_000


@dataclass(frozen=True)
class Alternative:
    """What the other choice would have given a job, noted when it was decided."""

    kind: str  # "placer" (observe mode: what pal-slurm would have chosen) | "first-fit" (enforce mode)
    job_class: str
    factor: float | None  # the slowest of those GPUs for the class; None when unknown
    version: int | None


@dataclass
class _Run:
    job: SlurmJob
    job_class: str
    gpus: tuple[tuple[str, int], ...]
    started: float
    seen: float  # the last cycle that saw it running


@dataclass
class Ledger:
    """Follows GPU jobs from the placer's choice to their end; each cycle returns the jobs that ended."""

    mode: str = "observe"
    choices: dict[str, Alternative] = field(default_factory=dict)
    running: dict[str, _Run] = field(default_factory=dict)
    #: jobs closed while Slurm still lists them (COMPLETING), so they are not followed again
    closed: dict[str, None] = field(default_factory=dict)

    def chose(self, job_id: str, alternative: Alternative) -> None:
        """Note the other choice for a pending job (the first one noted wins: the moment the
        placer first saw it, in observe mode; its placement, in enforce mode)."""
        if job_id in self.choices:
            return
        if len(self.choices) >= MAX_CHOICES:
            self.choices.pop(next(iter(self.choices)))
        self.choices[job_id] = alternative

    def cycle(self, jobs: Sequence[SlurmJob], factors: Mapping[tuple[str, int], GpuVariability], now: float,
              version: int | None, class_of: Callable[[SlurmJob], str]) -> list[JobAccount]:
        """One cycle's view of the jobs: start following running GPU jobs, close the ones gone.
        `class_of` names a job's class when no choice was noted for it (asked once per job)."""
        active = {j.job_id: j for j in jobs}
        for job in jobs:
            if not job.running or job.job_id in self.running or job.job_id in self.closed:
                continue
            gpus = job_gpus(job)
            if not gpus and not _asks_gpus(job):
                continue
            alt = self.choices.get(job.job_id)
            cls = alt.job_class if alt is not None else class_of(job)
            self.running[job.job_id] = _Run(job, cls, gpus, job.start_time or now, now)
        done: list[JobAccount] = []
        for job_id in list(self.running):
            still = active.get(job_id)
            if still is not None and still.running and still.state != "COMPLETING":
                self.running[job_id].seen = now
                continue
            run = self.running.pop(job_id)
            if still is not None and still.pending:  # requeued: it runs again later, as a new run
                continue
            end = (max(run.seen, run.started) + now) / 2  # it ended between the last sighting and now
            if still is not None:  # COMPLETING: Slurm knows when it ended, to the second
                end = still.end_time if still.end_time is not None and run.started <= still.end_time <= now + 1 \
                    else now
                self.closed[job_id] = None
            done.append(account(run.job, run.job_class, run.gpus, run.started, end, factors, version,
                                self.choices.pop(job_id, None), self.mode))
        for job_id in [j for j in self.closed if j not in active]:
            del self.closed[job_id]  # gone from Slurm's list too
        for job_id in [j for j in self.choices if j not in active]:
            del self.choices[job_id]  # cancelled or gone while pending: nothing to account
        return done


def account(job: SlurmJob, job_class: str, gpus: Sequence[tuple[str, int]], started: float, ended: float,
            factors: Mapping[tuple[str, int], GpuVariability], version: int | None,
            alternative: Alternative | None, mode: str) -> JobAccount:
    """A finished job's tax and saving (see the module's docstring for the formulas)."""
    runtime = max(ended - started, 0.0)
    per_gpu = tuple((node, minor, _factor(factors.get((node, minor)), job_class)) for node, minor in gpus)
    known = [f for _n, _m, f in per_gpu]
    factor = max(known) if per_gpu and all(f is not None for f in known) else None  # type: ignore[type-var]
    tax = saved = None
    alt_factor = alternative.factor if alternative is not None else None
    if factor is not None:
        gpu_h = len(per_gpu) * runtime / 3600.0
        tax = gpu_h * (1.0 - 1.0 / factor)
        if alt_factor is not None and alternative is not None:
            if alternative.kind == "placer":
                saved = gpu_h * (1.0 - alt_factor / factor)
            else:
                saved = gpu_h * (alt_factor / factor - 1.0)
    return JobAccount(job_id=job.job_id, mode=mode, job_class=job_class, partition=job.partition or "-",
                      account=job.account or "-", user=job.user or "-", gpus=per_gpu,
                      started_at=datetime.fromtimestamp(started, UTC), ended_at=datetime.fromtimestamp(ended, UTC),
                      runtime_s=runtime, factor=factor, tax_gpu_h=tax,
                      alternative=alternative.kind if alternative is not None else None,
                      alternative_factor=alt_factor, saved_gpu_h=saved,
                      version=version if alternative is None or alternative.version is None else alternative.version,
                      fingerprint=fingerprint(job.user, job.name, job.command), time_limit_s=job.time_limit_s)


def placer_alternatives(view: View, planned: Planned, decision: Decision,
                        version: int | None) -> dict[str, Alternative]:
    """Observe mode: the factor of the GPUs the placer would have chosen, per job."""
    out: dict[str, Alternative] = {}
    for a in decision.assignments:
        cls = planned.held[a.job_id].job_class
        sf = view.cluster.sf(cls)
        out[a.job_id] = Alternative("placer", cls, slowest(sf[g] for g in a.gpus), version)
    return out


def first_fit_alternatives(view: View, planned: Planned, decision: Decision, snapshot: Snapshot, order: QueueOrder,
                           ctx: PlacementContext, version: int | None) -> dict[str, Alternative]:
    """Enforce mode: the factor Slurm's first fit would have given each placed job. A
    placement that is first fit's own is its own answer; a variability choice of pal-guard's
    carries first fit's GPUs at the same point of the decision (`Assignment.instead_of`); for
    any other policy, the slurm-backfill decision on the same snapshot and queue is made once
    (a second decision per cycle), and a job it would not have started this cycle gets no
    alternative (its factor unknown, never guessed)."""
    out: dict[str, Alternative] = {}
    other: Decision | None = None
    for a in decision.assignments:
        cls = planned.held[a.job_id].job_class
        sf = view.cluster.sf(cls)
        gpus: tuple[int, ...] | None = a.gpus
        if not a.first_fit and a.instead_of is not None:
            gpus = a.instead_of
        elif not a.first_fit:
            if other is None:
                other = decide(get_policy("slurm-backfill"), order, snapshot, planned.requests, ctx)
            gpus = other.as_dict().get(a.job_id)
        out[a.job_id] = Alternative("first-fit", cls, None if gpus is None else slowest(sf[g] for g in gpus),
                                    version)
    return out


def slowest(factors: Iterable[float | None]) -> float | None:
    """The slowest of a set of GPU factors; None when any is unknown (or the set is empty)."""
    values = list(factors)
    if not values or any(v is None for v in values):
        return None
    return max(values)  # type: ignore[type-var]


def job_gpus(job: SlurmJob) -> tuple[tuple[str, int], ...]:
    """(node, device minor) of a running job's GPUs, from its per-node gres_detail: the minor a
    per-slot type names (`v100_g2`), else the GRES index (`gpu:1(IDX:2)`); () when Slurm
    said nothing about them."""
    out: list[tuple[str, int]] = []
    for node, detail in zip(expand_nodes(job.nodes), job.gres_detail):
        for use in parsed_gres_alloc(detail):
            if use.name != "gpu" or use.count <= 0:
                continue
            minor = slot_of_type(use.type) if use.type else None
            if minor is not None:
                out.append((node, minor))
            else:
                out.extend((node, i) for i in use.indices)
    return tuple(sorted(set(out)))


def _asks_gpus(job: SlurmJob) -> bool:
    return bool(job.tres("tres_per_node").gpu_count or job.tres("tres_per_job").gpu_count
                or job.tres("tres_per_task").gpu_count)


def _factor(v: GpuVariability | None, job_class: str) -> float | None:
    if v is None:
        return None
    f = v.slowdown.get(job_class)
    return None if f is None else float(f)


__all__ = ["Alternative", "JobAccount", "Ledger", "account", "first_fit_alternatives", "job_gpus",
           "placer_alternatives", "slowest"]
