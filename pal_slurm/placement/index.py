"""Array views of a cluster and of one decision's free GPUs, so policies stay fast at scale.

A `ClusterIndex` is built once per `Cluster` (`cluster_index` keeps it in `Cluster.derived`)
and holds numpy arrays: the node of every GPU and, per job class, every GPU's slowdown
factor and its *level* (the rank of its factor among the class's distinct factors, so
"sf <= s" becomes an integer comparison and equal factors compare equal exactly).

A `FreeState` is the mutable scratch state of one `place()` call: which GPUs are still
free and how many are free per node. Policies read candidates from it and `take` what
they assign, so a GPU can never be handed out twice within a decision.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from typing import cast

import numpy as np

from pal_slurm.placement.model import Cluster, JobRequest, PlacementError, Snapshot


@dataclass(frozen=True)
class ClassTable:
    """One job class's factors as arrays: `sf[g]`, `level[g]` (index into `values`), `pv[g]`."""

    key: str
    sf: np.ndarray
    level: np.ndarray
    values: tuple[float, ...]  # distinct sf values, ascending
    pv: np.ndarray

    @property
    def n_levels(self) -> int:
        return len(self.values)

    @cached_property
    def pv_list(self) -> list[float]:
        """`pv` as Python floats, for per-GPU lookups where numpy's call overhead dominates."""
        return self.pv.tolist()

    @cached_property
    def pv_range(self) -> tuple[float, float] | None:
        """The class's fastest and slowest PerfVar (None: no GPUs): pal-guard asks for them for
        every job (is there anything to choose, is first fit already as fast as any GPU)."""
        return None if self.pv.size == 0 else (float(self.pv.min()), float(self.pv.max()))


