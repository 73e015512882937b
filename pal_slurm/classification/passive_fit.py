"""The numeric core of passive speed (`passive`): median polish with max attribution, over one job
class's runs as flat numpy arrays.

Apart from `passive` because this is the hot path (a million runs, a few dozen array passes per
iteration, no Python loop over runs) and reads as arithmetic, while `passive` reads as the model:
rows in, skipped rows counted, estimates with their evidence out.

The model, on a log scale: ``log t_r = log b_k + max_{g in G_r} log f_g + noise``: run r of
fingerprint k on GPUs G_r takes its fingerprint's typical-GPU time b_k times the factor of its
slowest GPU. Without the max it is Tukey's two-way median polish (alternate row and column
medians); the max is handled by attribution, each iteration:

1. every run's *unit*, the GPU with the largest f (the lowest id on a tie: never the input
   order), and its model pace q_r: the largest *known* factor of its GPUs (one resting on runs
   the GPU paced; at the start, on one-GPU runs), or where some of its GPUs are not known, at
   least the median of the largest of that many typical GPUs (a whole node nobody resolved);
2. baselines: each (fingerprint, unit) pair casts one vote, the median of its runs' t_r / q_r,
   and b_k = the median of the votes of units whose factor is known and lies in the typical
   band; of all its units where a
   fingerprint has no such vote. One vote per GPU: a recurring job that keeps landing on one GPU
   must not make that GPU its baseline. Known units only: a starting point is a guess, and a job
   paced by a guess says little about its fingerprint. Typical units only: a slow (or broken)
   GPU never moves a baseline, so its evidence cannot move any other GPU's estimate;
3. paces p_r = t_r / b_k; a run's pace is attributed to its unit when the unit's factor exceeds
   every other GPU's of the run by more than the margin (always, for one GPU); otherwise the run
   is evidence for nobody: its GPUs' factors are only bounded above by it;
4. f_g = the median pace of the runs attributed to g (a GPU attributed none keeps its starting
   point: it still ranks the GPU for attribution, but casts no vote), then every factor is
   divided by the median factor of the GPUs with enough evidence, so 1.0 is the typical GPU.

Iteration starts from a bootstrap: baselines from the raw times (units: each run's lowest GPU
id) and each GPU's median pace over its one-GPU runs, or over every run it was in where it had
none (an upper bound, but one that puts a GPU slow in every job at the top of its jobs). It stops
when no attribution changes and no typical factor moves by more than `TOLERANCE` on a log scale,
or after `max_iterations` (8): the estimates settle within a few iterations (on the accuracy
bench the figures of 6 and 30 iterations agree to 0.03 %), but on sparse data the attribution of
the few runs whose top two GPUs sit at the margin can keep flipping, so a fixed point is not
always reached. The stopping test reads typical GPUs only, for the same reason as step 2: a slow
GPU's own data must not decide when the others' estimates stop.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

__all__ = ["Fit", "FitSettings", "Runs", "bounds", "group_median", "polish"]

#: largest change of a typical GPU's log factor between iterations that counts as converged
TOLERANCE = 1e-9


@dataclass(frozen=True)
class FitSettings:
    """The knobs of the fit (`passive.PassiveSettings` carries them for the caller)."""

    margin: float
    typical_band: float
    min_paced: int
    max_iterations: int


@dataclass(frozen=True)
class Runs:
    """One class's runs: run r took `t[r]` seconds, is of fingerprint `fp[r]` and ran on GPUs
    ``idx[starts[r]:starts[r] + sizes[r]]`` (distinct ids in 0..n_gpu-1, at least one)."""

    t: np.ndarray
    fp: np.ndarray
    starts: np.ndarray
    sizes: np.ndarray
    idx: np.ndarray
    n_fp: int
    n_gpu: int

    @cached_property
    def single(self) -> np.ndarray:
        return self.sizes == 1

    @cached_property
    def seg(self) -> np.ndarray:
        """Per membership (entry of `idx`), its run."""
        return np.repeat(np.arange(self.t.size), self.sizes)

    @cached_property
    def jobs(self) -> np.ndarray:
        """Per GPU, how many runs it took part in."""
        return np.bincount(self.idx, minlength=self.n_gpu)


@dataclass(frozen=True)
class Fit:
    """The fit of one class: per GPU its factor (NaN: in no run), per fingerprint its baseline,
    per run its pace (t / baseline) and the GPU it is attributed to (-1: none)."""

    factor: np.ndarray
    baseline: np.ndarray
    pace: np.ndarray
    pacer: np.ndarray
    iterations: int


def group_median(values: np.ndarray, groups: np.ndarray, n_groups: int) -> np.ndarray:
    """The median of `values` per group 0..n_groups-1 (NaN for an empty group); the mean of the
    middle two for an even count. Order-independent: a stable sort by (group, value)."""
    out = np.full(n_groups, np.nan)
    if values.size == 0:
        return out
    order = np.lexsort((values, groups))
    v = values[order]
    counts = np.bincount(groups, minlength=n_groups)
    starts = np.cumsum(counts) - counts
    has = counts > 0
    lo = starts[has] + (counts[has] - 1) // 2
    hi = starts[has] + counts[has] // 2
    out[has] = (v[lo] + v[hi]) / 2.0
    return out


def _top_two(f: np.ndarray, runs: Runs) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per run: the largest factor of its GPUs, the GPU holding it (lowest id on a tie) and the
    largest factor of the others (-inf for a one-GPU run)."""
    vals = f[runs.idx]
    top = np.maximum.reduceat(vals, runs.starts)
    is_top = vals == np.repeat(top, runs.sizes)
    unit = np.minimum.reduceat(np.where(is_top, runs.idx, runs.n_gpu), runs.starts)
    rest = np.where(runs.idx == np.repeat(unit, runs.sizes), -np.inf, vals)
    second = np.maximum.reduceat(rest, runs.starts)
    return top, unit, second


