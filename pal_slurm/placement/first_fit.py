"""cons_tres's variability-blind GPU choice: the first fit Slurm as shipped makes.

Why a chooser of its own: the baseline (`slurm-backfill`) and the default policy share
one EASY backfill mechanism (pal_slurm.placement.easy) and differ in how they pick GPUs
(and in whether a job may wait: pal_slurm.placement.table).
This is the pick every claim is measured against, and the one the default policy falls
back to whenever variability cannot pay for a different choice.

Rules (select/cons_tres for nodes of equal weight, as modelled since the first release):
- nodes in configuration order; a one-node job takes the first node with enough free
  GPUs, and on it the lowest free GPU indices;
- GPUs per node on several nodes take the first nodes that have them, lowest indices on
  each; Slurm itself is not bound to the same slots on every node (`same_slots` is only
  pal-slurm's steering constraint), so neither is this pick;
- a job that may span nodes takes one node when one fits, else the fewest nodes (the
  emptiest first, in order on ties).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from pal_slurm.placement.base import NUMPY_AT, Choice, as_gpus, describe_gpus, free_on_node
from pal_slurm.placement.chooser import ShapedChooser
from pal_slurm.placement.index import ClusterIndex, FreeState
from pal_slurm.placement.model import JobRequest, PlacementContext

#: which nodes a job of `nodes` x `per_node` GPUs takes, given the free GPUs per node
NodeRule = Callable[[np.ndarray, int, int], "np.ndarray | None"]


def first_fit_nodes(counts: np.ndarray, per_node: int, nodes: int) -> np.ndarray | None:
    """The first `nodes` nodes (configuration order) with at least `per_node` free GPUs."""
    fits = np.flatnonzero(counts >= per_node)
    return None if fits.size < nodes else fits[:nodes]


@dataclass(frozen=True)
class FirstFit(ShapedChooser):
    """Slurm's variability-blind pick: the nodes `nodes_for` names, the lowest free GPU
    indices on each (cons_tres_fit.cons_tres_fit swaps in cons_tres's own node rule)."""

    #: the node rule
    nodes_for: NodeRule = first_fit_nodes
    #: how the pick is explained
    rule: str = "first fit in node order"

    def pick(self, job: JobRequest, cand: np.ndarray, state: FreeState, ctx: PlacementContext) -> Choice | None:
        counts = state.node_counts(job.allowed_nodes)
        listing = free_on_node(state.index, state)
        one = self.nodes_for(counts, job.gpus, 1)
        if one is not None:
            return self.first_fit_choice(state.index, job, listing(int(one[0]))[: job.gpus])
        got: list[int] = []
        for v in np.lexsort((np.arange(len(counts)), -counts)):  # the emptiest nodes first: fewest nodes
            if counts[v] <= 0:
                break
            got += listing(int(v))[: job.gpus - len(got)]
            if len(got) == job.gpus:
                return self.first_fit_choice(state.index, job, got)
        return None

    def pick_split(self, job: JobRequest, cand: np.ndarray, state: FreeState, ctx: PlacementContext,
                   per_node: int, nodes: int) -> Choice | None:
        chosen = self.nodes_for(state.node_counts(job.allowed_nodes), per_node, nodes)
        if chosen is None:
            return None
        if per_node * nodes >= NUMPY_AT:
            return self.first_fit_choice(state.index, job, first_free_slots(state.index, state, chosen, per_node))
        listing = free_on_node(state.index, state)
        return self.first_fit_choice(state.index, job, [g for v in chosen for g in listing(int(v))[:per_node]])

    def pick_same_slots(self, job: JobRequest, cand: np.ndarray, state: FreeState,
                        ctx: PlacementContext) -> Choice | None:
        """Slurm is not bound to the same slots on every node: the plain split."""
        assert job.gpus_per_node is not None
        return self.pick_split(job, cand, state, ctx, job.gpus_per_node, job.gpus // job.gpus_per_node)

    def first_fit_choice(self, ix: ClusterIndex, job: JobRequest, gpus: Sequence[int] | np.ndarray) -> Choice:
        tab = ix.table(job.job_class)
        if len(gpus) < NUMPY_AT:
            chosen = as_gpus(gpus)
            nodes = len({ix.node_list[g] for g in chosen})
        else:  # nodes counted on the array, not on the tuple of hundreds of ids made from it
            ids = np.asarray(gpus, dtype=np.int64)
            chosen = as_gpus(ids)
            nodes = int(np.count_nonzero(np.bincount(ix.node_of[ids])))
        return Choice(gpus=chosen, why=lambda: f"{self.label}: {self.rule}; {describe_gpus(ix, tab, chosen)}",
                      alternatives=((chosen, float(nodes)),), first_fit=True)


def first_free_slots(ix: ClusterIndex, state: FreeState, nodes: np.ndarray, per_node: int) -> np.ndarray:
    """The `per_node` lowest free GPU ids of each of `nodes` (each with at least that many
    free), node by node in their order: what listing each node's free GPUs and taking the
    first `per_node` gives."""
    gid = ix.slot_ids[nodes]
    if per_node == gid.shape[1]:  # whole nodes: each has all its slots free, in slot order
        return gid.ravel()
    free = np.where(gid >= 0, state.mask[np.maximum(gid, 0)], False)
    first = np.argsort(~free, axis=1, kind="stable")[:, :per_node]
    return np.take_along_axis(gid, first, axis=1).ravel()
