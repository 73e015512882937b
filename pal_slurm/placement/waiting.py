"""Wait rules: whether a job that could start now waits for better GPUs instead (pal_slurm.placement.easy).

Why a job should ever wait: a policy that starts a job on whatever fits puts it, now and
then, on a 2.8x-slow outlier GPU that a 24-GPU job then drags through days of training.
When a running job with a known expected end frees GPUs on which this job would *finish*
sooner (start later, run faster) by more than a margin of its remaining time, waiting for
them is the better start. The rules are values, passed to the mechanism like the chooser:

- `NeverWait`: Slurm as shipped never waits (slurm-backfill).
- `BetterLater(margin)`: wait when a release lets the job finish sooner by more than
  `margin` of its estimate (pal-backfill, pal-match: 5 %; estimates are rough, churn is
  not free).
- `NoiseGated(BetterLater(...))`: pal-guard's no-harm rule for waiting: never for a class
  whose GPUs all lie within the noise of each other, never when the GPUs it has now are
  within the noise of the class's fastest, and only for a finish sooner by more than the
  noise (the margin is at least `ctx.noise`). Its waiter reserves nothing (`reserves`):
  the jobs behind it may use the GPUs it waits for until they are released to it.

Only GPUs held by running jobs with a known expected end count: jobs placed in this
decision do not, so a caller that re-places everything each round (no running jobs in its
snapshots, the artifact's round mode) never makes a job wait; there, re-placement already
moves a job off bad GPUs at the next round. Only releases expected within
`ctx.wait_bound_s(estimate)` of now count: waiting is bounded.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pal_slurm.placement.base import Choice
from pal_slurm.placement.cost import spans_nodes
from pal_slurm.placement.easy import ChoiceMemo, Reservation, SearchBudget, estimated_runtime
from pal_slurm.placement.guarded import fastest, quiet_table, within_noise
from pal_slurm.placement.index import ClusterIndex, FreeState
from pal_slurm.placement.model import JobRequest, PlacementContext, Snapshot


@dataclass(frozen=True)
class NeverWait:
    """Start every job that can start now (Slurm as shipped)."""

    searches: int = 0
    reserves: bool = True

    def better_later(self, job: JobRequest, choice: Choice, state: FreeState, snapshot: Snapshot,
                     ctx: PlacementContext, memo: ChoiceMemo, budget: SearchBudget) -> tuple[Reservation, float] | None:
        return None


@dataclass(frozen=True)
class _Goal:
    """What waiting must beat for one job: its finish if it starts now, and the bounds that
    spare searches that cannot beat it."""

    pv: np.ndarray
    pv_list: list[float]
    finish_now: float
    #: the slowest GPU chosen now: only a release of a faster one can help, or ...
    worst_now: float
    #: ... one that lets a job that now spans nodes fit on one
    could_gather: bool
    #: the soonest any start could finish it: its best PerfVar, lambda when it must span nodes
    floor: float
    #: the seconds sooner it must finish to be worth waiting
    margin: float

    @classmethod
    def of(cls, ix: ClusterIndex, job: JobRequest, choice: Choice, ctx: PlacementContext, now: float,
           margin_fraction: float) -> _Goal:
        tab = ix.table(job.job_class)
        one_node = job.one_node or ((job.gpus_per_node or job.gpus) == job.gpus and job.gpus <= ix.max_gpus_per_node)
        return cls(pv=tab.pv, pv_list=tab.pv_list,
                   finish_now=now + estimated_runtime(ix, job, choice.gpus, ctx.locality_penalty),
                   worst_now=max(map(tab.pv_list.__getitem__, choice.gpus)),
                   could_gather=one_node and spans_nodes(ix.node_list, choice.gpus),
                   floor=job.remaining_s * float(tab.pv.min()) * (1.0 if one_node else ctx.locality_penalty),
                   margin=margin_fraction * job.remaining_s)


@dataclass(frozen=True)
class BetterLater:
    """Wait for a known release of better GPUs when that finishes the job sooner by more
    than `margin` of its estimate (see the module docstring)."""

    #: the fraction of its estimate a job must finish sooner by to wait
    margin: float = 0.05
    #: releases examined per job (bounds the cost per job)
    lookahead: int = 8
    #: searches for better GPUs per decision: past it, jobs start now. A 64-GPU simulation
    #: never reaches it.
    searches: int = 256
    #: a waiting job becomes the head, its awaited GPUs reserved (pal-backfill, pal-match)
    reserves: bool = True

    def better_later(self, job: JobRequest, choice: Choice, state: FreeState, snapshot: Snapshot,
                     ctx: PlacementContext, memo: ChoiceMemo, budget: SearchBudget) -> tuple[Reservation, float] | None:
        return self.search(job, choice, state, snapshot, ctx, memo, budget, self.margin)

    def search(self, job: JobRequest, choice: Choice, state: FreeState, snapshot: Snapshot, ctx: PlacementContext,
               memo: ChoiceMemo, budget: SearchBudget, margin_fraction: float) -> tuple[Reservation, float] | None:
        """The GPUs (and when) to wait for and how many seconds sooner the job then finishes,
        with `margin_fraction` as the margin; None to start now."""
        if job.remaining_s <= 0 or not snapshot.expected_end:
            return None
        bound = ctx.wait_bound_s(job.remaining_s)
        if bound <= 0:
            return None
        ix = state.index
        now = snapshot.now or 0.0
        goal = _Goal.of(ix, job, choice, ctx, now, margin_fraction)
        horizon = min(goal.finish_now - goal.floor - goal.margin, now + bound)  # later cannot help, or is too long
        releases = snapshot.releases
        lo = bisect.bisect_right(releases, now, key=lambda p: p[0])
        hi = bisect.bisect_left(releases, horizon, key=lambda p: p[0])
        best = self._best_release(job, releases[lo:hi], lo, goal, state, ctx, memo, budget)
        if best is None:
            return None
        return Reservation.of(ix, best[1], best[2]), goal.finish_now - best[0]

    def _best_release(self, job: JobRequest, ends: Sequence[tuple[float, Sequence[int]]], lo: int, goal: _Goal,
                      state: FreeState, ctx: PlacementContext, memo: ChoiceMemo,
                      budget: SearchBudget) -> tuple[float, float, tuple[int, ...]] | None:
        """(finish, release time, GPUs) of the release, in time order, after which the job
        finishes soonest and sooner than `goal` asks; None if there is none."""
        ix = state.index
        pv_list = goal.pv_list
        best: tuple[float, float, tuple[int, ...]] | None = None
        later = state.copy()
        looked = 0
        for i, (end, gpus) in enumerate(ends):
            if best is not None and end + goal.floor >= best[0]:
                break  # releases come in time order: from here on none can finish before `best`
            later.release(gpus)
            if not gpus or not (goal.could_gather or min(map(pv_list.__getitem__, gpus)) < goal.worst_now):
                continue
            looked += 1
            if looked > self.lookahead:
                break
            # cheapest possible finish after this release: the job's k best free GPUs
            # (ignoring locality); if even that is not enough better, skip the search. A
            # one-node job can only gain on a node this release touched (every other node
            # is as it was when it was last looked at, earlier), so its bound is the k-th
            # best free GPU of those nodes: exact, and far cheaper than a search
            bound_pv = (_touched_kth_best(ix, pv_list, later, job, gpus) if job.one_node
                        else _kth_best(goal.pv, later, job))
            if end + job.remaining_s * bound_pv >= goal.finish_now - goal.margin:
                continue
            if not budget.spend():
                break
            seen = memo.choose(("after-releases", lo + i), job, later, ctx)
            if seen is None:
                continue
            finish = end + estimated_runtime(ix, job, seen.gpus, ctx.locality_penalty)
            if finish < goal.finish_now - goal.margin and (best is None or finish < best[0]):
                best = (finish, end, seen.gpus)
        return best


@dataclass(frozen=True)
class NoiseGated:
    """`inner`, only where waiting can beat the noise: never for a class with nothing to
    choose, never from GPUs within the noise of the class's fastest, and with a margin of at
    least the noise (pal-guard's rule 4, pal_slurm.placement.guarded)."""

    inner: BetterLater = BetterLater()
    #: a waiting job reserves nothing: it takes its awaited GPUs by its place in the queue
    #: when they are released (each pass asks it again, each wait bounded from that pass;
    #: the placer's max_hold_s bounds a held job's whole wait). Why: a reservation holds
    #: every awaited GPU that is free already idle from the jobs behind it; for a 16-node
    #: job that could start now, that idled half of a 32 x 8 cluster while a crowd of small
    #: jobs queued (LLM-era mix, wide fleet, workload 1: the 1-GPU jobs' JCT 1.73x Slurm's
    #: with the reservation, 1.05x without; docs/simulation.md)
    reserves: bool = False

    @property
    def searches(self) -> int:
        return self.inner.searches

    def better_later(self, job: JobRequest, choice: Choice, state: FreeState, snapshot: Snapshot,
                     ctx: PlacementContext, memo: ChoiceMemo, budget: SearchBudget) -> tuple[Reservation, float] | None:
        tab = state.index.table(job.job_class)
        if quiet_table(tab, ctx.noise):
            return None
        pv = tab.pv_list
        if within_noise(fastest(tab), max(map(pv.__getitem__, choice.gpus)), ctx.noise):
            return None  # already as fast as any GPU of the class, within the noise
        return self.inner.search(job, choice, state, snapshot, ctx, memo, budget,
                                 max(self.inner.margin, ctx.noise))


def _kth_best(pv: np.ndarray, state: FreeState, job: JobRequest) -> float:
    """Lower bound of the max PerfVar of any set of `job.gpus` free GPUs the job may use."""
    cand = state.candidates(job.allowed_nodes)
    if cand.size < job.gpus:
        return math.inf
    free_pv = pv[cand]
    return float(np.partition(free_pv, job.gpus - 1)[job.gpus - 1])


def _touched_kth_best(ix: ClusterIndex, pv_list: list[float], state: FreeState, job: JobRequest,
                      released: Sequence[int]) -> float:
    """Lower bound of the max PerfVar of `job.gpus` free GPUs on one node that `released` touched."""
    best = math.inf
    node_gpus = ix.cluster.node_gpus
    mask = state.mask
    for v in {ix.node_list[g] for g in released}:
        if job.allowed_nodes is not None and v not in job.allowed_nodes:
            continue
        free = sorted(pv_list[g] for g in node_gpus[v] if mask[g])
        if len(free) >= job.gpus:
            best = min(best, free[job.gpus - 1])
    return best