def _baselines(x: np.ndarray, runs: Runs, unit: np.ndarray, voter: np.ndarray) -> np.ndarray:
    """Per fingerprint: the median over its voting units of each unit's median `x`; over all its
    units where none votes (every GPU it ran on is atypical)."""
    pairs, inverse = np.unique(runs.fp * runs.n_gpu + unit, return_inverse=True)
    vote = group_median(x, inverse.ravel(), pairs.size)
    pair_fp, pair_unit = pairs // runs.n_gpu, pairs % runs.n_gpu
    ok = voter[pair_unit]
    base = group_median(vote[ok], pair_fp[ok], runs.n_fp)
    gap = np.isnan(base)
    if gap.any():
        base[gap] = group_median(vote, pair_fp, runs.n_fp)[gap]
    return base


def _typical_scale(f: np.ndarray, evidence: np.ndarray, min_paced: int, present: np.ndarray) -> float:
    """What 1.0 means: the median factor of the GPUs with at least `min_paced` runs of evidence (of
    those with any where none has that many; of every GPU `present` where none has any)."""
    for chosen in (evidence >= min_paced, evidence >= 1, present):
        if chosen.any():
            return float(np.median(f[chosen]))
    return 1.0


def _in_band(f: np.ndarray, band: float) -> np.ndarray:
    return np.abs(np.log(f)) <= math.log1p(band)


def _bootstrap(runs: Runs, s: FitSettings) -> np.ndarray:
    """First factors, before any attribution: see the module doc."""
    ones = np.ones(runs.n_gpu)
    _, unit, _ = _top_two(ones, runs)
    base = _baselines(runs.t, runs, unit, np.ones(runs.n_gpu, dtype=bool))
    pace = runs.t / base[runs.fp]
    direct = group_median(pace[runs.single], runs.idx[runs.starts[runs.single]], runs.n_gpu)
    upper = group_median(np.repeat(pace, runs.sizes), runs.idx, runs.n_gpu)
    f = np.where(np.isnan(direct), upper, direct)
    f = np.where(np.isnan(f), 1.0, f)  # GPUs in no run of this class: placeholders, never reported
    evidence = np.bincount(runs.idx[runs.starts[runs.single]], minlength=runs.n_gpu)
    return f / _typical_scale(f, evidence, s.min_paced, runs.jobs > 0)


