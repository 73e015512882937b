"""GPU-choosing primitives shared by the policies, written over numpy arrays.

Every function takes `cand`, the ids of the GPUs a job may use (free, on allowed nodes),
ascending, and returns ids or None; none of them mutates anything. "Level" is a GPU's
rank among its class's distinct slowdown factors (see `ClassTable`), so comparing levels
is comparing factors exactly.

The per-node sorted-level matrix (nodes x GPUs per node) is the workhorse: with it, "how
many free GPUs of sf <= s does node v have" and "what is the smallest possible max sf of
N GPUs on node v" are a comparison and a column read, with no enumeration of GPU
combinations, no Python loop over GPUs, and a cost that does not grow with the number of
distinct slowdown factors (hundreds on a large, finely binned cluster).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from pal_slurm.placement.index import ClassTable, ClusterIndex


@dataclass(frozen=True)
class Candidates:
    """One job's usable GPUs with their class levels and nodes, and per-node sorted levels."""

    ids: np.ndarray  # GPU ids, ascending
    level: np.ndarray  # level of each id for the job's class
    node: np.ndarray  # node of each id
    n_levels: int
    #: by_slot[v, k] = level of node v's k-th GPU if usable, else NONE
    by_slot: np.ndarray

    NONE = np.iinfo(np.int64).max // 4

    @classmethod
    def build(cls, ix: ClusterIndex, tab: ClassTable, ids: np.ndarray) -> "Candidates":
        level = tab.level[ids]
        node = ix.node_of[ids]
        mat = np.full((ix.n_nodes, max(ix.max_gpus_per_node, 1)), cls.NONE, dtype=np.int64)
        mat[node, ix.slot_of[ids]] = level
        return cls(ids=ids, level=level, node=node, n_levels=max(tab.n_levels, 1), by_slot=mat)

    @cached_property
    def sorted(self) -> np.ndarray:
        """sorted[v, k] = the (k+1)-th smallest level among node v's usable GPUs; NONE past them
        (sorted only when a per-node question is asked: single-GPU jobs never need it)."""
        return np.sort(self.by_slot, axis=1)

    def __len__(self) -> int:
        return len(self.ids)

    @cached_property
    def per_node(self) -> np.ndarray:
        """[v] = usable GPUs on node v."""
        return np.bincount(self.node, minlength=self.by_slot.shape[0])

    def nth_level(self, n: int) -> np.ndarray:
        """[v] = the smallest possible max level of n usable GPUs on node v (NONE: fewer than n)."""
        if n > self.sorted.shape[1]:
            return np.full(self.sorted.shape[0], self.NONE, dtype=np.int64)
        return self.sorted[:, n - 1]

    def up_to(self, max_level: int) -> np.ndarray:
        """[v] = usable GPUs of level <= max_level on node v."""
        return (self.sorted <= max_level).sum(axis=1)

    def same_level_on_node(self) -> np.ndarray:
        """Per candidate: usable GPUs on its node with exactly its level (itself included)."""
        return (self.by_slot[self.node] == self.level[:, None]).sum(axis=1)

    def first_within_level(self, n: int) -> int:
        """The lowest level at which some node has n usable GPUs of level <= it (PAL's
        within-node step can succeed from there on); NONE when no node has n."""
        nth = self.nth_level(n)
        return int(nth.min()) if nth.size else self.NONE

    @cached_property
    def total_up_to(self) -> np.ndarray:
        """[l] = usable GPUs of level <= l on all nodes (an across-nodes step needs n of them)."""
        return np.cumsum(np.bincount(self.level, minlength=self.n_levels))


def pm_first(c: Candidates, n: int, max_level: int | None = None,
             spare: np.ndarray | None = None) -> np.ndarray | None:
    """PM-First: rank usable GPUs by (sf, |same-sf free GPUs on the node - n|), stable in id
    order, and take the first n. With `max_level`, only GPUs of level <= max_level count.

    `spare` (per GPU id, small ints, lower = take first) replaces the id tie-break: ties
    go first to the (node, sf) group holding the lowest spare value, then the lower node,
    then within the group the lowest spare GPU, then id. Whole groups are ranked, so a
    node's GPUs of one sf stay together as they do in id order. The max sf of the pick
    is the same with or without `spare` (sf is the first key).
    """
    same = c.same_level_on_node()
    if max_level is None:
        ids, level, node = c.ids, c.level, c.node
    else:
        keep = c.level <= max_level
        ids, level, node, same = c.ids[keep], c.level[keep], c.node[keep], same[keep]
    if len(ids) < n:
        return None
    score = np.abs(same - n)
    # one int64 key, exact: levels * (cluster size + n) * nodes * spare range^2 stays far
    # below 2^63 for any cluster we schedule;
    # kind="stable" keeps ties in id order, as the artifact's multi-column sort_values does
    key = level * (int(score.max()) + 1) + score
    if spare is not None:
        mine = spare[ids]
        span = int(mine.max()) + 1
        n_nodes = c.by_slot.shape[0]
        group = node * c.n_levels + level
        low = np.full(n_nodes * c.n_levels, span, dtype=np.int64)
        np.minimum.at(low, group, mine)
        key = ((key * span + low[group]) * n_nodes + node) * span + mine
    if n < len(ids) // 8:
        # only the n smallest keys matter: partition, then sort just those stably
        kth = np.partition(key, n - 1)[n - 1]
        pool = np.flatnonzero(key <= kth)
        order = pool[np.argsort(key[pool], kind="stable")][:n]
    else:
        order = np.argsort(key, kind="stable")[:n]
    return ids[order]


