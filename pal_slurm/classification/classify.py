"""Turn per-GPU benchmark runs into performance bins and slowdown factors.

This module is pure: no database, no file I/O, no logging, no global state. It
handles ONE group (one GPU model x one benchmark); the caller groups its
profile records by model and benchmark and calls :func:`classify_group` once
per group, so that every model is normalised against its own fleet (an A100
is never "slow" merely because it is compared with H100s).

The method, and why each step is as it is, is docs/classification.md. :func:`classify_group`
runs it as one function per step:

1. :func:`_scores`: each GPU's median score; too few valid runs and it is unprofiled.
2. :func:`_outliers`: slow and fast outliers, by median and MAD.
3. :func:`_perfvars`: PerfVar against the regular GPUs, and the measurement noise.
4. :func:`_cluster`: the regular GPUs' bins (optimal 1-D k-means; K by BIC, then by noise).
5. :func:`_anchored`, :func:`_gpu_factors`: slowdown factors, anchored to the typical GPU.
6. :func:`_hysteresis`: a GPU near its previous bin keeps it.

The vocabulary (`ClassifyParams`, the results) is `classification/model`, the bins' partition
(step 4's K) `classification/partition`, the order-independent statistics `classification/stats`.

Determinism: the same input, in any mapping order and any run order, gives an
identical result: GPUs are processed sorted by ``(PerfVar, uuid)``, medians are
taken of sorted values, means use ``math.fsum`` (exactly rounded, so independent
of summation order) and every tie has an explicit rule. Nothing is rounded internally.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import kmeans1d

from pal_slurm.classification.model import Bin, ClassifyParams, GpuResult, GroupResult
from pal_slurm.classification.partition import (
    VARIANCE_FLOOR_REL,
    choose_partition,
    resolve_partition,
    segments_from_labels,
)
from pal_slurm.classification.stats import exact_mean, median_sorted, middle_half_mean, robust_median

__all__ = ["classify_group"]

#: Robust-scale constant: 1.4826 * MAD estimates sigma for normal data (= 1 / 0.6745).
MAD_TO_SIGMA = 1.4826
#: Standard error of a median of n normal samples is about sqrt(pi / 2) * sigma / sqrt(n).
MEDIAN_SE = math.sqrt(math.pi / 2.0)
#: A GPU's squared noise counts at most this many times the median one in the pooled noise.
NOISE_CLIP = 10.0


def _valid_scores(scores: Sequence[float]) -> list[float]:
    """Finite, positive scores as floats; anything else is an invalid run and is dropped."""
    out: list[float] = []
    for s in scores:
        try:
            v = float(s)
        except (TypeError, ValueError):
            continue
        if math.isfinite(v) and v > 0.0:
            out.append(v)
    return out


@dataclass(frozen=True)
class _Scores:
    """Step 1's outcome: each GPU's median score, the runs it kept, and who is profiled."""

    uuids: list[str]  # every GPU of the group, sorted
    medians: dict[str, float | None]  # None: no valid run
    kept: dict[str, list[float]]  # the valid runs left after dropping broken ones, sorted
    dropped: dict[str, int]  # runs dropped as broken
    profiled: list[str]  # GPUs with at least min_runs runs kept, sorted

    def unprofiled(self, u: str) -> GpuResult:
        """A GPU that gets no PerfVar, bin or slowdown: never a guessed value."""
        return GpuResult(u, len(self.kept[u]), self.medians[u], None, None, None, False, False,
                         dropped=self.dropped[u])


@dataclass(frozen=True)
class _PerfVar:
    """Step 3's outcome: PerfVar and noise against the regular GPUs, and the GPUs in order."""

    fleet: float  # the median score of the regular GPUs: what PerfVar is relative to
    perfvar: dict[str, float]  # every profiled GPU
    noise: dict[str, float | None]  # its PerfVar's standard error; None with fewer than two runs
    noise_var: float | None  # the pooled squared noise of the regular GPUs; None when none has two runs
    order: list[str]  # the profiled GPUs sorted by (PerfVar, uuid)
    regular: list[str]  # the same order without the outliers


