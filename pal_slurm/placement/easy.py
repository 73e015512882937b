"""One EASY backfill mechanism for every backfilling policy here; the GPU choice is swapped in.

Why one: the baseline (Slurm as shipped) and pal-slurm's policies must differ only in
the part that is about variability, or a measured difference could come from anywhere.
So the mechanism -- walk the queue in order, give the first job that does not fit (the
head) a reservation, start later jobs only when they do not delay it, optionally let a
job wait for a known release of better GPUs -- lives here once, and a policy is this
mechanism plus three typed parts:

- `make_chooser()`: the GPU chooser (an InOrderPolicy used for its `choose` and its
  `placement_order`): cons_tres's first fit (pal_slurm.placement.first_fit), PAL's
  choice (pal_slurm.placement.artifact.Pal), or the default no-harm choice
  (pal_slurm.placement.guarded);
- `estimate()`: how long a job is expected to run on given GPUs (Slurm: its time limit;
  pal-backfill: the cost model);
- `waits`: whether a job may wait for better GPUs (`_better_later`).

**The mechanism** (EASY backfilling with the head's GPUs reserved). For the head it
computes the *shadow time*, the earliest time enough GPUs will be free (running jobs
release at `snapshot.expected_end`, jobs placed earlier in this decision at now + their
estimate), and the GPUs the chooser would give the head then. A later job starts now if
it is estimated to end by the shadow time or keeps off the reserved GPUs; else on the
chooser's choice among the unreserved GPUs; else it waits. Reserving the head's
*expected GPUs* rather than a GPU count keeps the head's start and GPUs.

**Waiting for better GPUs.** When a running job with a known expected end frees GPUs on
which this job would *finish* sooner (start later, run faster) by more than
`wait_margin` of its remaining time, the job waits for them: it becomes the head with
those GPUs reserved. Only running jobs count, so a caller that re-places everything each
round (no running jobs in its snapshots) never makes a job wait.
"""

from __future__ import annotations

import bisect
import heapq
import math
from abc import abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np

from pal_slurm.placement.base import Choice, InOrderPolicy, Policy, walk_in_order
from pal_slurm.placement.cost import runtime_s, spans_nodes
from pal_slurm.placement.index import ClusterIndex, FreeState
from pal_slurm.placement.model import Decision, JobRequest, PlacementContext, Snapshot, Wait

Estimator = Callable[[ClusterIndex, JobRequest, Sequence[int], float], float]


def estimated_runtime(ix: ClusterIndex, job: JobRequest, gpus: Sequence[int], penalty: float) -> float:
    """remaining_s on these GPUs by the one cost model (pal_slurm.placement.cost); inf if unknown."""
    if job.remaining_s <= 0 or not gpus:
        return math.inf
    return runtime_s(job.remaining_s, gpus, ix.table(job.job_class).pv_list, ix.node_list, penalty)


@dataclass(frozen=True)
class Reservation:
    """The promise to the blocked head: the GPUs it is expected to start on, and when."""

    shadow: float  # the head's expected start; inf when some release time is unknown
    held: np.ndarray  # GPU mask of the head's expected GPUs (all False: nothing held)
    gpus: tuple[int, ...]  # the same, as ids, for explanations

    @classmethod
    def none(cls, ix: ClusterIndex) -> "Reservation":
        return cls(shadow=math.inf, held=np.zeros(ix.n, dtype=bool), gpus=())

    @classmethod
    def of(cls, ix: ClusterIndex, shadow: float, gpus: tuple[int, ...]) -> "Reservation":
        held = np.zeros(ix.n, dtype=bool)
        held[list(gpus)] = True
        return cls(shadow=shadow, held=held, gpus=gpus)


def time_limit_s(job: JobRequest) -> float:
    """Slurm's own expectation of a job's run time: its time limit, on any GPUs (inf if none)."""
    return job.remaining_s if job.remaining_s > 0 else math.inf


