"""pal-guard, the default policy: Slurm's own first fit unless variability pays for a change.

Why: choosing among near-identical GPUs by factor differences of a few percent costs more,
through fragmentation and locality, than it saves (measured: PAL's choice makes average
JCT up to 43 % worse than plain Slurm on quiet fleets). A site turns a placer on only if it
never makes its jobs slower, so the default starts from what Slurm as shipped would do and
moves a job only where the move is clearly worth it.

Rules (one job at a time, inside the one EASY mechanism of pal_slurm.placement.easy, with
Slurm's own estimate -- the time limit -- for the backfill, so that on a fleet without
variability every decision is exactly `slurm-backfill`'s: pal-guard's row of
pal_slurm.placement.table differs from slurm-backfill's only in this chooser and its wait
rule, waiting.NoiseGated):

1. **First fit is the default answer.** The chooser computes cons_tres's first fit
   (pal_slurm.placement.first_fit) and keeps it unless rule 3 finds a better set.
2. **Noise is equality.** PerfVars that differ by less than the measurement noise
   (`PlacementContext.noise`, a fraction; `[placer] noise`) are equal. A class whose
   factors all lie within the noise of each other has nothing to choose: its jobs get first
   fit without a search (and the submit filter need not hold them at all).
3. **Only moves that cost the queue nothing.** An alternative may replace each node first
   fit uses by a node that has at least as many GPUs free as the job takes there and *no
   more* free GPUs than first fit's node had: the free space left behind is never more
   broken up than first fit leaves it (a node with fewer free GPUs is a tighter fit), so
   waiting wider jobs lose nothing, and the job keeps first fit's node count (locality
   unchanged). On each node it takes that node's best free GPUs. Multi-node jobs the daemon
   steers (`same_slots`) must get one slot set free on every chosen node.
4. **The saving must beat the cost.** The expected saving is the job's estimated work (GPUs
   x estimated run time, the one cost model of pal_slurm.placement.cost) times the pace it
   gains; the alternative is taken only when its pace beats first fit's by more than the
   noise and that saving is positive after the alternative's cost, which rule 3 bounds at
   zero fragmentation and locality. Waiting for better GPUs follows the same rule: a job
   waits only for a release on which it is expected to finish sooner by more than the noise
   of its run time (pal_slurm.placement.waiting.NoiseGated: the margin is at least `noise`).

`pal explain` shows, for each placement, "first fit" or "variability choice" with the
saving that justified it (the Assignment's reason, `first_fit` flag).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from pal_slurm.placement import select
from pal_slurm.placement.base import Choice, as_gpus, describe_gpus
from pal_slurm.placement.cost import runtime_s
from pal_slurm.placement.first_fit import FirstFit
from pal_slurm.placement.index import ClassTable, ClusterIndex, FreeState
from pal_slurm.placement.model import JobRequest, PlacementContext, Snapshot


def within_noise(fast: float, slow: float, noise: float) -> bool:
    """Whether a pace of `slow` is within `noise` of `fast` (noise is equality: rule 2)."""
    return slow <= fast * (1.0 + noise)


def quiet_class(pv: np.ndarray, noise: float) -> bool:
    """True when every factor of the class lies within `noise` of every other (nothing to
    choose: the slowest is at most (1 + noise) x the fastest)."""
    if pv.size == 0:
        return True
    return within_noise(float(pv.min()), float(pv.max()), noise)


def quiet_table(tab: ClassTable, noise: float) -> bool:
    """quiet_class for a class table (its range kept with the table: asked for every job)."""
    span = tab.pv_range
    return span is None or within_noise(span[0], span[1], noise)


def fastest(tab: ClassTable) -> float:
    """The class's smallest PerfVar (1.0 for a class without GPUs)."""
    span = tab.pv_range
    return 1.0 if span is None else span[0]


