"""One EASY backfill mechanism for every backfilling policy here; its parts are swapped in.

Why one: the baseline (Slurm as shipped) and pal-slurm's policies must differ only in
the part that is about variability, or a measured difference could come from anywhere.
So the mechanism -- walk the queue in order, give the first job that does not fit (the
head) a reservation, start later jobs only when they do not delay it, let a job wait when
the wait rule says so -- lives here once, and a policy is this mechanism plus three parts
passed in (pal_slurm.placement.table composes them):

- the GPU chooser (`base.GpuChooser`: its `choose` picks GPUs for one job, its
  `placement_order` the order jobs are tried in): cons_tres's first fit
  (pal_slurm.placement.first_fit), PAL's choice (pal_slurm.placement.artifact), or the
  default no-harm choice (pal_slurm.placement.guarded);
- the estimator (`Estimator`): how long a job is expected to run on given GPUs (Slurm:
  its time limit, `by_time_limit`; pal-backfill: the cost model, `estimated_runtime`);
- the wait rule (`WaitRule`, pal_slurm.placement.waiting): whether a job that could start
  now waits for a known release of better GPUs instead.

**The mechanism** (EASY backfilling with the head's GPUs reserved). For the head it
computes the *shadow time*, the earliest time enough GPUs will be free (running jobs
release at `snapshot.expected_end`, jobs placed earlier in this decision at now + their
estimate), and the GPUs the chooser would give the head then. A later job starts now if
it is estimated to end by the shadow time or keeps off the reserved GPUs; else on the
chooser's choice among the unreserved GPUs; else it waits. Reserving the head's
*expected GPUs* rather than a GPU count keeps the head's start and GPUs. A job the wait
rule keeps waiting becomes the head, with the GPUs it waits for reserved.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from itertools import chain
from typing import ClassVar, Protocol

import numpy as np

from pal_slurm.placement.base import Choice, GpuChooser, Policy, in_chooser_order
from pal_slurm.placement.cost import runtime_s
from pal_slurm.placement.index import ClusterIndex, FreeState
from pal_slurm.placement.model import Decision, JobRequest, PlacementContext, PolicyRow, Snapshot, Wait

#: how long a job is expected to run on given GPUs: (index, job, GPUs, lambda) -> seconds (inf: unknown)
Estimator = Callable[[ClusterIndex, JobRequest, Sequence[int], float], float]


def estimated_runtime(ix: ClusterIndex, job: JobRequest, gpus: Sequence[int], penalty: float) -> float:
    """remaining_s on these GPUs by the one cost model (pal_slurm.placement.cost); inf if unknown."""
    if job.remaining_s <= 0 or not gpus:
        return math.inf
    return runtime_s(job.remaining_s, gpus, ix.table(job.job_class).pv_list, ix.node_list, penalty)


def time_limit_s(job: JobRequest) -> float:
    """Slurm's own expectation of a job's run time: its time limit, on any GPUs (inf if none)."""
    return job.remaining_s if job.remaining_s > 0 else math.inf


def by_time_limit(ix: ClusterIndex, job: JobRequest, gpus: Sequence[int], penalty: float) -> float:
    """The estimator of Slurm's backfill: the time limit, whatever the GPUs."""
    return time_limit_s(job)


@dataclass(frozen=True, eq=False)
class Reservation:
    """The promise to the blocked head: the GPUs it is expected to start on, and when.

    Hashed by identity: it tags the choices remembered off its GPUs (ChoiceMemo), asked for
    every job weighed past the head, and hashing the ids of a whole-node head's thousands
    of GPUs each time cost more than most of those choices."""

    shadow: float  # the head's expected start; inf when some release time is unknown
    held: np.ndarray  # GPU mask of the head's expected GPUs (all False: nothing held)
    gpus: tuple[int, ...]  # the same, as ids, for explanations

    @classmethod
    def none(cls, ix: ClusterIndex) -> "Reservation":
        return cls(shadow=math.inf, held=np.zeros(ix.n, dtype=bool), gpus=())

    @classmethod
    def of(cls, ix: ClusterIndex, shadow: float, gpus: tuple[int, ...]) -> "Reservation":
        held = np.zeros(ix.n, dtype=bool)
        held[np.fromiter(gpus, dtype=np.int64, count=len(gpus))] = True
        return cls(shadow=shadow, held=held, gpus=gpus)


