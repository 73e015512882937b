"""pal-backfill (and its variant pal-match): PAL's GPU choice without head-of-line blocking.

PAL, like every artifact policy, stops at the first job in its order that does not fit:
one wide job at the head idles every free GPU behind it until enough are free for it.
On the Sia-Philly traces most jobs are small, so there is nearly always a job that could
use those GPUs. pal-backfill keeps PAL's queue treatment and GPU choice and adds:

1. **EASY backfilling with the head's GPUs reserved.** For the first job that does not
   fit (the head) it computes the *shadow time*, the earliest time enough GPUs will be
   free (running jobs release at `snapshot.expected_end`, jobs placed earlier in this
   decision at now + their estimated runtime), and the GPUs PAL would give the head then.
   A later job starts now with PAL's choice if it is estimated to end by the shadow time
   or keeps off the reserved GPUs; else with PAL's choice among the unreserved GPUs;
   else it waits. Reserving the head's *expected GPUs* rather than a GPU count is the
   variability-aware part: a backfilled job that outlives the shadow time sits on GPUs
   the head would not have got, so the head starts as early and on the same GPUs.
2. **Waiting for better GPUs.** PAL starts a job on whatever fits, even a 2.8x-slow
   outlier GPU that a 24-GPU job then drags through days of training. When a running job
   with a known expected end frees GPUs on which this job would *finish* sooner (start
   later, run faster) by more than `wait_margin` of its remaining time, the job waits
   for them: it becomes the head with those GPUs reserved. Only running jobs count, so a
   caller that re-places everything each round (no running jobs in its snapshots, the
   artifact's round mode) never makes a job wait; there, re-placement already moves a
   job off bad GPUs at the next round.

Runtime estimates are `remaining_s` (time on a median GPU) times the largest raw
PerfVar among the chosen GPUs, times lambda when they span nodes -- the model the
simulators charge. A job without an estimate (remaining_s <= 0) is only admitted off the
reserved GPUs and never waits; a running job without an expected end is assumed never to
end. Both only make the policy more careful. The same rules serve the round mode and an
event mode without preemption, so the policy is `sticky = False` and has no mode flag.
Callers that know them should pass `JobRequest.remaining_s`, `Snapshot.now` and
`Snapshot.expected_end` (an event simulator and the daemon do); without them the policy
still backfills, only off the head's GPUs, and never waits.

Why it should win: backfilling turns GPUs PAL leaves idle into progress, and the
"ends by the shadow time" rule favours short jobs, which is where average JCT is won;
the reservation keeps the head's start and GPUs, and waiting keeps long jobs off GPUs
that would make them the last to finish, which protects the makespan. Measured figures
(six Sia-Philly workloads, both simulation modes, lambda 1.0-3.0) are in
docs/simulation.md; bench/fidelity.py and bench/lambda_sweep.py reproduce them.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from pal_slurm.placement.artifact import Pal
from pal_slurm.placement.base import Choice, check_unique, register
from pal_slurm.placement.cost import runtime_s, spans_nodes
from pal_slurm.placement.index import ClassTable, ClusterIndex, FreeState
from pal_slurm.placement.model import DEFAULT_CLASS, Decision, JobRequest, PlacementContext, Snapshot, Wait
from pal_slurm.placement.select import Candidates


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


def releases_of(snapshot: Snapshot, ctx: PlacementContext, placed: Sequence[tuple[JobRequest, Choice]],
                ix: ClusterIndex, estimate: Estimator) -> list[tuple[float, Sequence[int]]]:
    """(time, GPUs) each running job and each job placed in this decision frees, by time
    (a job placed now frees its GPUs `estimate` after now)."""
    now = snapshot.now or 0.0
    out: list[tuple[float, Sequence[int]]] = [
        (snapshot.expected_end.get(jid, math.inf), gpus) for jid, gpus in snapshot.running.items()]
    out += [(now + estimate(ix, j, c.gpus, ctx.locality_penalty), c.gpus) for j, c in placed]
    out.sort(key=lambda r: r[0])
    return out


@register
class PalBackfill(Pal):
    name = "pal-backfill"
    sticky = False
    description = ("PAL's GPU choice plus EASY backfilling that reserves the blocked head's expected GPUs, "
                   "and waiting for a known GPU release when that finishes a job sooner.")

    backfills = True
    #: jobs examined past the head (Slurm's bf_max_job_test plays the same role): bounds
    #: the cost of a decision when hundreds of jobs queue behind a blocked head
    lookahead = 64
    time_aware = True

    #: wait for better GPUs only when that is expected to finish the job sooner by more than
    #: this fraction of its remaining time (estimates are rough; churn is not free)
    wait_margin: float = 0.05
    #: releases examined when deciding whether to wait (bounds the cost per job)
    wait_lookahead: int = 8
    #: searches for "better GPUs later" per decision (bounds the cost of a decision that
    #: starts hundreds of jobs at once, as bf_max_job_test bounds Slurm's backfill pass);
    #: past it, jobs start now. A 64-GPU simulation never reaches it.
    wait_searches: int = 256

    def assign(self, snapshot: Snapshot, queue: Sequence[JobRequest], ctx: PlacementContext) -> Decision:
        check_unique(queue)
        ordered, guard = self.placement_order(queue, snapshot)
        decision = self._walk(snapshot, ordered, guard, ctx)
        return decision if decision is not None else self._walk(snapshot, list(queue), 0, ctx)  # type: ignore[return-value]

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
        """How long this policy expects `job` to run on `gpus` (the one cost model)."""
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
        key = (tag, state.index.table(job.job_class).key, job.gpus, job.gpus_per_node, job.allowed_nodes,
               job.same_slots, job.min_nodes, job.max_nodes)
        if key not in memo:
            memo[key] = self.choose(job, state, ctx)
        return memo[key]

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
        hidden = tuple(int(g) for g in np.flatnonzero(booking.held & state.mask))
        state.take(hidden)
        try:
            other = (self.choose(job, state, ctx) if memo is None
                     else self._memo_choose(("off-reserved", booking.gpus), job, state, ctx, memo))
        finally:
            state.release(hidden)
        if other is None:
            return None
        return _noted(other, f"backfilled past {head.id} on GPUs it will not need "
                             f"(it expects {', '.join(map(str, booking.gpus))})")

    def _better_later(self, job: JobRequest, choice: Choice, state: FreeState, snapshot: Snapshot,
                      ctx: PlacementContext, memo: dict[tuple[object, ...], Choice | None] | None = None,
                      budget: list[int] | None = None) -> tuple[Reservation, float] | None:
        """GPUs (and when) to wait for, and how many seconds sooner the job is then expected
        to finish, if a running job's release lets it finish sooner than starting now on
        `choice` would; None to start now.

        Only GPUs held by running jobs with a known expected end count: jobs placed in
        this decision do not, so a caller that re-places everything each round (no
        running jobs in its snapshots) never makes a job wait. Only releases expected within
        `ctx.wait_bound_s(estimate)` of now count: waiting is bounded. `budget` (one number,
        decremented) caps the searches a whole decision makes (`wait_searches`).
        """
        ix = state.index
        if job.remaining_s <= 0 or not snapshot.expected_end:
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
        margin = self.wait_margin * job.remaining_s
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


@register
class PalMatch(PalBackfill):
    """pal-backfill plus class matching: a job less sensitive than class A takes, among
    GPUs that are equally good for itself (same sf level, same PM-First locality score;
    on PAL's within-node step, any set with the same max sf), those worst for class A
    first, instead of the lowest ids. Class A keeps more of its best GPUs free in a
    cluster where nothing is ever moved. Ties never cost the job speed: its max sf is the
    same as under PAL's rule, and where PAL's choice stays on one node and the matched
    one would not, PAL's is taken (no locality penalty for the sake of matching).

    Measured like pal-backfill (see the module docstring), over the same 72 runs: average
    JCT within 1% of pal-backfill's (geomean; better on some traces, worse on others),
    makespan never above pal's. Kept as a variant to evaluate on real variability data,
    where one GPU's factors for different classes are correlated rather than drawn apart.
    """

    name = "pal-match"
    description = "pal-backfill plus class matching: insensitive jobs take the GPUs worst for class A first."

    def spare_order(self, ix: ClusterIndex, tab: ClassTable) -> np.ndarray | None:
        """Class A's worst GPUs first (0), for jobs of any other class; None for class A."""
        sensitive = ix.table(DEFAULT_CLASS)
        if tab.key == sensitive.key:
            return None
        return (sensitive.n_levels - 1) - sensitive.level

    def pick(self, job: JobRequest, cand: np.ndarray, state: FreeState, ctx: PlacementContext) -> Choice | None:
        ix = state.index
        tab = ix.table(job.job_class)
        c = Candidates.build(ix, tab, cand)
        spare = self.spare_order(ix, tab)
        if spare is None:
            return self.pal_choice(ix, tab, c, job.gpus, ctx, spare=None)
        mine = self.pal_choice(ix, tab, c, job.gpus, ctx, spare=spare)
        if mine is None or not _spans(ix, mine.gpus):
            return mine
        theirs = self.pal_choice(ix, tab, c, job.gpus, ctx, spare=None)
        return theirs if theirs is not None and not _spans(ix, theirs.gpus) else mine


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
    return Choice(gpus=choice.gpus, why=lambda: f"{choice.reason}; {why}", alternatives=choice.alternatives)