@dataclass(frozen=True, eq=False)
class GuardedChooser:
    """First fit, or a fragmentation-neutral set that is faster beyond the noise (a GpuChooser)."""

    first_fit: FirstFit
    #: per (index, class): the class table ranked by raw PerfVar and a nodes x slots matrix of
    #: PerfVars, built once per class table
    _views: dict[tuple[int, str], tuple[ClassTable, ClassTable, np.ndarray]] = field(
        default_factory=dict, repr=False)

    deterministic = True

    def placement_order(self, queue: Sequence[JobRequest], snapshot: Snapshot) -> tuple[list[JobRequest], int]:
        """First fit's: the queue's own."""
        return self.first_fit.placement_order(queue, snapshot)

    def classes_left_to_slurm(self, perfvar: Mapping[str, Sequence[float]],
                              ctx: PlacementContext) -> frozenset[str]:
        """The classes whose GPUs all lie within the noise of each other (rule 2)."""
        return frozenset(c for c, values in perfvar.items()
                         if values and quiet_class(np.asarray(values, dtype=np.float64), ctx.noise))

    def choose(self, job: JobRequest, state: FreeState, ctx: PlacementContext) -> Choice | None:
        """First fit, unless rules 2-4 of the module docstring find a set worth moving to;
        the reason says which rule kept first fit, or what the move saves."""
        ff = self.first_fit.choose(job, state, ctx)
        if ff is None:
            return None
        ix = state.index
        tab = ix.table(job.job_class)
        if quiet_table(tab, ctx.noise):
            return _first_fit(ff, lambda: f"class {tab.key}'s factors lie within the noise ({ctx.noise:.0%})")
        pv = tab.pv_list
        ff_pace = max(map(pv.__getitem__, ff.gpus))
        # the best pace any set of this size could have (the class's fastest GPU, then the
        # free ones): if first fit is within the noise of it, no search can find a saving
        if within_noise(fastest(tab), ff_pace, ctx.noise):
            return _first_fit(ff, lambda: f"no set is faster beyond the noise ({ctx.noise:.0%})")
        cand = state.candidates(job.allowed_nodes)
        bound = float(np.partition(tab.pv[cand], job.gpus - 1)[job.gpus - 1])
        if within_noise(bound, ff_pace, ctx.noise):
            return _first_fit(ff, lambda: f"no set is faster beyond the noise ({ctx.noise:.0%})")
        alt = self._neutral(job, ff.gpus, state, tab, ff_pace / (1.0 + ctx.noise))
        if alt is None:
            return _first_fit(ff, lambda: "no faster set leaves the free GPUs as whole as first fit does")
        alt_pace = max(map(pv.__getitem__, alt))
        if within_noise(alt_pace, ff_pace, ctx.noise):
            return _first_fit(ff, lambda: f"the fastest neutral set (pace {alt_pace:.3f}) is within the noise of "
                                          f"first fit's ({ff_pace:.3f})")
        rt_ff = runtime_s(1.0, ff.gpus, pv, ix.node_list, ctx.locality_penalty)
        rt_alt = runtime_s(1.0, alt, pv, ix.node_list, ctx.locality_penalty)
        work_s = job.remaining_s if job.remaining_s > 0 else 0.0
        saving_gpu_s = job.gpus * work_s * (rt_ff - rt_alt)
        # a neutral set keeps first fit's node count, so a faster pace is always a saving;
        # kept as a guard should the neutral rule ever change
        if rt_alt >= rt_ff or (work_s > 0 and saving_gpu_s <= 0):
            return _first_fit(ff, lambda: "no expected saving")
        gpus = as_gpus(alt)
        ff_gpus = ff.gpus
        saving = (f"saves an expected {saving_gpu_s / 3600:.2f} GPU-h" if work_s > 0
                  else "saves an unknown amount (no runtime estimate)")
        label = self.first_fit.label
        return Choice(
            gpus=gpus,
            why=lambda: (f"{label}: variability choice: pace {alt_pace:.3f} instead of first fit's {ff_pace:.3f} "
                         f"({describe_gpus(ix, tab, ff_gpus)}); {saving}, {(1 - rt_alt / rt_ff):.1%} of its run "
                         f"time, at no cost in fragmentation or locality; {describe_gpus(ix, tab, gpus)}"),
            alternatives=((gpus, alt_pace), (ff_gpus, ff_pace)), instead_of=ff_gpus)

    def _pv_views(self, ix: ClusterIndex, tab: ClassTable) -> tuple[ClassTable, np.ndarray]:
        """The class table ranked by raw PerfVar (for select.best_same_slots) and a
        nodes x slots matrix of PerfVars (inf where no GPU), built once per class."""
        key = (id(ix), tab.key)
        hit = self._views.get(key)
        if hit is None or hit[0] is not tab:
            width = max(ix.max_gpus_per_node, 1)
            mat = np.full((ix.n_nodes, width), np.inf)
            mat[ix.node_of, ix.slot_of] = tab.pv
            hit = (tab, replace(tab, sf=tab.pv), mat)
            self._views[key] = hit
        return hit[1], hit[2]

    def _neutral(self, job: JobRequest, ff: Sequence[int], state: FreeState, tab: ClassTable,
                 worth: float = np.inf) -> list[int] | None:
        """The fastest set that replaces each of first fit's nodes by one with at least as
        many free GPUs as the job takes there and at most as many as first fit's node had
        (rule 3 of the module docstring), first fit's own nodes included; None when there is
        none, or (a shortcut) when no such set can have a pace below `worth`."""
        ix = state.index
        counts = state.node_counts(job.allowed_nodes)
        take = Counter(map(ix.node_list.__getitem__, ff))  # node -> GPUs first fit takes there, in its order
        if job.same_slots and len(take) > 1:
            return self._neutral_same_slots(job, take, counts, state, tab, worth)
        mat = self._pv_views(ix, tab)[1]
        # only nodes that could replace one of first fit's: between the fewest GPUs it takes
        # on a node and the most free GPUs one of its nodes has
        rows = np.flatnonzero((counts >= min(take.values())) & (counts <= int(counts[list(take)].max())))
        free = _free_matrix(ix, state, rows)
        sub = np.where(free, mat[rows], np.inf)
        sub.sort(axis=1)
        sub_counts = counts[rows]
        gid = ix.slot_ids
        used: list[int] = []
        out: list[int] = []
        for v, t in sorted(take.items(), key=lambda p: (-p[1], p[0])):
            ok = np.flatnonzero((sub_counts >= t) & (sub_counts <= counts[v]))
            if used:
                ok = ok[~np.isin(rows[ok], used)]
            if ok.size == 0:
                return None
            nodes = rows[ok]
            # fastest first; ties: first fit's own node, then the tighter fit, then node order
            i = int(ok[np.lexsort((nodes, sub_counts[ok], nodes != v, sub[ok, t - 1]))[0]])
            u = int(rows[i])
            used.append(u)
            row = np.where(free[i], mat[u], np.inf)
            out += [int(gid[u, slot]) for slot in np.argsort(row, kind="stable")[:t]]
        return out

    def _neutral_same_slots(self, job: JobRequest, take: dict[int, int], counts: np.ndarray, state: FreeState,
                            tab: ClassTable, worth: float) -> list[int] | None:
        """Rule 3 for a job the daemon steers onto one slot set on every node: the fastest
        such set on nodes with at least the GPUs taken per node free and at most as many as
        the fullest of first fit's nodes had."""
        ix = state.index
        pv_tab, mat = self._pv_views(ix, tab)
        per = next(iter(take.values()))
        limit = int(counts[list(take)].max())
        ok_nodes = (counts >= per) & (counts <= limit)
        # any slot set's pace on a node is at least that node's per-th best free GPU, so
        # the len(take)-th best of those bounds every same-slot choice from below
        rows = np.flatnonzero(ok_nodes)
        if rows.size < len(take):
            return None
        best = np.sort(np.where(_free_matrix(ix, state, rows), mat[rows], np.inf), axis=1)[:, per - 1]
        # a node whose per-th best GPU is not below `worth` cannot be in a set worth taking
        # (and ranks after every node of such a set), so the search need not see it
        rows = rows[best < worth]
        if rows.size < len(take):
            return None
        ok_nodes = np.zeros_like(ok_nodes)
        ok_nodes[rows] = True
        cand = state.candidates(job.allowed_nodes)
        cand = cand[ok_nodes[ix.node_of[cand]]]
        got = select.best_same_slots(ix, pv_tab, cand, per, len(take))
        return None if got is None else [int(g) for g in got]


def _free_matrix(ix: ClusterIndex, state: FreeState, rows: np.ndarray) -> np.ndarray:
    """Which slots of the nodes `rows` are free (rows x slots; False where a node has fewer)."""
    width = max(ix.max_gpus_per_node, 1)
    if ix.node_major_ids and ix.n == ix.n_nodes * width:  # every node has `width` GPUs: a view
        return state.mask.reshape(ix.n_nodes, width)[rows]
    free = np.zeros((ix.n_nodes, width), dtype=bool)
    free[ix.node_of, ix.slot_of] = state.mask
    return free[rows]


def _first_fit(ff: Choice, why: Callable[[], str]) -> Choice:
    """First fit, with why no other set was taken (written only for choices that are kept)."""
    return Choice(gpus=ff.gpus, why=lambda: f"{ff.reason}; first fit kept: {why()}", alternatives=ff.alternatives,
                  first_fit=True)