@dataclass(frozen=True)
class _Tiers:
    """Steps 4 and 5: the bins in ascending centroid (fast outliers, regular bins, slow outliers),
    each with its clustering members, centroid and slowdown, and the anchor they are divided by."""

    members: list[tuple[list[str], str]]  # (GPUs sorted by PerfVar, "fast" | "" | "slow")
    centroids: list[float]
    slowdowns: list[float]
    anchor: float
    bin_of: dict[str, int]  # each profiled GPU's bin from the clustering
    k_regular: int
    criterion: str

    @property
    def regular_bins(self) -> list[int]:
        return [i for i, (_, kind) in enumerate(self.members) if not kind]


def classify_group(
    runs: Mapping[str, Sequence[float]],
    *,
    lower_is_better: bool,
    params: ClassifyParams = ClassifyParams(),
    previous: Mapping[str, float] | None = None,
) -> GroupResult:
    """Classify one group (one GPU model x one benchmark) into bins with slowdown factors.

    Args:
        runs: GPU uuid -> the scores of its benchmark runs. Invalid scores
            (NaN, inf, <= 0, non-numbers) are ignored.
        lower_is_better: True when scores are times, False for throughputs;
            PerfVar > 1 means slower than the median GPU either way.
        params: the knobs; see :class:`ClassifyParams`.
        previous: uuid -> slowdown factor from the previous classification run,
            used only when ``params.hysteresis > 0``.

    The steps the module docstring numbers, in order; each GPU's own factor (step 5) comes
    after the hysteresis (step 6), so that a GPU kept in its bin is shrunk toward that bin.
    """
    scores = _scores(runs, params)
    if not scores.profiled:
        return GroupResult(None, 0, "no profiled GPU (none has min_runs valid runs)", (),
                           tuple(scores.unprofiled(u) for u in scores.uuids), method=params.method)

    def normalise(fleet: float, score: float) -> float:
        return score / fleet if lower_is_better else fleet / score

    slow, fast = _outliers(scores, normalise, params)
    pv = _perfvars(scores, slow, fast, normalise)
    tiers = _anchored(pv, slow, fast, *_cluster(pv, params))
    bin_of = _hysteresis(tiers, pv, params, previous)
    factor = _gpu_factors(tiers, bin_of, pv, slow, params)
    return _result(scores, pv, tiers, bin_of, factor, slow, fast, params)


def _scores(runs: Mapping[str, Sequence[float]], params: ClassifyParams) -> _Scores:
    """Step 1: each GPU's median of its valid runs, broken runs dropped (:func:`robust_median`);
    a GPU with fewer than ``min_runs`` runs left is unprofiled."""
    uuids = sorted(runs)
    medians: dict[str, float | None] = {}
    kept: dict[str, list[float]] = {}
    dropped: dict[str, int] = {}
    for u in uuids:
        valid = sorted(_valid_scores(runs[u]))
        medians[u], kept[u] = robust_median(valid, params.run_ratio) if valid else (None, [])
        dropped[u] = len(valid) - len(kept[u])
    profiled = [u for u in uuids if len(kept[u]) >= params.min_runs]
    return _Scores(uuids, medians, kept, dropped, profiled)


def _outliers(scores: _Scores, normalise: Callable[[float, float], float],
              params: ClassifyParams) -> tuple[set[str], set[str]]:
    """Step 2: (slow, fast) outliers, on a first-pass PerfVar against every profiled GPU, by the
    modified z-score test (median and MAD, which a few very slow GPUs cannot inflate)."""
    profiled = scores.profiled
    fleet = median_sorted(sorted(scores.medians[u] for u in profiled))  # type: ignore[type-var]
    pv1 = {u: normalise(fleet, scores.medians[u]) for u in profiled}  # type: ignore[arg-type]
    pv_sorted = sorted(pv1.values())
    pv_med = median_sorted(pv_sorted)
    mad = median_sorted(sorted(abs(v - pv_med) for v in pv_sorted))
    threshold = max(params.outlier_min_excess, params.outlier_z * MAD_TO_SIGMA * mad)
    slow = {u for u in profiled if pv1[u] - pv_med > threshold}
    fast = {u for u in profiled if pv_med - pv1[u] > threshold}
    if len(slow) + len(fast) == len(profiled):  # only with outlier_z = outlier_min_excess = 0
        return set(), set()  # and no GPU exactly at the median
    return slow, fast


