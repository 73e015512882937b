"""What every GPU chooser shares: one job's shape turned into one pick, and the queue orders.

Why here: a job's shape (one node for `--gres`, GPUs per node on several nodes, the same
slots on every node where the placer steers it, a free split with an optional node range)
decides *which* question a chooser answers, and every chooser must answer it the same way,
or a policy could reshape a job. `ShapedChooser.choose` asks that question once; a chooser
says only how it picks GPUs for each kind (`pick`, `pick_split`, and where its family has
its own rule, `pick_one_node` and `pick_same_slots`).

The orders: the queue's own (every chooser but PM-First's and PAL's), or PM-First's
class-sorted prefix (`class_sorted_order`), which must never decide *who* runs.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from pal_slurm.placement import select
from pal_slurm.placement.base import Choice, class_rank, slowest_choice
from pal_slurm.placement.index import FreeState
from pal_slurm.placement.model import JobRequest, PlacementContext, Snapshot


def queue_order(queue: Sequence[JobRequest], snapshot: Snapshot) -> tuple[list[JobRequest], int]:
    """The queue's own order (Slurm's priority order in the daemon), which always stands."""
    return list(queue), 0


def prefix_that_fits(queue: Sequence[JobRequest], capacity: int) -> int:
    """Length of the longest prefix of `queue` whose total GPU demand fits `capacity`."""
    total = 0
    for i, job in enumerate(queue):
        total += job.gpus
        if total > capacity:
            return i
    return len(queue)


def class_sorted_order(queue: Sequence[JobRequest], snapshot: Snapshot) -> tuple[list[JobRequest], int]:
    """PM-First's order: the prefix of the queue that fits the free GPUs sorted by class (A
    first), the rest in queue order; and how many of its first jobs must all find GPUs for
    that order to stand.

    The class sort only decides which job of the prefix picks its GPUs first; it must
    not decide *who runs*. A prefix of jobs that split freely always fits (its demand
    fits the free GPUs), but with shapes (one node, GPUs per node, allowed nodes) a
    lower-ranked class-A job could take the node a higher-ranked job needs. So when the
    sort reorders shaped jobs, every job of the prefix must still find GPUs in the sorted
    order; if one does not, the mechanism places again in the queue's own order (Slurm's
    priority order in the daemon). A cheap count test first (`_fits_in_order`) keeps the
    queue's order when the shapes cannot all fit; the full check is made while placing,
    not by a trial placement beforehand, which would double the work of every decision.
    """
    cut = prefix_that_fits(queue, len(snapshot.free))
    ordered = sorted(queue[:cut], key=lambda j: class_rank(j.job_class)) + list(queue[cut:])
    if all(a is b for a, b in zip(ordered[:cut], queue[:cut])) or all(_splits_freely(j) for j in queue[:cut]):
        return ordered, 0
    if not _fits_in_order(ordered[:cut], snapshot):
        return list(queue), 0  # the shapes cannot all fit: who runs is the queue's to say
    return ordered, cut


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
class ShapedChooser(ABC):
    """A GpuChooser that picks by the job's shape (see the module docstring).

    `label` is what its reasons start with: the name of the policy that placed the job."""

    label: str

    #: draws nothing from ctx.rng (the random chooser does)
    deterministic = True

    def choose(self, job: JobRequest, state: FreeState, ctx: PlacementContext) -> Choice | None:
        """GPUs for `job` from what is still free, in the job's shape: its allowed nodes, its
        GPUs per node, its node range (one node for a `--gres` job without `-N`)."""
        if not state.could_fit(job):
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

    def placement_order(self, queue: Sequence[JobRequest], snapshot: Snapshot) -> tuple[list[JobRequest], int]:
        return queue_order(queue, snapshot)

    def classes_left_to_slurm(self, perfvar: Mapping[str, Sequence[float]],
                              ctx: PlacementContext) -> frozenset[str]:
        return frozenset()

    def pick_one_node(self, job: JobRequest, cand: np.ndarray, state: FreeState,
                      ctx: PlacementContext) -> Choice | None:
        """All of job.gpus on one node: by default the chooser's split rule for one node
        (PAL has its within-node step)."""
        return self.pick_split(job, cand, state, ctx, job.gpus, 1)

    def pick_same_slots(self, job: JobRequest, cand: np.ndarray, state: FreeState,
                        ctx: PlacementContext) -> Choice | None:
        """A multi-node job whose nodes must all give the same slots (what one per-node
        GRES request can express): the slot set and nodes with the smallest max slowdown
        factor, the same search for every chooser that knows factors (see select.best_same_slots)."""
        ix = state.index
        tab = ix.table(job.job_class)
        assert job.gpus_per_node is not None
        nodes = job.gpus // job.gpus_per_node
        got = select.best_same_slots(ix, tab, cand, job.gpus_per_node, nodes)
        return slowest_choice(self.label, ix, tab, got, lambda worst, _gpus: (
            f"{job.gpus_per_node} per node on the same slots of {nodes} nodes, max sf {worst:.3f} (class {tab.key})"))

    @abstractmethod
    def pick(self, job: JobRequest, cand: np.ndarray, state: FreeState, ctx: PlacementContext) -> Choice | None:
        """Choose job.gpus GPUs among `cand` (free, allowed, ascending; at least job.gpus)."""

    @abstractmethod
    def pick_split(self, job: JobRequest, cand: np.ndarray, state: FreeState, ctx: PlacementContext,
                   per_node: int, nodes: int) -> Choice | None:
        """Choose `per_node` GPUs on each of `nodes` distinct nodes (job.gpus in all)."""
