"""sched/backfill as Slurm plans it: a reservation on whole nodes for every waiting job it tests.

Why a second model of Slurm: `slurm-backfill` is the simulator's baseline because pal-slurm's
policies share its mechanism (pal_slurm.placement.easy: the head of the queue gets its GPUs
reserved, every later job may start if it keeps off them or ends before the head starts),
so that a measured difference between them is the variability part alone. Slurm's own
backfill plans differently, and a real slurmctld shows it (docs/evaluation.md, "The third
sitting"): predicting plain Slurm with the EASY mechanism left its average JCT 6 % short on
one fleet. This policy is the model the replay predicts a plain-Slurm arm with, and the one
to compare against when the question is "what would my Slurm do", not "what does the
variability choice add".

What Slurm's backfill does (src/plugins/sched/backfill/backfill.c, the same in 22.05 and 24.11),
and this model with it:

- it walks the waiting jobs in priority order (up to `bf_max_job_test`; here `lookahead`
  past the first that does not fit, as for every backfilling policy);
- a job starts now if its shape fits on GPUs free now on nodes that no earlier job's
  reservation holds at any time during the job's time limit;
- a job that cannot start now gets the earliest time it could (running jobs free their GPUs
  at their expected ends, jobs started in this pass at now + their limit, reservations at
  their ends), and a reservation of **whole nodes** -- the nodes it would start on -- for its
  time limit: Slurm's node-space map is a bitmap of nodes per time slice, so a reserved node
  is closed to every later job whose limit overlaps the reservation, even where GPUs on it
  stay free. Running jobs share nodes as cons_tres allows (their GPUs, not their nodes, are
  taken);
- the GPUs are the chooser's pick on the nodes left open: for slurm-reserving, cons_tres's
  (pal_slurm.placement.cons_tres_fit: the tightest run of consecutive nodes, not the first
  fit the EASY policies share);
- a job is expected to run for the estimator's time: for slurm-reserving, its time limit, as
  Slurm plans. The mechanism never makes a job wait for better GPUs (Slurm does not).

Not modelled: `bf_resolution` (Slurm keeps its map in 60-s steps; rounding the reservations
that way moved the replay's predictions both ways, measured in docs/evaluation.md), and
the main scheduler's own passes, which the simulators model as passes cut after the first
job that does not fit (`decide(..., backfill=False)`), as for `slurm-backfill`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import ClassVar

import numpy as np

from pal_slurm.placement.base import Choice, GpuChooser, Policy
from pal_slurm.placement.easy import Estimator, noted
from pal_slurm.placement.index import ClusterIndex, FreeState, cluster_index
from pal_slurm.placement.model import Decision, JobRequest, PlacementContext, PolicyRow, Snapshot


class _Plan:
    """When each GPU is free and which nodes earlier jobs' reservations hold, for one pass."""

    def __init__(self, ix: ClusterIndex, snapshot: Snapshot, now: float) -> None:
        self.ix = ix
        self.now = now
        self.free_at = np.full(ix.n, math.inf)
        if snapshot.free:
            self.free_at[np.fromiter(snapshot.free, dtype=np.int64, count=len(snapshot.free))] = now
        if snapshot.running:  # on arrays: a pass over thousands of running jobs (bench/placement_speed.py)
            running = snapshot.running
            sizes = np.fromiter(map(len, running.values()), dtype=np.int64, count=len(running))
            gpus = np.fromiter(chain.from_iterable(running.values()), dtype=np.int64, count=int(sizes.sum()))
            ends = np.fromiter((snapshot.expected_end.get(jid, math.inf) for jid in running), dtype=float,
                               count=len(running))
            self.free_at[gpus] = np.repeat(ends, sizes)
        self.starts: list[float] = []  # reservation windows and their nodes
        self.ends: list[float] = []
        self.nodes: list[np.ndarray] = []

    def times(self) -> Iterator[float]:
        """The moments a job's earliest start can be: now, each release, each reservation's end
        (the later ones worked out only for a job that cannot start now)."""
        yield self.now
        at = self.free_at
        later = set(np.unique(at[(at > self.now) & (at < math.inf)]).tolist())
        later.update(t for t in self.ends if t > self.now)
        yield from sorted(later)

    def open_gpus(self, t: float, until: float) -> np.ndarray:
        """GPUs free by `t` on nodes no reservation holds during [t, until)."""
        mask = self.free_at <= t
        if self.ends:
            starts, ends = np.asarray(self.starts), np.asarray(self.ends)
            overlapping = (starts < until) & (ends > t)
            if overlapping.any():
                held = np.logical_or.reduce([self.nodes[i] for i in np.flatnonzero(overlapping)])
                mask &= ~held[self.ix.node_of]
        return mask

    def reserve(self, t: float, until: float, gpus: Sequence[int]) -> None:
        nodes = np.zeros(self.ix.n_nodes, dtype=bool)
        nodes[self.ix.node_of[list(gpus)]] = True
        self.starts.append(t)
        self.ends.append(until)
        self.nodes.append(nodes)


@dataclass(frozen=True)
class Reserving(Policy):
    """sched/backfill's planning over a chooser and an estimator (see the module docstring)."""

    row: PolicyRow[Policy]
    chooser: GpuChooser
    #: how long a job holds what it is given, asked before its GPUs are known (no GPUs passed):
    #: Slurm plans every job by its time limit (easy.by_time_limit)
    estimate: Estimator
    #: as slurm-backfill: sched/backfill's bf_max_job_test is 500, and 100 jobs past the first
    #: that does not fit is far beyond the depth at which a 64-GPU cluster still has room
    lookahead: int = 100

    backfills: ClassVar[bool] = True
    time_aware: ClassVar[bool] = True

    def assign(self, snapshot: Snapshot, queue: Sequence[JobRequest], ctx: PlacementContext) -> Decision:
        ix = cluster_index(snapshot.cluster)
        now = snapshot.now or 0.0
        plan = _Plan(ix, snapshot, now)
        placed: list[tuple[JobRequest, Choice]] = []
        blocked: str | None = None
        for job in queue:
            limit = self.estimate(ix, job, (), ctx.locality_penalty)
            found = self._earliest(job, plan, limit, snapshot, ctx)
            if found is not None and found[0] <= now:
                choice = found[1]
                if blocked is not None:
                    choice = noted(choice, f"backfilled past {blocked}: off every node reserved during its limit "
                                           f"({len(plan.ends)} reservation{'s' if len(plan.ends) != 1 else ''})")
                placed.append((job, choice))
                plan.free_at[list(choice.gpus)] = now + limit
                continue
            blocked = blocked or job.id
            if found is not None and limit < math.inf:
                t, choice = found
                plan.reserve(t, t + limit, choice.gpus)
        return Decision(assignments=tuple(c.assignment(j.id) for j, c in placed), blocked=blocked)

    def _earliest(self, job: JobRequest, plan: _Plan, limit: float, snapshot: Snapshot,
                  ctx: PlacementContext) -> tuple[float, Choice] | None:
        """The first moment the job's shape fits on open GPUs, and the chooser's pick then."""
        for t in plan.times():
            mask = plan.open_gpus(t, t + limit)
            if int(mask.sum()) < job.gpus:
                continue
            state = FreeState(Snapshot(cluster=snapshot.cluster, free=frozenset(np.flatnonzero(mask).tolist())))
            choice = self.chooser.choose(job, state, ctx)
            if choice is not None:
                return t, choice
        return None
