"""The policy interface, the registry, and the in-order walk every policy here shares.

A policy maps (snapshot, queue in queue order, context) to a `Decision`. The concrete
policies differ in typed class attributes and overridden methods only:

- `sticky` tells the *caller* how to call it: True means running jobs keep their GPUs
  (it passes only waiting jobs and the GPUs they do not hold); False means the caller may
  re-place everything each round (it passes every job with every GPU free).
- `class_sorted_prefix` selects PM-First's queue treatment (see `InOrderPolicy.placement_order`).
- `pick` / `pick_split` choose GPUs for one job.
- A policy that does more than walk the queue and stop at the first job that does not
  fit (pal-backfill) overrides `place` and reuses `placement_order` and `choose`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import ClassVar, Protocol, TypeVar

import numpy as np

from pal_slurm.placement import select
from pal_slurm.placement.index import ClassTable, ClusterIndex, FreeState
from pal_slurm.placement.model import (
    JOB_CLASSES,
    Assignment,
    Decision,
    JobRequest,
    PlacementContext,
    PlacementError,
    Snapshot,
)

#: PM-First's class order; a class outside it (or none) ranks as A, the worst case.
CLASS_RANK: dict[str, int] = {c: i for i, c in enumerate(JOB_CLASSES)}


def class_rank(job_class: str | None) -> int:
    return CLASS_RANK.get(job_class or "", 0)


def prefix_that_fits(queue: Sequence[JobRequest], capacity: int) -> int:
    """Length of the longest prefix of `queue` whose total GPU demand fits `capacity`."""
    total = 0
    for i, job in enumerate(queue):
        total += job.gpus
        if total > capacity:
            return i
    return len(queue)


def _splits_freely(job: JobRequest) -> bool:
    return job.gpus_per_node is None and job.allowed_nodes is None and job.max_nodes is None


def _fits_in_order(jobs: Sequence[JobRequest], snapshot: Snapshot) -> bool:
    """A cheap test (free GPU counts per node, best fit) of whether every job finds room in
    this order; True does not promise it (slots and factors are not looked at), False
    spares a placement pass that would fail."""
    state = FreeState(snapshot)
    free = state.count.copy()
    for job in jobs:
        lo, _hi = job.node_range
        per = job.gpus_per_node or (job.gpus if job.one_node else None)
        allowed = state.node_mask(job.allowed_nodes)
        usable = free if allowed is None else np.where(allowed, free, 0)
        if per is None:
            if usable.sum() < job.gpus:
                return False
            need = job.gpus
            for v in np.argsort(-usable, kind="stable"):
                take = min(int(usable[v]), need)
                free[v] -= take
                need -= take
                if need == 0:
                    break
            continue
        ok = np.flatnonzero(usable >= per)
        if ok.size < lo:
            return False
        chosen = ok[np.argsort(usable[ok], kind="stable")[:lo]]
        free[chosen] -= per
    return True


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


def as_gpus(ids: np.ndarray | Sequence[int]) -> tuple[int, ...]:
    """GPU ids as an ascending tuple of ints (Python's sort: a choice holds a few ids, where
    numpy's per-call overhead would cost more than the sort)."""
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


class Policy(ABC):
    """One placement policy: `place` is pure (the rng comes in the context).

    Subclasses implement `assign`; `place` calls it and drops any assignment that breaks
    its job's shape (GPU count, node range, GPUs per node, allowed nodes) or is not free,
    so that no policy, registered now or later, can hand Slurm a reshaped job. The
    dropped ones are listed in `Decision.refused`.
    """

    name: ClassVar[str]
    sticky: ClassVar[bool]
    description: ClassVar[str]
    #: may place jobs after the first one that does not fit (a caller must re-run it when
    #: jobs arrive even while the head of the queue is blocked)
    backfills: ClassVar[bool] = False
    #: how many jobs after the first that does not fit it looks at (0: it stops there); a
    #: caller may cut the queue after that many without changing the decision
    lookahead: ClassVar[int] = 0
    #: draws nothing from ctx.rng: the same inputs always give the same decision
    deterministic: ClassVar[bool] = True
    #: reads remaining_s, snapshot.now or snapshot.expected_end, so a decision cached by
    #: job ids alone goes stale as jobs progress
    time_aware: ClassVar[bool] = False

    def place(self, snapshot: Snapshot, queue: Sequence[JobRequest], ctx: PlacementContext) -> Decision:
        """Assign GPUs from `snapshot.free` to jobs of `queue` (already in queue order), each
        in its own shape."""
        return enforce_shapes(snapshot, queue, self.assign(snapshot, queue, ctx))

    @abstractmethod
    def assign(self, snapshot: Snapshot, queue: Sequence[JobRequest], ctx: PlacementContext) -> Decision:
        """The policy's own decision (what `place` checks)."""

    def classes_left_to_slurm(self, perfvar: Mapping[str, Sequence[float]], ctx: PlacementContext) -> frozenset[str]:
        """Job classes this policy would always give Slurm's own first fit on GPUs with these
        PerfVars (class -> one value per GPU), so that the submit filter need not hold their
        jobs at all; none unless a policy says so (pal-guard: the classes with nothing to
        choose)."""
        return frozenset()


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


POLICIES: dict[str, type[Policy]] = {}

P = TypeVar("P", bound=type[Policy])


def register(cls: P) -> P:
    """Class decorator: make a policy available by its `name`."""
    if cls.name in POLICIES:
        raise PlacementError(f"policy {cls.name!r} registered twice")
    POLICIES[cls.name] = cls
    return cls


class InOrderPolicy(Policy):
    """Place jobs one by one in (the policy's) order; stop at the first that does not fit."""

    class_sorted_prefix: ClassVar[bool] = False

    def assign(self, snapshot: Snapshot, queue: Sequence[JobRequest], ctx: PlacementContext) -> Decision:
        return walk_in_order(self, snapshot, queue, ctx)

    def _walk(self, snapshot: Snapshot, ordered: Sequence[JobRequest], guard: int,
              ctx: PlacementContext) -> Decision | None:
        """Place in `ordered`, stop at the first job that does not fit; None when one of the
        first `guard` jobs does not fit (the class sort would decide who runs: see placement_order)."""
        state = FreeState(snapshot)
        placed: list[Assignment] = []
        for i, job in enumerate(ordered):
            choice = self.choose(job, state, ctx)
            if choice is None:
                if i < guard:
                    return None
                return Decision(assignments=tuple(placed), blocked=job.id)
            state.take(choice.gpus)
            placed.append(choice.assignment(job.id))
        return Decision(assignments=tuple(placed), blocked=None)

    def placement_order(self, queue: Sequence[JobRequest], snapshot: Snapshot) -> tuple[list[JobRequest], int]:
        """The order jobs are tried in (the queue's, or PM-First's class-sorted prefix), and
        how many of its first jobs must all find GPUs for that order to stand.

        The class sort only decides which job of the prefix picks its GPUs first; it must
        not decide *who runs*. A prefix of jobs that split freely always fits (its demand
        fits the free GPUs), but with shapes (one node, GPUs per node, allowed nodes) a
        lower-ranked class-A job could take the node a higher-ranked job needs. So when the
        sort reorders shaped jobs, every job of the prefix must still find GPUs in the sorted
        order; if one does not, the caller places again in the queue's own order (Slurm's
        priority order in the daemon). A cheap count test first (`_fits_in_order`) keeps the
        queue's order when the shapes cannot all fit; the full check is made while placing,
        not by a trial placement beforehand, which would double the work of every decision.
        """
        if not self.class_sorted_prefix:
            return list(queue), 0
        cut = prefix_that_fits(queue, len(snapshot.free))
        ordered = sorted(queue[:cut], key=lambda j: class_rank(j.job_class)) + list(queue[cut:])
        if all(a is b for a, b in zip(ordered[:cut], queue[:cut])) or all(_splits_freely(j) for j in queue[:cut]):
            return ordered, 0
        if not _fits_in_order(ordered[:cut], snapshot):
            return list(queue), 0  # the shapes cannot all fit: who runs is the queue's to say
        return ordered, cut

    def choose(self, job: JobRequest, state: FreeState, ctx: PlacementContext) -> Choice | None:
        """GPUs for `job` from what is still free, in the job's shape: its allowed nodes, its
        GPUs per node, its node range (one node for a `--gres` job without `-N`)."""
        if state.free_on(job.allowed_nodes) < job.gpus:
            return None
        cand = state.candidates(job.allowed_nodes)
        if job.one_node:  # `--gres=gpu:N` (N per node on one node), or max_nodes 1: one rule for both
            return self.pick_one_node(job, cand, state, ctx) if job.gpus > 1 else self.pick(job, cand, state, ctx)
        if job.gpus_per_node is not None:
            if job.same_slots and job.gpus > job.gpus_per_node:
                return self.pick_same_slots(job, cand, state, ctx)
            return self.pick_split(job, cand, state, ctx, job.gpus_per_node, job.gpus // job.gpus_per_node)
        choice = self.pick(job, cand, state, ctx)
        if choice is not None and job.max_nodes is not None and job.max_nodes < job.gpus:
            # a partial node range (`--gpus=4 -N1-2`): the free split is kept only when it fits
            ix = state.index
            if len({ix.node_list[g] for g in choice.gpus}) > job.max_nodes:
                return None
        return choice

    def pick_one_node(self, job: JobRequest, cand: np.ndarray, state: FreeState,
                      ctx: PlacementContext) -> Choice | None:
        """All of job.gpus on one node: by default the family's split rule for one node
        (PAL overrides it with its within-node step)."""
        return self.pick_split(job, cand, state, ctx, job.gpus, 1)

    def pick_same_slots(self, job: JobRequest, cand: np.ndarray, state: FreeState,
                        ctx: PlacementContext) -> Choice | None:
        """A multi-node job whose nodes must all give the same slots (what one per-node
        GRES request can express): the slot set and nodes with the smallest max slowdown
        factor, the same search for every policy (see select.best_same_slots)."""
        ix = state.index
        tab = ix.table(job.job_class)
        nodes = job.gpus // job.gpus_per_node
        got = select.best_same_slots(ix, tab, cand, job.gpus_per_node, nodes)
        return slowest_choice(self.name, ix, tab, got, lambda worst, _gpus: (
            f"{job.gpus_per_node} per node on the same slots of {nodes} nodes, max sf {worst:.3f} (class {tab.key})"))

    @abstractmethod
    def pick(self, job: JobRequest, cand: np.ndarray, state: FreeState, ctx: PlacementContext) -> Choice | None:
        """Choose job.gpus GPUs among `cand` (free, allowed, ascending; at least job.gpus)."""

    @abstractmethod
    def pick_split(self, job: JobRequest, cand: np.ndarray, state: FreeState, ctx: PlacementContext,
                   per_node: int, nodes: int) -> Choice | None:
        """Choose `per_node` GPUs on each of `nodes` distinct nodes (job.gpus in all)."""


class Walker(Protocol):
    def placement_order(self, queue: Sequence[JobRequest], snapshot: Snapshot) -> tuple[list[JobRequest], int]: ...

    def _walk(self, snapshot: Snapshot, ordered: Sequence[JobRequest], guard: int,
              ctx: PlacementContext) -> Decision | None: ...


def walk_in_order(policy: Walker, snapshot: Snapshot, queue: Sequence[JobRequest], ctx: PlacementContext) -> Decision:
    """One pass in the policy's order, or, when that order would decide who runs (see
    InOrderPolicy.placement_order), one in the queue's own order."""
    check_unique(queue)
    ordered, guard = policy.placement_order(queue, snapshot)
    decision = policy._walk(snapshot, ordered, guard, ctx)
    if decision is None:
        decision = policy._walk(snapshot, list(queue), 0, ctx)
    assert decision is not None  # guard 0: a pass in the queue's order always decides
    return decision


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
