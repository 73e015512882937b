"""The in-order mechanism: place jobs one by one in the chooser's order; stop at the first that does not fit.

Why a mechanism of its own: it is the PAL artifact's (hal-uw/blox-pal) queue treatment, which
its six policies share and which fidelity to the paper's figures depends on: no backfill,
no reservation, no waiting, so it needs neither a runtime estimate nor a wait rule. The
choosers it is composed with (packed, random, PM-First, PAL) differ only in the GPUs they
pick and, for PM-First and PAL, the order jobs are tried in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pal_slurm.placement.base import GpuChooser, Policy, in_chooser_order
from pal_slurm.placement.index import FreeState
from pal_slurm.placement.model import Assignment, Decision, JobRequest, PlacementContext, PolicyRow, Snapshot


@dataclass(frozen=True)
class InOrder(Policy):
    """Place in the chooser's order, stop at the first job that does not fit."""

    row: PolicyRow[Policy]
    chooser: GpuChooser

    def assign(self, snapshot: Snapshot, queue: Sequence[JobRequest], ctx: PlacementContext) -> Decision:
        return in_chooser_order(self.chooser, snapshot, queue, lambda ordered, guard: self._walk(
            snapshot, ordered, guard, ctx))

    def _walk(self, snapshot: Snapshot, ordered: Sequence[JobRequest], guard: int,
              ctx: PlacementContext) -> Decision | None:
        """Place in `ordered`, stop at the first job that does not fit; None when one of the
        first `guard` jobs does not fit (the class sort would decide who runs)."""
        state = FreeState(snapshot)
        placed: list[Assignment] = []
        for i, job in enumerate(ordered):
            choice = self.chooser.choose(job, state, ctx)
            if choice is None:
                if i < guard:
                    return None
                return Decision(assignments=tuple(placed), blocked=job.id)
            state.take(choice.gpus)
            placed.append(choice.assignment(job.id))
        return Decision(assignments=tuple(placed), blocked=None)