def _model_pace(f: np.ndarray, known: np.ndarray, typical: np.ndarray, runs: Runs) -> np.ndarray:
    """Per run, the pace the model expects: the largest known factor of its GPUs, or, where it ran
    on u GPUs whose factor is not known, at least the median of the largest of u typical GPUs
    (the known typical factors' quantile 0.5^(1/u)): what a whole node nobody resolved most likely
    runs at, rather than the starting point's guess."""
    q = np.maximum.reduceat(np.where(known, f, 0.0)[runs.idx], runs.starts)
    unknown = np.add.reduceat((~known)[runs.idx].astype(np.int64), runs.starts)
    pool = f[typical]
    if not pool.size:
        return np.maximum(q, np.where(unknown > 0, 1.0, 0.0))
    counts = np.unique(unknown[unknown > 0])
    prior = np.zeros(int(unknown.max()) + 1)
    prior[counts] = np.quantile(pool, 0.5 ** (1.0 / counts))
    return np.maximum(q, prior[unknown])


def _step(f: np.ndarray, known: np.ndarray, runs: Runs, s: FitSettings) -> Fit:
    """One iteration (steps 1-4 of the module doc), from factors `f`, of which `known` rest on
    runs the GPU paced (the others are starting points)."""
    top, unit, second = _top_two(f, runs)
    pacer = np.where(top > second * (1.0 + s.margin), unit, -1)
    typical = known & _in_band(f, s.typical_band)
    base = _baselines(runs.t / _model_pace(f, known, typical, runs), runs, unit, typical)
    pace = runs.t / base[runs.fp]
    paced = pacer >= 0
    evidence = np.bincount(pacer[paced], minlength=runs.n_gpu)
    new = group_median(pace[paced], pacer[paced], runs.n_gpu)
    f_new = np.where(np.isnan(new), f, new)
    scale = _typical_scale(f_new, evidence, s.min_paced, runs.jobs > 0)
    return Fit(factor=f_new / scale, baseline=base * scale, pace=pace / scale, pacer=pacer, iterations=0)


def polish(runs: Runs, s: FitSettings) -> Fit:
    """The fit of one class's runs (module doc). Factors of GPUs in no run are NaN."""
    f = _bootstrap(runs, s)
    known = np.bincount(runs.idx[runs.starts[runs.single]], minlength=runs.n_gpu) > 0
    fit, last_pacer = None, None
    for it in range(1, max(1, s.max_iterations) + 1):
        fit = _step(f, known, runs, s)
        typical = _in_band(f, s.typical_band) & (runs.jobs > 0)
        moved = np.abs(np.log(fit.factor[typical] / f[typical]))
        done = last_pacer is not None and np.array_equal(fit.pacer, last_pacer) and \
            (moved.size == 0 or float(moved.max()) <= TOLERANCE)
        f, last_pacer = fit.factor, fit.pacer
        known = np.bincount(fit.pacer[fit.pacer >= 0], minlength=runs.n_gpu) > 0
        if done:
            break
    assert fit is not None
    factor = np.where(runs.jobs > 0, fit.factor, np.nan)
    return Fit(factor=factor, baseline=fit.baseline, pace=fit.pace, pacer=fit.pacer, iterations=it)


def bounds(fit: Fit, runs: Runs, gpus: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """For GPUs the fit could not resolve: per GPU of `gpus`, the median pace of every run it was
    in (its factor is at most about this) and the GPUs that were in every one of those runs, itself
    included (the company it never ran without: run times cannot tell them apart)."""
    wanted = np.zeros(runs.n_gpu, dtype=bool)
    wanted[gpus] = True
    member = wanted[runs.idx]
    upper = group_median(fit.pace[runs.seg[member]], runs.idx[member], runs.n_gpu)[gpus]
    order = np.argsort(runs.idx, kind="stable")
    first = np.searchsorted(runs.idx[order], np.arange(runs.n_gpu + 1))
    company = []
    for g in gpus.tolist():
        mine = runs.seg[order[first[g]:first[g + 1]]]
        sizes = runs.sizes[mine]
        offset = np.arange(int(sizes.sum())) - np.repeat(np.cumsum(sizes) - sizes, sizes)
        ids, seen = np.unique(runs.idx[np.repeat(runs.starts[mine], sizes) + offset], return_counts=True)
        company.append(ids[seen == mine.size])
    return upper, company
