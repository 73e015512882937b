"""The six policies of the PAL artifact (hal-uw/blox-pal), re-implemented from its rules.

What each does is stated in docs/simulation.md ("Policies"); the docstrings below say only what
is not obvious there. All of them walk the queue in order and stop at the first job that
does not fit (no backfill). Constraints the artifact never had (allowed_nodes, a fixed
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

from functools import lru_cache

import numpy as np

from pal_slurm.placement import select
from pal_slurm.placement.base import (
    Choice,
    InOrderPolicy,
    as_gpus,
    describe_gpus,
    free_on_node,
    register,
    slowest_choice,
)
from pal_slurm.placement.index import ClassTable, ClusterIndex, FreeState
from pal_slurm.placement.model import JobRequest, PlacementContext
from pal_slurm.placement.select import Candidates


def _nodes_of(ix: ClusterIndex, gpus: tuple[int, ...]) -> int:
    return len({int(ix.node_of[g]) for g in gpus})


class PackedPolicy(InOrderPolicy):
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
        return Choice(gpus=gpus, why=f"{self.name}: {len(nodes)} node(s) ({free}); {describe_gpus(ix, tab, gpus)}",
                      alternatives=((gpus, float(len(nodes))),))


@register
class PackedSticky(PackedPolicy):
    name = "packed-sticky"
    sticky = True
    description = "Artifact baseline: consolidate on the fewest nodes; running jobs stay put."


@register
class PackedNonSticky(PackedPolicy):
    name = "packed-nonsticky"
    sticky = False
    description = "Artifact baseline: consolidate on the fewest nodes; everything re-placed each round."


class RandomPolicy(InOrderPolicy):
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
        return Choice(gpus=gpus, why=f"{self.name}: sampled from {pool} free GPUs; {describe_gpus(ix, tab, gpus)}",
                      alternatives=((gpus, float(pool)),))


@register
class RandomSticky(RandomPolicy):
    name = "random-sticky"
    sticky = True
    description = "Artifact baseline: random free GPUs; running jobs stay put."


@register
class RandomNonSticky(RandomPolicy):
    name = "random-nonsticky"
    sticky = False
    description = "Artifact baseline: random free GPUs; everything re-placed each round."


class VariabilityPolicy(InOrderPolicy):
    """Shared by PM-First and PAL: class-sorted prefix, sf-ranked split placement."""

    class_sorted_prefix = True
    sticky = False

    def pick_split(self, job: JobRequest, cand: np.ndarray, state: FreeState, ctx: PlacementContext,
                   per_node: int, nodes: int) -> Choice | None:
        ix = state.index
        tab = ix.table(job.job_class)
        c = Candidates.build(ix, tab, cand)
        return slowest_choice(self.name, ix, tab, select.best_split(ix, c, per_node, nodes), lambda worst, _gpus: (
            f"{per_node} per node on {nodes} node(s), max sf {worst:.3f} (class {tab.key})"))

    def pm_first_choice(self, ix: ClusterIndex, tab: ClassTable, c: Candidates, n: int,
                        spare: np.ndarray | None = None) -> Choice | None:
        return slowest_choice(self.name, ix, tab, select.pm_first(c, n, spare=spare), lambda worst, gpus: (
            f"PM-First, max sf {worst:.3f} (class {tab.key}) on {_nodes_of(ix, gpus)} node(s)"))


@register
class PmFirst(VariabilityPolicy):
    name = "pm-first"
    description = "Artifact: class-sorted prefix; the N free GPUs with the lowest slowdown factor."

    def pick(self, job: JobRequest, cand: np.ndarray, state: FreeState, ctx: PlacementContext) -> Choice | None:
        ix = state.index
        tab = ix.table(job.job_class)
        return self.pm_first_choice(ix, tab, Candidates.build(ix, tab, cand), job.gpus)


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


@register
class Pal(VariabilityPolicy):
    """PAL: for 1 < N <= GPUs per node, walk (sf threshold, locality) entries by weight
    (sf, or lambda * sf across nodes) and take the first that yields N GPUs; otherwise
    PM-First. lambda is ctx.locality_penalty."""

    name = "pal"
    description = "Artifact: PM-First's queue treatment; trades slowdown factor against locality (lambda)."

    def pick(self, job: JobRequest, cand: np.ndarray, state: FreeState, ctx: PlacementContext) -> Choice | None:
        ix = state.index
        tab = ix.table(job.job_class)
        return self.pal_choice(ix, tab, Candidates.build(ix, tab, cand), job.gpus, ctx, spare=None)

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
        return Choice(gpus=gpus, why=lambda: f"{self.name}: within-node sf<={tab.values[found[1]]:.3f} (one node, "
                      f"class {tab.key}); {describe_gpus(ix, tab, gpus)}",
                      alternatives=((gpus, float(tab.values[found[1]])),))

    def spare_order(self, ix: ClusterIndex, tab: ClassTable) -> np.ndarray | None:
        """The tie-break among GPUs equally good for the job (None: GPU-id order)."""
        return None

    def pal_choice(self, ix: ClusterIndex, tab: ClassTable, c: Candidates, n: int, ctx: PlacementContext,
                   spare: np.ndarray | None) -> Choice | None:
        """PAL's walk over `c`; `spare` replaces the GPU-id tie-break (see select.pm_first)."""
        if n == 1 or n > ix.max_gpus_per_node:
            return self.pm_first_choice(ix, tab, c, n, spare)
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
            return Choice(gpus=gpus, why=lambda: f"{self.name}: {kind} sf<={tab.values[level]:.3f} weight {weight:.3f} "
                          f"(lambda {ctx.locality_penalty:g}, class {tab.key}); {describe_gpus(ix, tab, gpus)}",
                          alternatives=tuple(tried))
        return None  # unreachable when len(cand) >= n: the last across entry admits every GPU