def _perfvars(scores: _Scores, slow: set[str], fast: set[str],
              normalise: Callable[[float, float], float]) -> _PerfVar:
    """Step 3: PerfVar against the regular GPUs only (an outlier, or a broken measurement, never
    rescales the healthy GPUs), each GPU's noise from its runs and the pooled noise."""
    profiled = scores.profiled
    regular_set = [u for u in profiled if u not in slow and u not in fast]
    fleet = median_sorted(sorted(scores.medians[u] for u in regular_set))  # type: ignore[type-var]
    perfvar = {u: normalise(fleet, scores.medians[u]) for u in profiled}  # type: ignore[arg-type]
    noise: dict[str, float | None] = {}
    for u in profiled:
        kept = [normalise(fleet, s) for s in scores.kept[u]]
        med = perfvar[u]
        if len(kept) < 2:
            noise[u] = None
        else:
            rel = [p / med for p in kept]  # relative, so that 1e300-sized values do not overflow
            mean = exact_mean(rel)
            var = math.fsum((p - mean) ** 2 for p in rel) / (len(rel) - 1)
            noise[u] = med * MEDIAN_SE * math.sqrt(var / len(rel))
    order = sorted(profiled, key=lambda u: (perfvar[u], u))
    regular = [u for u in order if u not in slow and u not in fast]
    # pooled noise: the MEAN squared standard error (the median of these chi-square-like values
    # is well below their mean, which would split fleets of identical GPUs), each clipped at
    # NOISE_CLIP x their median so that one erratic GPU does not blur every bin
    known = sorted(noise[u] ** 2 for u in regular if noise[u] is not None)  # type: ignore[operator]
    floor_var = (VARIANCE_FLOOR_REL * median_sorted([perfvar[u] for u in regular])) ** 2
    noise_var = None
    if known:
        cap = NOISE_CLIP * median_sorted(known)
        noise_var = max(exact_mean([min(v, cap) for v in known]), floor_var)
    return _PerfVar(fleet, perfvar, noise, noise_var, order, regular)


def _cluster(pv: _PerfVar, params: ClassifyParams) -> tuple[list[tuple[int, int]], str]:
    """Step 4: the regular GPUs (sorted by (PerfVar, uuid)) as contiguous bins, and how K was
    chosen: BIC (:func:`choose_partition`), raised until every bin is within measurement noise
    for ``shrink`` (:func:`resolve_partition`), or fixed at 2 for ``pal-k2``."""
    reg_values = [pv.perfvar[u] for u in pv.regular]
    if params.method == "pal-k2":
        distinct = len(set(reg_values))
        k = min(2, distinct, params.max_bins)
        segments = ([(0, len(pv.regular))] if k == 1
                    else segments_from_labels(kmeans1d.cluster(reg_values, 2).clusters))
        assert segments is not None
        return segments, f"K={len(segments)} fixed, as the PAL artifact (method pal-k2)"
    segments, criterion = choose_partition(reg_values, params.max_bins, params.min_bin_gap)
    if params.method == "shrink" and pv.noise_var is not None:
        segments, why = resolve_partition(reg_values, segments, params.max_bins, params.min_bin_gap, pv.noise_var)
        criterion = f"{criterion}; {why} (method shrink)"
    return segments, criterion


def _anchored(pv: _PerfVar, slow: set[str], fast: set[str], segments: list[tuple[int, int]],
              criterion: str) -> _Tiers:
    """Step 5, the bins' factors: every outlier a bin of its own around the regular bins, each
    bin's factor its centroid over the anchor (:func:`middle_half_mean` of the regular GPUs at
    their bins' centroids); a fast outlier's bin reads 1.0."""
    members: list[tuple[list[str], str]] = [([u], "fast") for u in pv.order if u in fast]
    members.extend((pv.regular[s:e], "") for s, e in segments)
    members.extend(([u], "slow") for u in pv.order if u in slow)
    centroids = [exact_mean([pv.perfvar[u] for u in ms]) for ms, _ in members]
    bin_of = {u: i for i, (ms, _) in enumerate(members) for u in ms}
    anchor = middle_half_mean([centroids[bin_of[u]] for u in pv.regular])
    slowdowns = [1.0 if kind == "fast" else c / anchor for c, (_, kind) in zip(centroids, members)]
    return _Tiers(members, centroids, slowdowns, anchor, bin_of, len(segments), criterion)


