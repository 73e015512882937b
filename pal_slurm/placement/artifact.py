"""The GPU choosers of the PAL artifact (hal-uw/blox-pal), re-implemented from its rules.

What each does is stated in docs/simulation.md ("Policies"); the docstrings below say only what
is not obvious there. The artifact's six policies are these choosers in the in-order
mechanism (pal_slurm.placement.in_order: no backfill); PAL's chooser also serves pal-backfill
and pal-match in the EASY one. Constraints the artifact never had (allowed_nodes, a fixed
GPUs-per-node split) are honoured by restricting the candidates and, for a split request,
by the documented `pick_split` rule of each family; jobs without them get exactly the
artifact's choice.

Every Assignment's reason names the per-GPU slowdown factors of the job's class the
choice saw; `alternatives` holds what was weighed: for pal, every (sf, locality) entry
walked as (GPUs it yielded, or () when nothing qualified, weight); for pm-first and the
split rule (the GPUs, their max sf); for packed (the GPUs, nodes used); for random (the
GPUs, size of the pool sampled).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from pal_slurm.placement import select
from pal_slurm.placement.base import Choice, as_gpus, describe_gpus, free_on_node, slowest_choice
from pal_slurm.placement.chooser import ShapedChooser, class_sorted_order
from pal_slurm.placement.cost import spans_nodes
from pal_slurm.placement.index import ClassTable, ClusterIndex, FreeState
from pal_slurm.placement.model import DEFAULT_CLASS, JobRequest, PlacementContext, Snapshot
from pal_slurm.placement.select import Candidates


def _nodes_of(ix: ClusterIndex, gpus: tuple[int, ...]) -> int:
    return len({int(ix.node_of[g]) for g in gpus})


@dataclass(frozen=True)
class Packed(ShapedChooser):
    """Consolidate: fewest nodes, best-fitting node first; blind to variability."""

    def pick(self, job: JobRequest, cand: np.ndarray, state: FreeState, ctx: PlacementContext) -> Choice | None:
        ix = state.index
        counts = state.node_counts(job.allowed_nodes)
        got = select.packed(counts, free_on_node(ix, state), job.gpus)
        if got is None:
            return None
        return self._choice(ix, job, as_gpus(got), counts)

    def pick_split(self, job: JobRequest, cand: np.ndarray, state: FreeState, ctx: PlacementContext,
                   per_node: int, nodes: int) -> Choice | None:
        ix = state.index
        counts = state.node_counts(job.allowed_nodes)
        got = select.packed_split(counts, free_on_node(ix, state), per_node, nodes)
        return None if got is None else self._choice(ix, job, as_gpus(got), counts)

    def _choice(self, ix: ClusterIndex, job: JobRequest, gpus: tuple[int, ...], counts: np.ndarray) -> Choice:
        tab = ix.table(job.job_class)
        nodes = sorted({int(ix.node_of[g]) for g in gpus})
        free = ", ".join(f"{ix.node_names[v]} had {int(counts[v])} free" for v in nodes)
        return Choice(gpus=gpus, why=f"{self.label}: {len(nodes)} node(s) ({free}); {describe_gpus(ix, tab, gpus)}",
                      alternatives=((gpus, float(len(nodes))),))


@dataclass(frozen=True)
class RandomPick(ShapedChooser):
    """`ctx.rng.sample(free GPUs node by node, N)`: the artifact's call, so a shared seeded
    stream draws the same numbers. Nothing is drawn for a job that does not fit."""

    deterministic = False

    def pick(self, job: JobRequest, cand: np.ndarray, state: FreeState, ctx: PlacementContext) -> Choice | None:
        ix = state.index
        pool = ix.in_node_major(cand).tolist()
        gpus = as_gpus(ctx.rng.sample(pool, job.gpus))
        return self._choice(ix, job, gpus, len(pool))

    def pick_split(self, job: JobRequest, cand: np.ndarray, state: FreeState, ctx: PlacementContext,
                   per_node: int, nodes: int) -> Choice | None:
        ix = state.index
        counts = state.node_counts(job.allowed_nodes)
        eligible = np.flatnonzero(counts >= per_node).tolist()
        if len(eligible) < nodes:
            return None
        listing = free_on_node(ix, state)
        chosen = ctx.rng.sample(eligible, nodes)
        picked = [g for v in chosen for g in ctx.rng.sample(listing(v), per_node)]
        return self._choice(ix, job, as_gpus(picked), len(cand))

    def _choice(self, ix: ClusterIndex, job: JobRequest, gpus: tuple[int, ...], pool: int) -> Choice:
        tab = ix.table(job.job_class)
        return Choice(gpus=gpus, why=f"{self.label}: sampled from {pool} free GPUs; {describe_gpus(ix, tab, gpus)}",
                      alternatives=((gpus, float(pool)),))


@dataclass(frozen=True)
class PmFirst(ShapedChooser):
    """PM-First: the class-sorted prefix; the N free GPUs with the lowest slowdown factor, and
    for a split request the nodes whose worst GPUs are best (PAL shares both rules)."""

    def placement_order(self, queue: Sequence[JobRequest], snapshot: Snapshot) -> tuple[list[JobRequest], int]:
        return class_sorted_order(queue, snapshot)

    def pick(self, job: JobRequest, cand: np.ndarray, state: FreeState, ctx: PlacementContext) -> Choice | None:
        ix = state.index
        tab = ix.table(job.job_class)
        return self.pm_first_choice(ix, tab, Candidates.build(ix, tab, cand), job.gpus)

    def pick_split(self, job: JobRequest, cand: np.ndarray, state: FreeState, ctx: PlacementContext,
                   per_node: int, nodes: int) -> Choice | None:
        ix = state.index
        tab = ix.table(job.job_class)
        c = Candidates.build(ix, tab, cand)
        return slowest_choice(self.label, ix, tab, select.best_split(ix, c, per_node, nodes), lambda worst, _gpus: (
            f"{per_node} per node on {nodes} node(s), max sf {worst:.3f} (class {tab.key})"))

    def pm_first_choice(self, ix: ClusterIndex, tab: ClassTable, c: Candidates, n: int,
                        spare: np.ndarray | None = None) -> Choice | None:
        return slowest_choice(self.label, ix, tab, select.pm_first(c, n, spare=spare), lambda worst, gpus: (
            f"PM-First, max sf {worst:.3f} (class {tab.key}) on {_nodes_of(ix, gpus)} node(s)"))


WITHIN, ACROSS = "within-node", "across-nodes"


def lv_entries(tab: ClassTable, penalty: float) -> tuple[tuple[float, int, str], ...]:
    """PAL's walk of the locality x variability matrix: (weight, level, kind), sorted by
    weight; the sort is stable and entries are built by ascending sf, within before across."""
    return _lv_entries(tab.values, penalty)


@lru_cache(maxsize=256)
def _lv_entries(values: tuple[float, ...], penalty: float) -> tuple[tuple[float, int, str], ...]:
    """Memoised: the walk depends only on the class's distinct factors and lambda, and a
    busy simulation asks for it hundreds of thousands of times."""
    entries: list[tuple[float, int, str]] = []
    for level, s in enumerate(values):
        entries.append((s, level, WITHIN))
        entries.append((penalty * s, level, ACROSS))
    entries.sort(key=lambda e: e[0])
    return tuple(entries)


@dataclass(frozen=True)
class PalChooser(ShapedChooser):
    """PAL: for 1 < N <= GPUs per node, walk (sf threshold, locality) entries by weight
    (sf, or lambda * sf across nodes) and take the first that yields N GPUs; otherwise
    PM-First, whose queue order and split rule it shares. lambda is ctx.locality_penalty.

    `matching` (pal-match's chooser): a job less sensitive than class A takes, among GPUs
    that are equally good for itself (same sf level, same PM-First locality score; on PAL's
    within-node step, any set with the same max sf), those worst for class A first, instead
    of the lowest ids. Class A keeps more of its best GPUs free in a cluster where nothing is
    ever moved. Ties never cost the job speed: its max sf is the same as under PAL's rule, and
    where PAL's choice stays on one node and the matched one would not, PAL's is taken (no
    locality penalty for the sake of matching)."""

    matching: bool = False
    pm_first: PmFirst = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "pm_first", PmFirst(self.label))

    def placement_order(self, queue: Sequence[JobRequest], snapshot: Snapshot) -> tuple[list[JobRequest], int]:
        return self.pm_first.placement_order(queue, snapshot)

    def pick_split(self, job: JobRequest, cand: np.ndarray, state: FreeState, ctx: PlacementContext,
                   per_node: int, nodes: int) -> Choice | None:
        return self.pm_first.pick_split(job, cand, state, ctx, per_node, nodes)

    def pick(self, job: JobRequest, cand: np.ndarray, state: FreeState, ctx: PlacementContext) -> Choice | None:
        ix = state.index
        tab = ix.table(job.job_class)
        c = Candidates.build(ix, tab, cand)
        spare = self.spare_order(ix, tab)
        if spare is None:
            return self.pal_choice(ix, tab, c, job.gpus, ctx, spare=None)
        mine = self.pal_choice(ix, tab, c, job.gpus, ctx, spare=spare)
        if mine is None or not spans_nodes(ix.node_list, mine.gpus):
            return mine
        theirs = self.pal_choice(ix, tab, c, job.gpus, ctx, spare=None)
        return theirs if theirs is not None and not spans_nodes(ix.node_list, theirs.gpus) else mine

    def pick_one_node(self, job: JobRequest, cand: np.ndarray, state: FreeState,
                      ctx: PlacementContext) -> Choice | None:
        """PAL's walk without its across-nodes entries: the within-node step at the lowest
        sf level where some node has job.gpus usable GPUs (with `spare_order` as tie-break)."""
        ix = state.index
        tab = ix.table(job.job_class)
        c = Candidates.build(ix, tab, cand)
        n = job.gpus
        level = c.first_within_level(n)
        if level >= c.NONE:
            return None  # no allowed node has n usable GPUs
        found = select.best_single_node(c, n, level, spare=self.spare_order(ix, tab))
        if found is None:
            return None
        gpus = as_gpus(found[0])
        return Choice(gpus=gpus, why=lambda: f"{self.label}: within-node sf<={tab.values[found[1]]:.3f} (one node, "
                      f"class {tab.key}); {describe_gpus(ix, tab, gpus)}",
                      alternatives=((gpus, float(tab.values[found[1]])),))

    def spare_order(self, ix: ClusterIndex, tab: ClassTable) -> np.ndarray | None:
        """The tie-break among GPUs equally good for the job (None: GPU-id order); when
        matching, class A's worst GPUs first (0), for jobs of any other class."""
        if not self.matching:
            return None
        sensitive = ix.table(DEFAULT_CLASS)
        if tab.key == sensitive.key:
            return None
        return (sensitive.n_levels - 1) - sensitive.level

    def pal_choice(self, ix: ClusterIndex, tab: ClassTable, c: Candidates, n: int, ctx: PlacementContext,
                   spare: np.ndarray | None) -> Choice | None:
        """PAL's walk over `c`; `spare` replaces the GPU-id tie-break (see select.pm_first)."""
        if n == 1 or n > ix.max_gpus_per_node:
            return self.pm_first.pm_first_choice(ix, tab, c, n, spare)
        tried: list[tuple[tuple[int, ...], float]] = []
        # the lowest level at which each step can yield n GPUs: entries below it are skipped
        # without a search (the walk often passes dozens of levels that cannot hold n GPUs)
        first_within = c.first_within_level(n)
        first_across = int(np.searchsorted(c.total_up_to, n))
        for weight, level, kind in lv_entries(tab, ctx.locality_penalty):
            if level < (first_within if kind == WITHIN else first_across):
                tried.append(((), weight))
                continue
            if kind == WITHIN:
                found = select.best_single_node(c, n, level, spare=spare)
                got = None if found is None else found[0]
            else:
                got = select.pm_first(c, n, max_level=level, spare=spare)
            if got is None:
                tried.append(((), weight))
                continue
            gpus = as_gpus(got)
            tried.append((gpus, weight))
            return Choice(gpus=gpus, why=lambda: f"{self.label}: {kind} sf<={tab.values[level]:.3f} weight {weight:.3f} "
                          f"(lambda {ctx.locality_penalty:g}, class {tab.key}); {describe_gpus(ix, tab, gpus)}",
                          alternatives=tuple(tried))
        return None  # unreachable when len(cand) >= n: the last across entry admits every GPU