def releases_of(snapshot: Snapshot, ctx: PlacementContext, placed: Sequence[tuple[JobRequest, Choice]],
                ix: ClusterIndex, estimate: Estimator) -> Iterator[tuple[float, Sequence[int]]]:
    """(time, GPUs) each running job and each job placed in this decision frees, by time
    (a job placed now frees its GPUs `estimate` after now; at one time, running jobs first).

    Lazy, over the snapshot's own sorted releases: a reservation usually needs only the
    first few of thousands of running jobs."""
    now = snapshot.now or 0.0
    mine = sorted(((now + estimate(ix, j, c.gpus, ctx.locality_penalty), c.gpus) for j, c in placed),
                  key=lambda r: r[0])
    finite = [r for r in mine if r[0] != math.inf]
    yield from heapq.merge(snapshot.releases, finite, key=lambda r: r[0])
    if len(snapshot.releases) != len(snapshot.running):  # running jobs with no expected end
        known = snapshot.expected_end
        for jid, gpus in snapshot.running.items():
            end = known.get(jid)
            if end is None or end == math.inf:
                yield math.inf, gpus
    yield from (r for r in mine if r[0] == math.inf)


class EasyBackfill(Policy):
    """EASY backfilling over a swapped-in GPU chooser (see the module docstring)."""

    backfills = True
    #: jobs examined past the head (Slurm's bf_max_job_test plays the same role): bounds
    #: the cost of a decision when hundreds of jobs queue behind a blocked head
    lookahead = 64
    time_aware = True
    #: whether a job may wait for a known release of better GPUs
    waits: ClassVar[bool] = True

    #: wait for better GPUs only when that is expected to finish the job sooner by more than
    #: this fraction of its remaining time (estimates are rough; churn is not free)
    wait_margin: float = 0.05
    #: releases examined when deciding whether to wait (bounds the cost per job)
    wait_lookahead: int = 8
    #: searches for "better GPUs later" per decision (bounds the cost of a decision that
    #: starts hundreds of jobs at once, as bf_max_job_test bounds Slurm's backfill pass);
    #: past it, jobs start now. A 64-GPU simulation never reaches it.
    wait_searches: int = 256

    def __init__(self) -> None:
        chooser = self.make_chooser()
        chooser.name = self.name  # type: ignore[misc]  # reasons name the policy that placed the job
        self.chooser = chooser

    @abstractmethod
    def make_chooser(self) -> InOrderPolicy:
        """The GPU chooser: its `choose` picks GPUs for one job, its `placement_order` the
        order jobs are tried in."""

    def choose(self, job: JobRequest, state: FreeState, ctx: PlacementContext) -> Choice | None:
        return self.chooser.choose(job, state, ctx)

    def placement_order(self, queue: Sequence[JobRequest], snapshot: Snapshot) -> tuple[list[JobRequest], int]:
        return self.chooser.placement_order(queue, snapshot)

    def assign(self, snapshot: Snapshot, queue: Sequence[JobRequest], ctx: PlacementContext) -> Decision:
        return walk_in_order(self, snapshot, queue, ctx)

    def _walk(self, snapshot: Snapshot, ordered: Sequence[JobRequest], guard: int,
              ctx: PlacementContext) -> Decision | None:
        """One pass in `ordered`; None when one of its first `guard` jobs finds no GPUs now
        (see InOrderPolicy.placement_order)."""
        state = FreeState(snapshot)
        ix = state.index
        placed: list[tuple[JobRequest, Choice]] = []
        head: JobRequest | None = None
        booking = Reservation.none(ix)
        past_head = 0
        # choices on "the free GPUs after the first i releases" are the same for every job
        # of one (class, shape) until this decision takes GPUs: remember them meanwhile
        memo: dict[tuple[object, ...], Choice | None] = {}
        waits: list[Wait] = []
        budget = [self.wait_searches]  # searches for better GPUs left in this decision
        for i, job in enumerate(ordered):
            if head is not None:
                past_head += 1
                if state.n_free == 0 or past_head > self.lookahead:
                    break
            choice = self._memo_choose("now", job, state, ctx, memo)
            if choice is None and i < guard:
                return None
            if head is not None and choice is not None:
                choice = self._admit(job, choice, head, booking, state, snapshot, ctx, memo)
            if choice is None:
                if head is None:
                    head, booking = job, self._reserve(job, state, snapshot, ctx, placed)
                continue
            found = self._better_later(job, choice, state, snapshot, ctx, memo, budget)
            if found is not None:
                later, sooner = found
                waits.append(Wait(job_id=job.id, gpus=later.gpus, free_at=later.shadow, sooner_s=sooner))
                if head is None:
                    head, booking = job, later
                continue
            state.take(choice.gpus)
            memo.clear()
            placed.append((job, choice))
        return Decision(assignments=tuple(c.assignment(j.id) for j, c in placed),
                        blocked=None if head is None else head.id, waits=tuple(waits))

    def estimate(self, ix: ClusterIndex, job: JobRequest, gpus: Sequence[int], penalty: float) -> float:
        """How long this policy expects `job` to run on `gpus` (default: the one cost model)."""
        return estimated_runtime(ix, job, gpus, penalty)

    def _reserve(self, head: JobRequest, state: FreeState, snapshot: Snapshot, ctx: PlacementContext,
                 placed: Sequence[tuple[JobRequest, Choice]]) -> Reservation:
        """When the head can start and on which GPUs this policy would put it then."""
        later = state.copy()
        for end, gpus in releases_of(snapshot, ctx, placed, state.index, self.estimate):
            later.release(gpus)
            if later.free_on(head.allowed_nodes) >= head.gpus:
                seen = self.choose(head, later, ctx)
                if seen is not None:
                    return Reservation.of(state.index, end, seen.gpus)
        # the head does not fit even once everything this snapshot knows of has ended (it
        # asks for more than there is): holding GPUs for it would idle them for nothing
        return Reservation.none(state.index)

    def _memo_choose(self, tag: object, job: JobRequest, state: FreeState, ctx: PlacementContext,
                     memo: dict[tuple[object, ...], Choice | None]) -> Choice | None:
        """self.choose, remembered per (tag, class, shape) while the decision takes no GPUs
        (a deterministic choice depends on nothing else; queues repeat shapes a lot)."""
        if not self.deterministic:
            return self.choose(job, state, ctx)
        key = self._memo_key(tag, job, state)
        if key not in memo:
            memo[key] = self.choose(job, state, ctx)
        return memo[key]

    @staticmethod
    def _memo_key(tag: object, job: JobRequest, state: FreeState) -> tuple[object, ...]:
        return (tag, state.index.table(job.job_class).key, job.gpus, job.gpus_per_node, job.allowed_nodes,
                job.same_slots, job.min_nodes, job.max_nodes)

    def _admit(self, job: JobRequest, choice: Choice, head: JobRequest, booking: Reservation, state: FreeState,
               snapshot: Snapshot, ctx: PlacementContext,
               memo: dict[tuple[object, ...], Choice | None] | None = None) -> Choice | None:
        """Past the head: this choice if it ends by the head's start or keeps off the head's
        GPUs; else the choice among the GPUs the head will not need; else nothing."""
        ix = state.index
        end = (snapshot.now or 0.0) + self.estimate(ix, job, choice.gpus, ctx.locality_penalty)
        if end <= booking.shadow < math.inf:
            return _noted(choice, f"backfilled past {head.id}: ends by its expected start "
                                  f"({end:.0f} <= {booking.shadow:.0f})")
        if not booking.held[list(choice.gpus)].any():
            return _noted(choice, f"backfilled past {head.id}: keeps off the GPUs it expects")
        tag = ("off-reserved", booking.gpus)
        key = self._memo_key(tag, job, state) if memo is not None and self.deterministic else None
        if key is not None and key in memo:  # type: ignore[operator]
            other = memo[key]  # type: ignore[index]
        else:
            hidden = tuple(np.flatnonzero(booking.held & state.mask).tolist())
            state.take(hidden)
            try:
                other = (self.choose(job, state, ctx) if memo is None
                         else self._memo_choose(tag, job, state, ctx, memo))
            finally:
                state.release(hidden)
        if other is None:
            return None
        return _noted(other, f"backfilled past {head.id} on GPUs it will not need "
                             f"(it expects {', '.join(map(str, booking.gpus))})")

    def _better_later(self, job: JobRequest, choice: Choice, state: FreeState, snapshot: Snapshot,
                      ctx: PlacementContext, memo: dict[tuple[object, ...], Choice | None] | None = None,
                      budget: list[int] | None = None,
                      margin_fraction: float | None = None) -> tuple[Reservation, float] | None:
        """GPUs (and when) to wait for, and how many seconds sooner the job is then expected
        to finish, if a running job's release lets it finish sooner than starting now on
        `choice` would; None to start now.

        Only GPUs held by running jobs with a known expected end count: jobs placed in
        this decision do not, so a caller that re-places everything each round (no
        running jobs in its snapshots) never makes a job wait. Only releases expected within
        `ctx.wait_bound_s(estimate)` of now count: waiting is bounded. `budget` (one number,
        decremented) caps the searches a whole decision makes (`wait_searches`);
        `margin_fraction` replaces `wait_margin` (a policy whose margin depends on the context).
        """
        ix = state.index
        if not self.waits or job.remaining_s <= 0 or not snapshot.expected_end:
            return None
        bound = ctx.wait_bound_s(job.remaining_s)
        if bound <= 0:
            return None
        now = snapshot.now or 0.0
        pv = ix.table(job.job_class).pv
        finish_now = now + estimated_runtime(ix, job, choice.gpus, ctx.locality_penalty)
        pv_list = ix.table(job.job_class).pv_list
        worst_now = max(pv_list[g] for g in choice.gpus)
        one_node = job.one_node or ((job.gpus_per_node or job.gpus) == job.gpus and job.gpus <= ix.max_gpus_per_node)
        could_gather = one_node and _spans(ix, choice.gpus)
        floor = job.remaining_s * float(pv.min()) * (1.0 if one_node else ctx.locality_penalty)
        margin = (self.wait_margin if margin_fraction is None else margin_fraction) * job.remaining_s
        horizon = min(finish_now - floor - margin, now + bound)  # starting after this cannot help, or is too long
        releases = snapshot.releases
        lo = bisect.bisect_right(releases, now, key=lambda p: p[0])
        hi = bisect.bisect_left(releases, horizon, key=lambda p: p[0])
        ends = releases[lo:hi]
        best: tuple[float, float, tuple[int, ...]] | None = None
        later = state.copy()
        looked = 0
        for i, (end, gpus) in enumerate(ends):
            if best is not None and end + floor >= best[0]:
                break  # releases come in time order: from here on none can finish before `best`
            later.release(gpus)
            # a release can only help with a GPU faster than the worst one chosen now, or
            # by letting a job that now spans nodes fit on one
            if not gpus or not (could_gather or min(pv_list[g] for g in gpus) < worst_now):
                continue
            looked += 1
            if looked > self.wait_lookahead:
                break
            # cheapest possible finish after this release: the job's k best free GPUs
            # (ignoring locality); if even that is not enough better, skip the search. A
            # one-node job can only gain on a node this release touched (every other node
            # is as it was when it was last looked at, earlier), so its bound is the k-th
            # best free GPU of those nodes: exact, and far cheaper than a search
            bound_pv = (_touched_kth_best(ix, pv_list, later, job, gpus) if job.one_node
                        else _kth_best(pv, later, job))
            if end + job.remaining_s * bound_pv >= finish_now - margin:
                continue
            if budget is not None:
                if budget[0] <= 0:
                    break
                budget[0] -= 1
            seen = (self.choose(job, later, ctx) if memo is None
                    else self._memo_choose(("after-releases", lo + i), job, later, ctx, memo))
            if seen is None:
                continue
            finish = end + estimated_runtime(ix, job, seen.gpus, ctx.locality_penalty)
            if finish < finish_now - margin and (best is None or finish < best[0]):
                best = (finish, end, seen.gpus)
        if best is None:
            return None
        return Reservation.of(ix, best[1], best[2]), finish_now - best[0]


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


def _spans(ix: ClusterIndex, gpus: Sequence[int]) -> bool:
    return spans_nodes(ix.node_list, gpus)


def _noted(choice: Choice, why: str) -> Choice:
    """The choice with `why` added to its reason (and everything else it says kept: that it
    is first fit's, or which GPUs first fit would have given)."""
    return replace(choice, why=lambda: f"{choice.reason}; {why}")