class ChoiceMemo:
    """The chooser's answers within one decision, remembered per (tag, class, shape) while
    the decision takes no GPUs: a deterministic choice depends on nothing else, and queues
    repeat shapes a lot (the tag says which free GPUs were asked about: now, now without the
    head's, after the first i releases). A chooser that draws from ctx.rng is always asked."""

    def __init__(self, chooser: GpuChooser) -> None:
        self.chooser = chooser
        self.keeps = chooser.deterministic
        self._memo: dict[tuple[object, ...], Choice | None] = {}

    def choose(self, tag: object, job: JobRequest, state: FreeState, ctx: PlacementContext) -> Choice | None:
        if not self.keeps:
            return self.chooser.choose(job, state, ctx)
        key = self._key(tag, job, state)
        if key not in self._memo:
            self._memo[key] = self.chooser.choose(job, state, ctx)
        return self._memo[key]

    def choose_off(self, tag: object, job: JobRequest, state: FreeState, ctx: PlacementContext,
                   held: np.ndarray) -> Choice | None:
        """The choice with the GPUs of the mask `held` hidden (remembered under `tag`)."""
        if self.keeps:
            key = self._key(tag, job, state)
            if key in self._memo:
                return self._memo[key]
        return self.choose(tag, job, state.without(held), ctx)

    def clear(self) -> None:
        """The decision took GPUs: every remembered answer may be stale."""
        self._memo.clear()

    @staticmethod
    def _key(tag: object, job: JobRequest, state: FreeState) -> tuple[object, ...]:
        return (tag, state.index.table(job.job_class).key, job.gpus, job.gpus_per_node, job.allowed_nodes,
                job.same_slots, job.min_nodes, job.max_nodes)


@dataclass
class SearchBudget:
    """Searches for better GPUs left in one decision (bounds the cost of a decision that starts
    hundreds of jobs at once, as bf_max_job_test bounds Slurm's backfill pass)."""

    left: int

    def spend(self) -> bool:
        """Take one search; False when none is left."""
        if self.left <= 0:
            return False
        self.left -= 1
        return True


class WaitRule(Protocol):
    """Whether a job that could start now on `choice` waits for better GPUs instead."""

    @property
    def searches(self) -> int:
        """Searches for better GPUs one decision may make (its SearchBudget)."""
        ...

    def better_later(self, job: JobRequest, choice: Choice, state: FreeState, snapshot: Snapshot,
                     ctx: PlacementContext, memo: ChoiceMemo, budget: SearchBudget) -> tuple[Reservation, float] | None:
        """The GPUs to wait for (and when), and how many seconds sooner the job is then
        expected to finish; None to start now."""
        ...

    @property
    def reserves(self) -> bool:
        """Whether a waiting job becomes the head, its awaited GPUs reserved from the jobs
        behind it (False: it holds nothing and takes them by its place in the queue)."""
        ...


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


def from_enough_gpus(state: FreeState, job: JobRequest,
                     releases: Iterator[tuple[float, Sequence[int]]]) -> Iterator[tuple[float, Sequence[int]]]:
    """`releases` from the first one after which `state` could have `job.gpus` GPUs free on
    the job's allowed nodes (counting every GPU released as newly free and allowed); the
    ones before it freed in `state` at once, and all of them when there is no such release.

    Why: a reservation frees release after release and asks could_fit after each, and
    could_fit needs that many free GPUs; before that release it cannot hold, so freeing
    those releases together leaves `state` as freeing them one by one would, without a
    numpy update and a could_fit per release (a whole-node head on a site of thousands of
    nodes waits for hundreds of releases, and this bound is seldom more than a few short
    of the release it first fits after)."""
    short = job.gpus - state.free_on(job.allowed_nodes)
    skipped: list[Sequence[int]] = []
    for end, gpus in releases:
        short -= len(gpus)
        if short <= 0:
            _release_all(state, skipped)
            yield end, gpus
            yield from releases
            return
        skipped.append(gpus)
    _release_all(state, skipped)


def _release_all(state: FreeState, releases: Sequence[Sequence[int]]) -> None:
    """Free the GPUs of all `releases` in one update."""
    if releases:
        state.release(np.fromiter(chain.from_iterable(releases), dtype=np.int64))


