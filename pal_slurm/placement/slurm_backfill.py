"""slurm-backfill: Slurm as shipped, the baseline every claim of pal-slurm is measured against.

What a site runs today: select/cons_tres choosing GPUs without knowing about variability,
and sched/backfill starting jobs past a blocked one when that does not delay it. Modelled
here with the same EASY mechanics as pal-backfill (pal_slurm.placement.backfill), so the
difference between the two is exactly what variability awareness adds:

- **GPU choice, variability-blind** (cons_tres): nodes in configuration order (Slurm's order
  for nodes of equal weight); a one-node job takes the first node with enough free GPUs,
  and on it the lowest free GPU indices; GPUs per node on several nodes take the first
  nodes that have them; a job that may span nodes takes one node when one fits, else the
  fewest nodes (the emptiest first, in order on ties). Per-slot constraints that only
  pal-slurm's steering needs (the same slots on every node) do not apply to Slurm itself.
- **Backfill** (sched/backfill): queue order is Slurm's; the first job that cannot start is
  given a reservation (the GPUs this same first-fit would give it once enough running jobs
  have ended, by their expected ends); a later job starts now only if it is expected to end
  by then or keeps off those GPUs. At most `lookahead` jobs past the blocked one are looked
  at per pass (bf_max_job_test), and the event simulator runs such a pass at most every 30
  simulated seconds (bf_interval).
- **Time limits, not runtimes**: a job is expected to run for its estimate (`remaining_s`,
  the time limit in a headline run), whatever GPUs it gets, as Slurm's backfill assumes.
- **Never waits for better GPUs.**
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from pal_slurm.placement.backfill import PalBackfill, Reservation
from pal_slurm.placement.base import Choice, as_gpus, describe_gpus, free_on_node, register
from pal_slurm.placement.index import ClusterIndex, FreeState
from pal_slurm.placement.model import JobRequest, PlacementContext, Snapshot


@register
class SlurmBackfill(PalBackfill):
    name = "slurm-backfill"
    sticky = True
    description = ("Slurm as shipped: cons_tres's variability-blind first fit (node order, lowest GPU indices) "
                   "and sched/backfill's EASY backfilling on time limits; never waits for better GPUs.")
    class_sorted_prefix = False
    backfills = True
    #: sched/backfill's bf_max_job_test default is 500; 100 keeps a 100,000-job simulation
    #: fast and is far beyond the depth at which a 64-GPU cluster still has room
    lookahead = 100
    time_aware = True

    # -- GPU choice: cons_tres, blind to variability ----------------------------------
    def pick(self, job: JobRequest, cand: np.ndarray, state: FreeState, ctx: PlacementContext) -> Choice | None:
        counts = state.node_counts(job.allowed_nodes)
        listing = free_on_node(state.index, state)
        fits = np.flatnonzero(counts >= job.gpus)
        if fits.size:
            return self._choice(state.index, job, listing(int(fits[0]))[: job.gpus])
        got: list[int] = []
        for v in np.lexsort((np.arange(len(counts)), -counts)):  # the emptiest nodes first: fewest nodes
            if counts[v] <= 0:
                break
            got += listing(int(v))[: job.gpus - len(got)]
            if len(got) == job.gpus:
                return self._choice(state.index, job, got)
        return None

    def pick_one_node(self, job: JobRequest, cand: np.ndarray, state: FreeState,
                      ctx: PlacementContext) -> Choice | None:
        return self.pick_split(job, cand, state, ctx, job.gpus, 1)

    def pick_split(self, job: JobRequest, cand: np.ndarray, state: FreeState, ctx: PlacementContext,
                   per_node: int, nodes: int) -> Choice | None:
        counts = state.node_counts(job.allowed_nodes)
        fits = np.flatnonzero(counts >= per_node)
        if fits.size < nodes:
            return None
        listing = free_on_node(state.index, state)
        return self._choice(state.index, job, [g for v in fits[:nodes] for g in listing(int(v))[:per_node]])

    def pick_same_slots(self, job: JobRequest, cand: np.ndarray, state: FreeState,
                        ctx: PlacementContext) -> Choice | None:
        assert job.gpus_per_node is not None
        return self.pick_split(job, cand, state, ctx, job.gpus_per_node, job.gpus // job.gpus_per_node)

    def _choice(self, ix: ClusterIndex, job: JobRequest, gpus: Sequence[int]) -> Choice:
        chosen = as_gpus(gpus)
        tab = ix.table(job.job_class)
        return Choice(gpus=chosen, why=lambda: f"{self.name}: first fit in node order; {describe_gpus(ix, tab, chosen)}",
                      alternatives=((chosen, float(len({ix.node_list[g] for g in chosen}))),))

    # -- backfill on time limits, no waiting ---------------------------------------------
    def estimate(self, ix: ClusterIndex, job: JobRequest, gpus: Sequence[int], penalty: float) -> float:
        """Slurm expects a job to run for its time limit, on any GPUs."""
        return job.remaining_s if job.remaining_s > 0 else math.inf

    def _better_later(self, job: JobRequest, choice: Choice, state: FreeState, snapshot: Snapshot,
                      ctx: PlacementContext, memo: object = None,
                      budget: list[int] | None = None) -> tuple[Reservation, float] | None:
        return None