def _hysteresis(tiers: _Tiers, pv: _PerfVar, params: ClassifyParams,
                previous: Mapping[str, float] | None) -> dict[str, int]:
    """Step 6: each GPU's final bin. A regular GPU with a previous slowdown stays in the regular
    bin whose slowdown is closest to it while its PerfVar lies within that bin's range widened by
    ``hysteresis``, so re-profiling does not churn GPUs on a bin boundary."""
    bin_of = dict(tiers.bin_of)
    if not (params.hysteresis > 0 and previous):
        return bin_of
    h = params.hysteresis
    reg_idx = tiers.regular_bins
    ranges = [(pv.perfvar[ms[0]], pv.perfvar[ms[-1]]) for ms, _ in tiers.members]  # members sorted by PerfVar
    for u in pv.regular:
        prev = previous.get(u)
        try:
            prev_f = float(prev) if prev is not None else math.nan
        except (TypeError, ValueError):
            prev_f = math.nan
        if not math.isfinite(prev_f):
            continue
        new = bin_of[u]
        # closest slowdown; on a tie prefer the GPU's new bin, then the faster bin
        target = min(reg_idx, key=lambda i: (abs(tiers.slowdowns[i] - prev_f), i != new, i))
        lo, hi = ranges[target]
        if lo - h <= pv.perfvar[u] <= hi + h:
            bin_of[u] = target
    return bin_of


def _gpu_factors(tiers: _Tiers, bin_of: dict[str, int], pv: _PerfVar, slow: set[str],
                 params: ClassifyParams) -> dict[str, float]:
    """Step 5, each GPU's own factor: its bin's; with ``shrink`` its PerfVar shrunk toward its
    bin's centroid by its own noise (empirical Bayes); a slow outlier's its PerfVar over the anchor."""
    factor = {u: tiers.slowdowns[bin_of[u]] for u in pv.order}
    if params.method == "shrink":
        for i in tiers.regular_bins:
            ms = tiers.members[i][0]
            if len(ms) < 2:
                continue
            centroid = tiers.centroids[i]
            xs = [pv.perfvar[u] for u in ms]
            within = math.fsum((x - centroid) ** 2 for x in xs) / (len(xs) - 1)
            tau2 = max(0.0, within - (pv.noise_var or 0.0))
            for u in pv.order:
                if bin_of[u] != i:
                    continue
                noise = pv.noise[u]
                s2 = noise ** 2 if noise is not None else (pv.noise_var or 0.0)
                weight = 1.0 if s2 == 0.0 else tau2 / (tau2 + s2)
                factor[u] = (centroid + weight * (pv.perfvar[u] - centroid)) / tiers.anchor
    for u in slow:
        factor[u] = pv.perfvar[u] / tiers.anchor
    return factor


def _result(scores: _Scores, pv: _PerfVar, tiers: _Tiers, bin_of: dict[str, int], factor: dict[str, float],
            slow: set[str], fast: set[str], params: ClassifyParams) -> GroupResult:
    """The bins from their final members (a bin hysteresis emptied is dropped and the bins are
    re-indexed; centroids and factors stay the clustering's), and every GPU's result by uuid."""
    final: list[list[str]] = [[] for _ in tiers.members]
    for u in pv.order:
        final[bin_of[u]].append(u)
    bins: list[Bin] = []
    new_index: dict[int, int] = {}
    for i, ((_, kind), ms) in enumerate(zip(tiers.members, final)):
        if not ms:
            continue
        new_index[i] = len(bins)
        vals = [pv.perfvar[u] for u in ms]
        bins.append(Bin(len(bins), tiers.centroids[i], tiers.slowdowns[i], len(ms), bool(kind), min(vals), max(vals),
                        fast=kind == "fast"))
    gpus: list[GpuResult] = []
    for u in scores.uuids:
        if u in pv.perfvar:
            gpus.append(GpuResult(u, len(scores.kept[u]), scores.medians[u], pv.perfvar[u], new_index[bin_of[u]],
                                  factor[u], u in slow or u in fast, True, fast=u in fast, noise=pv.noise[u],
                                  dropped=scores.dropped[u]))
        else:
            gpus.append(scores.unprofiled(u))
    return GroupResult(pv.fleet, tiers.k_regular, tiers.criterion, tuple(bins), tuple(gpus), method=params.method,
                       noise=None if pv.noise_var is None else math.sqrt(pv.noise_var))