@dataclass(frozen=True)
class EasyBackfill(Policy):
    """EASY backfilling over a chooser, an estimator and a wait rule (see the module docstring)."""

    row: PolicyRow[Policy]
    chooser: GpuChooser
    estimate: Estimator
    wait: WaitRule
    #: jobs examined past the head (Slurm's bf_max_job_test plays the same role): bounds
    #: the cost of a decision when hundreds of jobs queue behind a blocked head
    lookahead: int = 64
    #: the chooser the head's reservation is planned with (None: `chooser`). pal-guard plans
    #: with Slurm's first fit, so its blocked head starts when Slurm's would and the jobs
    #: behind it keep off the same GPUs pass after pass; it chooses better GPUs only among
    #: those free when the head starts. A reservation by the variability choice moves with
    #: each pass's best nodes, and jobs admitted off one pass's reservation sat on the next
    #: one's (16 x 4, Longhorn per GPU, workload 3: average JCT 1.026 of Slurm's planned by
    #: the variability choice, 0.996 by first fit; docs/simulation.md)
    planner: GpuChooser | None = None

    backfills: ClassVar[bool] = True
    time_aware: ClassVar[bool] = True

    def assign(self, snapshot: Snapshot, queue: Sequence[JobRequest], ctx: PlacementContext) -> Decision:
        return in_chooser_order(self.chooser, snapshot, queue, lambda ordered, guard: self._walk(
            snapshot, ordered, guard, ctx))

    def _walk(self, snapshot: Snapshot, ordered: Sequence[JobRequest], guard: int,
              ctx: PlacementContext) -> Decision | None:
        """One pass in `ordered`; None when one of its first `guard` jobs finds no GPUs now
        (see chooser.class_sorted_order)."""
        state = FreeState(snapshot)
        placed: list[tuple[JobRequest, Choice]] = []
        head: JobRequest | None = None
        booking = Reservation.none(state.index)
        past_head = 0
        # choices on "the free GPUs after the first i releases" are the same for every job
        # of one (class, shape) until this decision takes GPUs: remember them meanwhile
        memo = ChoiceMemo(self.chooser)
        waits: list[Wait] = []
        budget = SearchBudget(self.wait.searches)
        for i, job in enumerate(ordered):
            if head is not None:
                past_head += 1
                if state.n_free == 0 or past_head > self.lookahead:
                    break
            choice = memo.choose("now", job, state, ctx)
            if choice is None and i < guard:
                return None
            if head is not None and choice is not None:
                choice = self._admit(job, choice, head, booking, state, snapshot, ctx, memo)
            if choice is None:
                if head is None:
                    head, booking = job, self._reserve(job, state, snapshot, ctx, placed)
                continue
            found = self.wait.better_later(job, choice, state, snapshot, ctx, memo, budget)
            if found is not None:
                later, sooner = found
                waits.append(Wait(job_id=job.id, gpus=later.gpus, free_at=later.shadow, sooner_s=sooner))
                if head is None and self.wait.reserves:
                    head, booking = job, later
                continue
            state.take(choice.gpus)
            memo.clear()
            placed.append((job, choice))
        return Decision(assignments=tuple(c.assignment(j.id) for j, c in placed),
                        blocked=None if head is None else head.id, waits=tuple(waits))

    def _reserve(self, head: JobRequest, state: FreeState, snapshot: Snapshot, ctx: PlacementContext,
                 placed: Sequence[tuple[JobRequest, Choice]]) -> Reservation:
        """When the head can start and on which GPUs the chooser would put it then."""
        later = state.copy()
        planner = self.planner or self.chooser
        releases = releases_of(snapshot, ctx, placed, state.index, self.estimate)
        for end, gpus in from_enough_gpus(later, head, releases):
            later.release(gpus)
            if later.could_fit(head):
                seen = planner.choose(head, later, ctx)
                if seen is not None:
                    return Reservation.of(state.index, end, seen.gpus)
        # the head does not fit even once everything this snapshot knows of has ended (it
        # asks for more than there is): holding GPUs for it would idle them for nothing
        return Reservation.none(state.index)

    def _admit(self, job: JobRequest, choice: Choice, head: JobRequest, booking: Reservation, state: FreeState,
               snapshot: Snapshot, ctx: PlacementContext, memo: ChoiceMemo) -> Choice | None:
        """Past the head: this choice if it ends by the head's start or keeps off the head's
        GPUs; else the choice among the GPUs the head will not need; else nothing."""
        end = (snapshot.now or 0.0) + self.estimate(state.index, job, choice.gpus, ctx.locality_penalty)
        if end <= booking.shadow < math.inf:
            return noted(choice, f"backfilled past {head.id}: ends by its expected start "
                                 f"({end:.0f} <= {booking.shadow:.0f})")
        if not booking.held[list(choice.gpus)].any():
            return noted(choice, f"backfilled past {head.id}: keeps off the GPUs it expects")
        other = memo.choose_off(("off-reserved", booking), job, state, ctx, booking.held)
        if other is None:
            return None
        return noted(other, lambda: f"backfilled past {head.id} on GPUs it will not need "
                                    f"(it expects {', '.join(map(str, booking.gpus))})")


def noted(choice: Choice, why: str | Callable[[], str]) -> Choice:
    """The choice with `why` added to its reason (and everything else it says kept: that it
    is first fit's, or which GPUs first fit would have given). A callable `why` is only
    called when the reason is read: a head of a thousand nodes would otherwise have its
    GPUs listed for every job weighed past it."""
    return replace(choice, why=lambda: f"{choice.reason}; {why() if callable(why) else why}")
