"""The policy interface and the parts every policy is composed of.

A policy maps (snapshot, queue in queue order, context) to a `Decision`. Every policy here
is a *mechanism* (pal_slurm.placement.in_order, easy, slurm_reserving: how the queue is
walked, what a blocked job is promised, whether a job may wait) composed with a *GPU
chooser* (`GpuChooser`: which GPUs one job gets, and the order jobs are tried in), named
by its row of the policy table (pal_slurm.placement.table). Why parts and not subclasses:
the baseline and pal-slurm's policies must differ only in the part that is about
variability, and a subclass that overrides its parent's private steps hides which part
that is.

`Policy.place` is where every mechanism's decision is checked (`enforce_shapes`), so that
no policy, in the table now or later, can hand Slurm a reshaped job.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import ClassVar, Protocol

import numpy as np

from pal_slurm.placement.index import ClassTable, ClusterIndex, FreeState
from pal_slurm.placement.model import (
    JOB_CLASSES,
    Assignment,
    Decision,
    JobRequest,
    PlacementContext,
    PlacementError,
    PolicyRow,
    Snapshot,
)

#: PM-First's class order; a class outside it (or none) ranks as A, the worst case.
CLASS_RANK: dict[str, int] = {c: i for i, c in enumerate(JOB_CLASSES)}


def class_rank(job_class: str | None) -> int:
    return CLASS_RANK.get(job_class or "", 0)


@dataclass(frozen=True)
class Choice:
    """GPUs chosen for one job, with the explanation that goes into its Assignment.

    `why` is the explanation or a function that writes it: a backfilling policy weighs
    several choices per job (now, after each release, off the reserved GPUs) and places
    few of them, so the text is written only for the choices that are kept.
    """

    gpus: tuple[int, ...]
    why: str | Callable[[], str]
    alternatives: tuple[tuple[tuple[int, ...], float], ...] = ()
    #: the GPUs Slurm's own first fit would give (see Assignment.first_fit)
    first_fit: bool = False
    #: a variability choice: the GPUs first fit would have given instead (Assignment.instead_of)
    instead_of: tuple[int, ...] | None = None

    @property
    def reason(self) -> str:
        return self.why if isinstance(self.why, str) else self.why()

    def assignment(self, job_id: str) -> Assignment:
        return Assignment(job_id=job_id, gpus=self.gpus, reason=self.reason, alternatives=self.alternatives,
                          first_fit=self.first_fit, instead_of=self.instead_of)


#: from this many GPUs on, a choice is gathered and sorted with numpy: below it numpy's
#: per-call overhead costs more than Python's loop; above it a whole-node job of a thousand
#: nodes listed node by node in Python cost most of a site-scale simulation (bench/sim_speed.py)
NUMPY_AT = 32


def as_gpus(ids: np.ndarray | Sequence[int]) -> tuple[int, ...]:
    """GPU ids as an ascending tuple of ints (Python's sort below `NUMPY_AT` ids, numpy's
    from there)."""
    if len(ids) >= NUMPY_AT:
        return tuple(np.sort(np.asarray(ids, dtype=np.int64)).tolist())
    return tuple(sorted(int(g) for g in (ids.tolist() if isinstance(ids, np.ndarray) else ids)))


#: GPUs listed one by one in a reason; a 64-GPU job's reason names the slowest few and counts the rest
DESCRIBE_MAX = 8


def describe_gpus(ix: ClusterIndex, tab: ClassTable, gpus: Sequence[int]) -> str:
    """'g4@n1 sf=1.000, g5@n1 sf=1.020': the per-GPU factors a choice relied on (for wide
    jobs the DESCRIBE_MAX slowest, which are what set the job's pace, and a count of the rest)."""
    names = ix.node_names
    shown = list(gpus)
    if len(shown) > DESCRIBE_MAX:
        shown = sorted(shown, key=lambda g: (-tab.sf[g], g))[:DESCRIBE_MAX]
    text = ", ".join(f"g{g}@{names[ix.node_of[g]]} sf={tab.sf[g]:.3f}" for g in shown)
    return text if len(shown) == len(gpus) else f"{text} (slowest {len(shown)} of {len(gpus)})"


def slowest_choice(name: str, ix: ClusterIndex, tab: ClassTable, got: np.ndarray | Sequence[int] | None,
                   how: Callable[[float, tuple[int, ...]], str]) -> Choice | None:
    """The GPUs a search found (None: it found none) as a Choice rated by its slowest GPU's factor,
    the one alternative it weighs; `how(worst, gpus)` says how they were chosen, the reason's
    middle between the policy's name and the GPUs' factors."""
    if got is None:
        return None
    gpus = as_gpus(got)
    worst = float(tab.sf[list(gpus)].max())
    return Choice(gpus=gpus, why=lambda: f"{name}: {how(worst, gpus)}; {describe_gpus(ix, tab, gpus)}",
                  alternatives=((gpus, worst),))


class GpuChooser(Protocol):
    """Which GPUs one job gets, and the order the jobs of a queue are tried in: the part a
    mechanism swaps in (first fit, cons_tres's rule, pal-guard's guarded choice, PAL, PM-First,
    packed, random). A chooser is not a policy: it has no name of its own (the reasons it
    writes carry the policy's), no queue walk and no stickiness."""

    @property
    def deterministic(self) -> bool:
        """Draws nothing from ctx.rng: the same free GPUs always give the same choice (a
        mechanism may then remember choices while a decision takes no GPUs)."""
        ...

    def choose(self, job: JobRequest, state: FreeState, ctx: PlacementContext) -> Choice | None:
        """GPUs for `job` among what `state` still has free, in the job's shape; None if none fit."""
        ...

    def placement_order(self, queue: Sequence[JobRequest], snapshot: Snapshot) -> tuple[list[JobRequest], int]:
        """The order jobs are tried in, and how many of its first jobs must all find GPUs for
        that order to stand (0: it always stands; see chooser.class_sorted_order)."""
        ...

    def classes_left_to_slurm(self, perfvar: Mapping[str, Sequence[float]],
                              ctx: PlacementContext) -> frozenset[str]:
        """Job classes this chooser would always give Slurm's own first fit on GPUs with these
        PerfVars (class -> one value per GPU): none, unless it says so (pal-guard's: the
        classes with nothing to choose)."""
        ...


class Policy(ABC):
    """One placement policy: a mechanism with its chooser, named by its row; `place` is pure
    (the rng comes in the context).

    Mechanisms implement `assign`; `place` calls it and drops any assignment that breaks
    its job's shape (GPU count, node range, GPUs per node, allowed nodes) or is not free.
    The dropped ones are listed in `Decision.refused`.
    """

    #: the policy's row of the table: its name, description and stickiness
    row: PolicyRow[Policy]
    chooser: GpuChooser
    #: may place jobs after the first one that does not fit (a caller must re-run it when
    #: jobs arrive even while the head of the queue is blocked)
    backfills: ClassVar[bool] = False
    #: how many jobs after the first that does not fit it looks at (0: it stops there); a
    #: caller may cut the queue after that many without changing the decision
    lookahead: int = 0
    #: reads remaining_s, snapshot.now or snapshot.expected_end, so a decision cached by
    #: job ids alone goes stale as jobs progress
    time_aware: ClassVar[bool] = False

    @property
    def name(self) -> str:
        return self.row.name

    @property
    def description(self) -> str:
        return self.row.description

    @property
    def sticky(self) -> bool:
        """How a caller calls it (see PolicyRow.sticky)."""
        return self.row.sticky

    @property
    def deterministic(self) -> bool:
        """Draws nothing from ctx.rng: the same inputs always give the same decision."""
        return self.chooser.deterministic

    def place(self, snapshot: Snapshot, queue: Sequence[JobRequest], ctx: PlacementContext) -> Decision:
        """Assign GPUs from `snapshot.free` to jobs of `queue` (already in queue order), each
        in its own shape."""
        return enforce_shapes(snapshot, queue, self.assign(snapshot, queue, ctx))

    @abstractmethod
    def assign(self, snapshot: Snapshot, queue: Sequence[JobRequest], ctx: PlacementContext) -> Decision:
        """The mechanism's own decision (what `place` checks)."""

    def classes_left_to_slurm(self, perfvar: Mapping[str, Sequence[float]], ctx: PlacementContext) -> frozenset[str]:
        """Job classes this policy would always give Slurm's own first fit (its chooser's say),
        so that the submit filter need not hold their jobs at all."""
        return self.chooser.classes_left_to_slurm(perfvar, ctx)


def in_chooser_order(chooser: GpuChooser, snapshot: Snapshot, queue: Sequence[JobRequest],
                     walk: Callable[[Sequence[JobRequest], int], Decision | None]) -> Decision:
    """One pass (`walk(ordered, guard)`) in the chooser's order, or, when that order would
    decide who runs (see chooser.class_sorted_order), one in the queue's own order."""
    check_unique(queue)
    ordered, guard = chooser.placement_order(queue, snapshot)
    decision = walk(ordered, guard)
    if decision is None:
        decision = walk(list(queue), 0)
    assert decision is not None  # guard 0: a pass in the queue's order always decides
    return decision


def unheld_classes(policy: Policy, perfvar: Mapping[str, Sequence[float]], ctx: PlacementContext) -> frozenset[str]:
    """The classes the submit filter may leave to Slurm: every class, when the policy would give
    each of them Slurm's own first fit on these PerfVars (class -> one value per GPU); else none.

    All or nothing, because of the two schedulers a partial answer would make: Slurm's does not
    see held jobs (their begin time lies ahead), so a job of a class left to it could start on
    GPUs an older held job waits for, and neither Slurm's backfill nor the placer would keep
    that job's rank. Measured on a real cluster with one class of four left to Slurm: its
    multi-node jobs waited a fifth of what they wait under plain Slurm, the held 1-GPU jobs
    twice as long, and the simulator, which keeps one queue, could not predict it."""
    left = policy.classes_left_to_slurm(perfvar, ctx)
    return left if left and left >= frozenset(perfvar) else frozenset()


def enforce_shapes(snapshot: Snapshot, queue: Sequence[JobRequest], decision: Decision) -> Decision:
    """`decision` without the assignments that break their job's shape, use a GPU that is
    not free or is given twice, or name a job not in the queue (each listed in `refused`)."""
    jobs = {j.id: j for j in queue}
    node_of = snapshot.cluster.node_of
    taken: set[int] = set()
    kept: list[Assignment] = []
    refused: list[tuple[str, str]] = list(decision.refused)
    for a in decision.assignments:
        job = jobs.get(a.job_id)
        why = "not in the queue" if job is None else job.shape_violation(a.gpus, node_of)
        if why is None and not (taken.isdisjoint(a.gpus) and snapshot.free.issuperset(a.gpus)):
            why = "a GPU that is not free"
        if why is not None:
            refused.append((a.job_id, why))
            continue
        taken.update(a.gpus)
        kept.append(a)
    if len(kept) == len(decision.assignments):
        return decision
    return replace(decision, assignments=tuple(kept), refused=tuple(refused))


def check_unique(queue: Sequence[JobRequest]) -> None:
    seen: set[str] = set()
    for job in queue:
        if job.id in seen:
            raise PlacementError(f"job {job.id} appears twice in the queue")
        seen.add(job.id)


def free_on_node(ix: ClusterIndex, state: FreeState) -> Callable[[int], list[int]]:
    """A function node -> its free GPU ids, ascending (nodes outside a job's allowed set
    must already have a zero count, so callers never ask for them)."""
    node_gpus = ix.cluster.node_gpus
    mask = state.mask

    def listing(node: int) -> list[int]:
        return [g for g in node_gpus[node] if mask[g]]

    return listing