def best_single_node(c: Candidates, n: int, max_level: int,
                     spare: np.ndarray | None = None) -> tuple[np.ndarray, int] | None:
    """PAL's within-node step: nodes with >= n usable GPUs of level <= max_level; the
    n-GPU set with the smallest max sf (ties: the node with more such GPUs, then the lower
    node id; on the node, the first such set in id order, as itertools.combinations would
    find it). Returns (ids, the set's max level) or None.

    With `spare`, ties between nodes go first to the node whose eligible GPUs include the
    lowest spare value, and on the node the n eligible GPUs with the lowest spare values
    are taken (any n of them have the same max sf, which is what the job runs at).
    """
    qualifying = c.up_to(max_level)
    valid = np.flatnonzero(qualifying >= n)
    if not valid.size:
        return None
    nth = c.nth_level(n)[valid]  # smallest max level of n GPUs on each node
    if spare is None:
        best = np.lexsort((valid, -qualifying[valid], nth))[0]
        node, top = int(valid[best]), int(nth[best])
        on = np.flatnonzero((c.node == node) & (c.level <= top))[:n]
        return c.ids[on], top
    top = int(nth.min())
    tied = valid[nth == top]
    eligible = np.flatnonzero(c.level <= top)
    mine = spare[c.ids[eligible]]
    low = np.full(c.by_slot.shape[0], int(mine.max()) + 1, dtype=np.int64)
    np.minimum.at(low, c.node[eligible], mine)
    node = int(tied[np.lexsort((tied, -qualifying[tied], low[tied]))[0]])
    on = eligible[c.node[eligible] == node]
    on = on[np.argsort(spare[c.ids[on]], kind="stable")[:n]]
    return np.sort(c.ids[on]), top


def best_split(ix: ClusterIndex, c: Candidates, per_node: int, nodes: int) -> np.ndarray | None:
    """Exactly `per_node` GPUs on each of `nodes` distinct nodes (a Slurm per-node GRES
    request), minimising the job's max sf: nodes ranked by the smallest max level of their
    best `per_node` GPUs, then fewer usable GPUs (pack), then lower id; on each node the
    best GPUs by (level, id)."""
    total = c.per_node
    valid = np.flatnonzero(total >= per_node)
    if valid.size < nodes:
        return None
    kth = c.nth_level(per_node)[valid]
    chosen = valid[np.lexsort((valid, total[valid], kth))[:nodes]]
    out: list[np.ndarray] = []
    for v in chosen:
        on = np.flatnonzero(c.node == v)
        out.append(c.ids[on[np.argsort(c.level[on], kind="stable")[:per_node]]])
    return np.concatenate(out)


def packed(counts: np.ndarray, free_on_node: Callable[[int], list[int]], n: int) -> list[int] | None:
    """The artifact's consolidated placement: the first node with exactly n free; else the
    node with the fewest free >= n (lower id on ties), its lowest n ids; else the node with
    the most free (lower id on ties), again and again, until n are collected.
    `counts[v]` is node v's usable free GPUs and `free_on_node(v)` lists them ascending."""
    exact = np.flatnonzero(counts == n)
    if exact.size:
        return free_on_node(int(exact[0]))[:n]
    big = np.where(counts >= n, counts, np.iinfo(np.int64).max)
    node = int(np.argmin(big))
    if counts[node] >= n:
        return free_on_node(node)[:n]
    if int(counts.sum()) < n:
        return None
    by_most = np.lexsort((np.arange(len(counts)), -counts))
    got: list[int] = []
    for v in by_most:
        got.extend(free_on_node(int(v))[: n - len(got)])
        if len(got) == n:
            break
    return got


def packed_split(counts: np.ndarray, free_on_node: Callable[[int], list[int]], per_node: int,
                 nodes: int) -> list[int] | None:
    """Packing for a per-node request: nodes with exactly `per_node` free first, then the
    fewest free (lower id on ties), the lowest `per_node` ids on each."""
    valid = np.flatnonzero(counts >= per_node)
    if valid.size < nodes:
        return None
    chosen = valid[np.lexsort((valid, counts[valid]))[:nodes]]
    return [g for v in chosen for g in free_on_node(int(v))[:per_node]]


def best_same_slots(ix: ClusterIndex, tab: ClassTable, cand: np.ndarray, per_node: int,
                    nodes: int) -> np.ndarray | None:
    """`per_node` GPUs at the same slot positions on each of `nodes` nodes, minimising the
    max slowdown factor: for every slot set (at most C(8, 4) = 70 on 8-GPU nodes) the nodes
    that have all of it free, ranked by their max sf on it (ties: fewer free GPUs, then
    lower id); the set whose `nodes` best nodes have the smallest max wins (ties: smaller
    sum of sf, then the first set in lexical order)."""
    from itertools import combinations

    width = max(ix.max_gpus_per_node, 1)
    if per_node > width:
        return None
    free = np.zeros((ix.n_nodes, width), dtype=bool)
    sf = np.full((ix.n_nodes, width), np.inf)
    gid = np.full((ix.n_nodes, width), -1, dtype=np.int64)
    node, slot = ix.node_of[cand], ix.slot_of[cand]
    free[node, slot] = True
    sf[node, slot] = tab.sf[cand]
    gid[node, slot] = cand
    n_free = free.sum(axis=1)
    best: tuple[float, float, np.ndarray] | None = None
    for combo in combinations(range(width), per_node):
        cols = list(combo)
        ok = np.flatnonzero(free[:, cols].all(axis=1))
        if ok.size < nodes:
            continue
        worst = sf[ok][:, cols].max(axis=1)
        take = ok[np.lexsort((ok, n_free[ok], worst))[:nodes]]
        top = float(sf[take][:, cols].max())
        total = float(sf[take][:, cols].sum())
        if best is None or (top, total) < (best[0], best[1]):
            best = (top, total, gid[take][:, cols].ravel())
    return None if best is None else np.sort(best[2])