class ClusterIndex:
    """Numpy arrays derived from a `Cluster`; immutable after construction."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.n = cluster.size
        self.n_nodes = len(cluster.node_names)
        self.node_of = np.asarray(cluster.node_of, dtype=np.int64).reshape(self.n)
        self.max_gpus_per_node = cluster.max_gpus_per_node
        ids = np.arange(self.n, dtype=np.int64)
        # ids are node-major on every cluster we build, but nothing in Cluster enforces it
        self.node_major_ids = bool(self.n == 0 or np.all(np.diff(self.node_of) >= 0))
        self.node_major = ids if self.node_major_ids else np.lexsort((ids, self.node_of))
        # slot_of[g]: g's position among its node's GPUs (by id), a column of a nodes x
        # max-GPUs-per-node matrix, which is how per-node questions stay O(nodes x 8)
        # rather than O(nodes x distinct slowdown factors)
        slot = np.zeros(self.n, dtype=np.int64)
        if self.n:
            by_node = self.node_of[self.node_major]
            first = np.searchsorted(by_node, by_node, side="left")
            slot[self.node_major] = np.arange(self.n) - first
        self.slot_of = slot
        self.node_list: list[int] = self.node_of.tolist()  # the same, for per-GPU lookups in Python
        self._tables: dict[str, ClassTable] = {}

    def table(self, job_class: str | None) -> ClassTable:
        """The factors that apply to `job_class` (unknown classes fall back as Cluster.class_key says)."""
        key = self.cluster.class_key(job_class)
        tab = self._tables.get(key)
        if tab is None:
            sf = np.asarray(self.cluster.slowdown[key], dtype=np.float64).reshape(self.n)
            values, level = np.unique(sf, return_inverse=True)
            pv_src = self.cluster.perfvar.get(key, self.cluster.slowdown[key])
            pv = np.asarray(pv_src, dtype=np.float64).reshape(self.n)
            tab = ClassTable(key=key, sf=sf, level=level.astype(np.int64).reshape(self.n),
                             values=tuple(float(v) for v in values), pv=pv)
            self._tables[key] = tab
        return tab

    @cached_property
    def node_names(self) -> tuple[str, ...]:
        return self.cluster.node_names

    @cached_property
    def slot_ids(self) -> np.ndarray:
        """nodes x slots matrix of GPU ids (-1 where a node has fewer GPUs)."""
        gid = np.full((self.n_nodes, max(self.max_gpus_per_node, 1)), -1, dtype=np.int64)
        gid[self.node_of, self.slot_of] = np.arange(self.n)
        return gid

    def in_node_major(self, ids: np.ndarray) -> np.ndarray:
        """`ids` (ascending) reordered node by node, ascending within a node."""
        if self.node_major_ids:
            return ids
        return ids[np.lexsort((ids, self.node_of[ids]))]


def cluster_index(cluster: Cluster) -> ClusterIndex:
    """The cluster's `ClusterIndex`, built on first use and kept with the cluster: every decision
    on it (each simulator round, each placer cycle's policy) reads the same arrays. The index
    lives here, not on `Cluster`, so that the placement vocabulary (placement.model) stays free of
    numpy and nothing in it imports this module back."""
    ix = cluster.derived.get("placement_index")
    if ix is None:
        ix = cluster.derived["placement_index"] = ClusterIndex(cluster)
    return cast(ClusterIndex, ix)


class FreeState:
    """Free GPUs of one decision, shrinking as the policy assigns them."""

    def __init__(self, snapshot: Snapshot) -> None:
        ix = cluster_index(snapshot.cluster)
        self.index = ix
        mask = np.zeros(ix.n, dtype=bool)
        if snapshot.free:
            free = np.fromiter(snapshot.free, dtype=np.int64, count=len(snapshot.free))
            if free.min() < 0 or free.max() >= ix.n:
                bad = sorted(int(g) for g in free if not 0 <= g < ix.n)
                raise PlacementError(f"snapshot.free names GPUs that do not exist: {bad[:5]}")
            mask[free] = True
        self.mask = mask
        self.count = np.bincount(ix.node_of[mask], minlength=ix.n_nodes).astype(np.int64)
        self.n_free = int(mask.sum())
        self._allowed_masks: dict[frozenset[int], np.ndarray] = {}
        # candidates() per allowed-nodes set until the next take/release: one decision asks
        # first fit, the guard's bound and its search the same question in a row
        self._cand: dict[frozenset[int] | None, np.ndarray] = {}

    def node_mask(self, allowed: frozenset[int] | None) -> np.ndarray | None:
        """Boolean per node for an allowed-nodes set (None = every node)."""
        if allowed is None:
            return None
        m = self._allowed_masks.get(allowed)
        if m is None:
            m = np.zeros(self.index.n_nodes, dtype=bool)
            ok = [i for i in allowed if 0 <= i < self.index.n_nodes]
            m[ok] = True
            self._allowed_masks[allowed] = m
        return m

    def candidates(self, allowed: frozenset[int] | None) -> np.ndarray:
        """Free GPU ids on allowed nodes, ascending (read-only: shared until the state changes)."""
        hit = self._cand.get(allowed)
        if hit is not None:
            return hit
        nm = self.node_mask(allowed)
        ids = self.mask.nonzero()[0] if nm is None else (self.mask & nm[self.index.node_of]).nonzero()[0]
        ids.flags.writeable = False
        self._cand[allowed] = ids
        return ids

    def free_on(self, allowed: frozenset[int] | None) -> int:
        nm = self.node_mask(allowed)
        return self.n_free if nm is None else int(self.count[nm].sum())

    def could_fit(self, job: JobRequest) -> bool:
        """A necessary condition for any placement of `job` now, cheap to check: enough free GPUs
        on its allowed nodes and, for a per-node shape, enough nodes with that many free (one
        node with all of them for a one-node job). A backfill reservation asks this after
        every release it walks through; a whole-node job of a thousand nodes would otherwise
        make the chooser search the whole cluster each time."""
        if self.free_on(job.allowed_nodes) < job.gpus:
            return False
        if job.gpus_per_node is None and not job.one_node:
            return True
        per_node = job.gpus if job.one_node else job.gpus_per_node
        nodes_needed = 1 if job.one_node else job.gpus // job.gpus_per_node
        return int(np.count_nonzero(self.node_counts(job.allowed_nodes) >= per_node)) >= nodes_needed

    def node_counts(self, allowed: frozenset[int] | None) -> np.ndarray:
        """Free GPUs per node, zero on nodes outside `allowed`."""
        nm = self.node_mask(allowed)
        return self.count if nm is None else np.where(nm, self.count, 0)

    #: above this many GPUs, take/release work on arrays (per-GPU numpy indexing costs more)
    _VECTOR_AT = 8

    def take(self, gpus: tuple[int, ...]) -> None:
        if self._cand:
            self._cand = {}
        if len(gpus) > self._VECTOR_AT:
            g = np.fromiter(gpus, dtype=np.int64, count=len(gpus))
            if not self.mask[g].all() or len(set(g.tolist())) != g.size:
                bad = next(int(x) for i, x in enumerate(g) if not self.mask[x] or x in g[:i])
                raise AssertionError(f"GPU {bad} assigned twice or not free")  # a policy bug
            self.mask[g] = False
            self.count -= np.bincount(self.index.node_of[g], minlength=self.count.size)
            self.n_free -= int(g.size)
            return
        for g in gpus:
            if not self.mask[g]:
                raise AssertionError(f"GPU {g} assigned twice or not free")  # a policy bug
            self.mask[g] = False
            self.count[self.index.node_of[g]] -= 1
        self.n_free -= len(gpus)

    def release(self, gpus: Iterable[int]) -> None:
        """Mark `gpus` free (those already free are left alone)."""
        if self._cand:
            self._cand = {}
        if isinstance(gpus, (tuple, list, np.ndarray)) and len(gpus) > self._VECTOR_AT:
            g = np.asarray(gpus, dtype=np.int64)
            g = g[~self.mask[g]]
            if g.size > 1 and len(set(g.tolist())) != g.size:  # a GPU named twice is freed once
                g = np.unique(g)
            if g.size:
                self.mask[g] = True
                self.count += np.bincount(self.index.node_of[g], minlength=self.count.size)
                self.n_free += int(g.size)
            return
        for g in gpus:
            if not self.mask[g]:
                self.mask[g] = True
                self.count[self.index.node_of[g]] += 1
                self.n_free += 1

    def without(self, hidden: np.ndarray) -> "FreeState":
        """A copy with the GPUs of the boolean mask `hidden` no longer free: what `take` of
        the free ones among them leaves, in a few array operations however many they are (a
        whole-node reservation hides thousands of GPUs from every job weighed past it)."""
        gone = hidden & self.mask
        twin = self.copy()
        twin.mask[gone] = False
        twin.count -= np.bincount(self.index.node_of[gone], minlength=self.count.size)
        twin.n_free -= int(np.count_nonzero(gone))
        twin._cand = {}
        return twin

    def copy(self) -> "FreeState":
        twin = object.__new__(FreeState)
        twin.index = self.index
        twin.mask = self.mask.copy()
        twin.count = self.count.copy()
        twin.n_free = self.n_free
        twin._allowed_masks = self._allowed_masks
        twin._cand = dict(self._cand)
        return twin
