"""Turn per-GPU benchmark runs into performance bins and slowdown factors.

This module is pure: no database, no file I/O, no logging, no global state. It
handles ONE group (one GPU model x one benchmark); the caller groups its
profile records by model and benchmark and calls :func:`classify_group` once
per group, so that every model is normalised against its own fleet (an A100
is never "slow" merely because it is compared with H100s).

Pipeline (docs/classification.md says the same for operators):

1. **Per-GPU score.** The median of the GPU's *valid* runs. A run is invalid
   when its score is NaN, infinite, non-positive or not a number at all;
   invalid runs are dropped, never fatal, because one broken benchmark run
   must not stop a whole classification. A run more than ``params.run_ratio``
   times off the GPU's own median is a broken run too (a timer in the wrong
   unit); it is dropped and the median taken again (:func:`robust_median`).
   A GPU with fewer than ``params.min_runs`` runs left is *unprofiled*: it
   gets no PerfVar, bin or slowdown. We never guess a value for it, because a
   wrong guess would steer jobs onto a GPU we know nothing about.

2. **Outliers, both sides** (on a first-pass PerfVar against all profiled
   GPUs). With ``m = median(PerfVar)``, ``MAD = median(|PerfVar - m|)`` and
   ``t = max(params.outlier_min_excess, params.outlier_z * 1.4826 * MAD)``
   (the modified z-score test ``0.6745 * (x - m) / MAD > outlier_z`` of
   Iglewicz & Hoaglin solved for x; median/MAD rather than mean/std, which a
   few very slow GPUs inflate to hide themselves; ``outlier_min_excess``
   guards MAD = 0), a GPU is a *slow* outlier iff ``PerfVar - m > t`` and a
   *fast* outlier iff ``m - PerfVar > t``. A fast outlier is a measurement
   to check, not a speed-up: its factor is 1.0 (the typical GPU's), so no
   placement policy chases it. Every outlier gets a bin of its own and is left
   out of steps 3-6, so no single GPU can move another GPU's factor.

3. **PerfVar.** ``fleet = median(per-GPU medians of the regular GPUs)``;
   ``PerfVar(g) = median(g) / fleet`` when lower scores are better (times)
   and ``fleet / median(g)`` when higher is better (throughputs). Either way
   PerfVar > 1 means "slower than the typical GPU", and a GPU with half the
   throughput has PerfVar 2.0, exactly as one taking twice the time. Each
   GPU's *noise* is the standard error of its PerfVar from its runs,
   ``sqrt(pi/2) * sd / sqrt(runs)`` (a median's); the pooled noise is the mean
   squared noise of the regular GPUs, each clipped at ``NOISE_CLIP`` x their
   median (the median of such chi-square-like values is well below their mean
   and would split fleets of identical GPUs).

4. **Number of bins.** The regular PerfVars are clustered with *optimal* 1-D
   k-means (``kmeans1d``, an exact dynamic program: no random start). K is
   first chosen by the Bayesian information criterion over ``K = 1 ..
   min(max_bins, distinct values)``, as Ckmeans.1d.dp does: each K's hard
   partition defines a Gaussian mixture (weights ``n_k / n``, the cluster
   means, the unbiased within-cluster variances; a one-member cluster uses
   ``d^2`` and a zero-variance one ``d^2 / 36``, ``d`` the gap to the nearest
   outside value; every variance floored at ``(1e-4 * median)^2``),
   ``BIC = -2 L + (3K - 1) ln n``, the smallest wins, ties to the smaller K.
   Only partitions whose adjacent centroids differ by at least
   ``min_bin_gap`` compete (tiers tighter than benchmark noise are useless to
   a scheduler). ``method = "pal-k2"`` fixes K = 2 instead (the PAL artifact).
   ``method = "shrink"`` (the default) then raises K until every bin is
   within measurement noise (:func:`_resolve_partition`): BIC only asks
   whether there is more than one hump, and a continuous spread -- what real
   fleets have -- has one.

5. **Slowdown factors, anchored.** Bins are ordered by centroid (mean PerfVar
   of their clustering members): fast outliers first, then the regular bins,
   then the slow outliers. ``slowdown(bin) = centroid / anchor``, the anchor
   the interquartile mean of the regular GPUs, each counted at its bin's
   centroid (:func:`_middle_half_mean`): continuous in the fleet, so one GPU
   more or less never flips the scale, and exactly the typical bin's centroid
   (that bin reads 1.0) whenever the middle half of the regular GPUs lies in
   one bin; fast outlier bins read 1.0. With methods ``bic`` and ``pal-k2`` a GPU's factor is
   its bin's. With ``shrink`` it is its own PerfVar shrunk toward its bin's
   centroid by its own noise (empirical Bayes): ``c + w (PerfVar - c)``,
   ``w = tau^2 / (tau^2 + noise^2)``, ``tau^2 = max(0, within-bin variance -
   pooled noise^2)``, divided by the same anchor. A slow outlier's factor is
   its PerfVar over the anchor.

6. **Hysteresis** (``params.hysteresis = h > 0`` and ``previous`` given).
   Re-profiling moves PerfVars a little, and a GPU sitting near a bin
   boundary would otherwise flip bins at every classification run, which
   churns the scheduler's placement decisions for no real reason. So a
   profiled, regular GPU with a previous slowdown factor is kept in the
   regular bin whose (new) slowdown is closest to its previous slowdown, as
   long as its new PerfVar lies within that bin's ``[low - h, high + h]``
   (``low``/``high`` = the bin's member range from the clustering, ``h`` in
   PerfVar units); otherwise it takes its new bin. After the moves each bin's
   ``gpus``/``low``/``high`` are recomputed from its final members while
   centroids, bin factors and the anchor stay those of the clustering, so the
   scale is stable; a kept GPU's own factor (``shrink``) is shrunk toward the
   bin it kept. A regular bin left with no member is dropped and the bins are
   re-indexed (``k_regular`` still reports the K that was chosen).

7. **Determinism.** The same input, in any mapping order and any run order,
   gives an identical result: GPUs are processed sorted by ``(PerfVar,
   uuid)``, medians are taken of sorted values, means use ``math.fsum``
   (exactly rounded, so independent of summation order) and every tie has an
   explicit rule. Nothing is rounded internally.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence

import kmeans1d
import numpy as np

__all__ = [
    "Bin",
    "ClassifyParams",
    "GpuResult",
    "GroupResult",
    "METHODS",
    "classify_group",
    "percentile_summary",
]

#: Robust-scale constant: 1.4826 * MAD estimates sigma for normal data (= 1 / 0.6745).
MAD_TO_SIGMA = 1.4826
#: Relative floor of the per-cluster standard deviation in the BIC likelihood.
VARIANCE_FLOOR_REL = 1e-4
#: Standard error of a median of n normal samples is about sqrt(pi / 2) * sigma / sqrt(n).
MEDIAN_SE = math.sqrt(math.pi / 2.0)
#: A GPU's squared noise counts at most this many times the median one in the pooled noise.
NOISE_CLIP = 10.0
#: The ways of turning PerfVars into factors (ClassifyParams.method); the first is the default.
METHODS = ("shrink", "bic", "pal-k2")


@dataclass(frozen=True)
class ClassifyParams:
    """Knobs of one classification run; stored with the run so it can be reproduced.

    Attributes:
        min_runs: a GPU with fewer valid runs is "unprofiled" for the group -- a
            median of one or two runs is too noisy to bin a GPU on, and we never
            guess.
        max_bins: upper bound on K for the regular GPUs; more tiers than this
            would not be usable by the placement policy anyway.
        outlier_z: modified z-score above which a GPU is an outlier
            (``0.6745 * (x - median) / MAD``; 3.5 is Iglewicz & Hoaglin's value).
        outlier_min_excess: an outlier's PerfVar must also exceed the median
            PerfVar by at least this much; guards MAD = 0 (identical GPUs).
        hysteresis: PerfVar margin within which a GPU keeps its previous bin
            (0 = off); see the module docstring.
        min_bin_gap: adjacent regular bins must have centroids at least this
            far apart (PerfVar units; 0.01 = 1 %): BIC alone splits tiers that
            are tighter than benchmark noise, which a scheduler cannot use.
        method: how PerfVars become factors. ``shrink`` (default): BIC's K, split
            further until every bin is within measurement noise, and each GPU's
            factor its own PerfVar shrunk toward its bin by its own noise;
            ``bic``: BIC's K, one factor per bin; ``pal-k2``: K = 2 plus
            outliers, one factor per bin (the PAL artifact). See the module
            docstring and docs/classification.md for the comparison.
        run_ratio: a run more than this many times off its GPU's own median is a
            broken run and is dropped (0 = keep every valid run).
    """

    min_runs: int = 3
    max_bins: int = 8
    outlier_z: float = 3.5
    outlier_min_excess: float = 0.10
    hysteresis: float = 0.0
    min_bin_gap: float = 0.01
    method: str = "shrink"
    run_ratio: float = 10.0

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"ClassifyParams.method must be one of {', '.join(METHODS)}, got {self.method!r}")
        if not isinstance(self.run_ratio, (int, float)) or isinstance(self.run_ratio, bool) or not (
                self.run_ratio == 0 or 1 < self.run_ratio < math.inf):
            raise ValueError(f"ClassifyParams.run_ratio must be 0 (off) or a number > 1, got {self.run_ratio!r}")
        for name in ("min_runs", "max_bins"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"ClassifyParams.{name} must be an integer, got {value!r}")
            if value < 1:
                raise ValueError(f"ClassifyParams.{name} must be >= 1, got {value}")
        for name in ("outlier_z", "outlier_min_excess", "hysteresis", "min_bin_gap"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"ClassifyParams.{name} must be a number, got {value!r}")
            if not math.isfinite(value):
                raise ValueError(f"ClassifyParams.{name} must be finite, got {value}")
            if value < 0:
                raise ValueError(f"ClassifyParams.{name} must be >= 0, got {value}")

    def as_dict(self) -> dict[str, Any]:
        """Plain dict of the parameters, to store with the classification run."""
        return asdict(self)


@dataclass(frozen=True)
class GpuResult:
    """Outcome for one GPU of the group.

    ``median_score`` is the median of the GPU's valid runs (also reported for
    an unprofiled GPU that has some valid runs, for information; None when it
    has none). ``perfvar``, ``bin`` and ``slowdown`` are None when the GPU is
    unprofiled. ``bin`` indexes :attr:`GroupResult.bins`. ``slowdown`` is the
    GPU's own factor: its bin's for methods ``bic`` and ``pal-k2``, its shrunk
    PerfVar for ``shrink``. ``fast`` marks an outlier that is suspiciously
    *fast* ("fast: check the measurement"; its factor is 1.0, the typical
    GPU's). ``noise`` is the standard error of its PerfVar from the spread of
    its runs (None with fewer than two); ``dropped`` counts runs dropped as
    broken (more than ``run_ratio`` off its own median).
    """

    uuid: str
    runs: int
    median_score: float | None
    perfvar: float | None
    bin: int | None
    slowdown: float | None
    outlier: bool
    profiled: bool
    fast: bool = False
    noise: float | None = None
    dropped: int = 0


@dataclass(frozen=True)
class Bin:
    """One performance bin, in ascending centroid: fast outliers (``fast``, one
    bin each) first, then the regular bins, then the slow outliers.

    ``centroid`` is the mean PerfVar of the members found by the clustering;
    ``low``/``high`` are the min/max PerfVar of the final members (after
    hysteresis, which may make the range overlap a neighbour's). ``slowdown``
    is ``centroid / centroid of the bin holding the median regular GPU``
    (1.0 for that bin and for every fast outlier).
    """

    index: int
    centroid: float
    slowdown: float
    gpus: int
    outlier: bool
    low: float
    high: float
    fast: bool = False


@dataclass(frozen=True)
class GroupResult:
    """Classification of one group (one GPU model x one benchmark).

    ``k_regular`` is the K the criterion chose for the regular GPUs (0 when no
    GPU is profiled); ``criterion`` says in words how it was chosen, for the
    report. ``gpus`` is sorted by uuid and includes the unprofiled GPUs.
    ``fleet_median_score`` is the median score of the regular GPUs (the one
    PerfVar is relative to); ``noise`` the pooled measurement noise (the mean
    over regular GPUs of their PerfVar's squared standard error, each clipped at
    ``NOISE_CLIP`` x the median of them, square-rooted; None when no GPU has two runs).
    """

    fleet_median_score: float | None
    k_regular: int
    criterion: str
    bins: tuple[Bin, ...]
    gpus: tuple[GpuResult, ...]
    method: str = "shrink"
    noise: float | None = None


# --------------------------------------------------------------------------- helpers


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


def _median_sorted(xs: Sequence[float]) -> float:
    """Median of an already sorted, non-empty sequence (mean of the middle two for even n)."""
    n = len(xs)
    mid = n // 2
    if n % 2:
        return xs[mid]
    return (xs[mid - 1] + xs[mid]) / 2.0


def _mean(xs: Sequence[float]) -> float:
    """Exactly rounded mean: independent of the order of xs."""
    return math.fsum(xs) / len(xs)


def _segments_from_labels(labels: Sequence[int]) -> list[tuple[int, int]] | None:
    """[start, end) index ranges of the clusters of sorted data, or None if not a proper partition.

    Optimal 1-D k-means clusters are contiguous in sorted order; we rely on
    that and reject (skip) a K whose labelling is not contiguous, which cannot
    happen for K <= number of distinct values.
    """
    lab = np.asarray(labels)
    cuts = (np.flatnonzero(lab[1:] != lab[:-1]) + 1).tolist()
    bounds = [0, *cuts, len(lab)]
    segments = list(zip(bounds[:-1], bounds[1:]))
    if len(set(lab[[s for s, _ in segments]].tolist())) != len(segments):
        return None
    return segments


def _mixture_bic(x: np.ndarray, segments: list[tuple[int, int]], floor_var: float) -> float:
    """BIC (lower is better) of the Gaussian mixture defined by a hard partition of sorted x.

    Weights n_k/n, means = cluster means, variances = unbiased within-cluster
    variances; zero variances replaced as in Ckmeans.1d.dp (singleton: d^2,
    zero-variance cluster: d^2/36, d = gap to the nearest value outside the
    cluster) and then floored at ``floor_var``. L sums the mixture density over
    components for each point; p = 3K - 1.
    """
    n = len(x)
    k = len(segments)
    log_w = np.empty(k)
    mu = np.empty(k)
    var = np.empty(k)
    for j, (s, e) in enumerate(segments):
        m = e - s
        members = x[s:e]
        mean = _mean(members.tolist())
        v = float(np.sum((members - mean) ** 2) / (m - 1)) if m > 1 else 0.0
        if m == 1 or v == 0.0:
            gaps = []
            if s > 0:
                gaps.append(float(x[s] - x[s - 1]))
            if e < n:
                gaps.append(float(x[e] - x[e - 1]))
            d = min(gaps) if gaps else 0.0
            v = d * d if m == 1 else d * d / 36.0
        log_w[j] = math.log(m / n)
        mu[j] = mean
        var[j] = max(v, floor_var)
    # log of each component's weighted density at each point: shape (k, n)
    comp = (log_w - 0.5 * np.log(2.0 * math.pi * var))[:, None] - (x[None, :] - mu[:, None]) ** 2 / (
        2.0 * var[:, None]
    )
    top = comp.max(axis=0)
    loglik = float(np.sum(top + np.log(np.sum(np.exp(comp - top), axis=0))))
    return -2.0 * loglik + (3 * k - 1) * math.log(n)


def _centroids_apart(x: np.ndarray, segments: list[tuple[int, int]], min_gap: float) -> bool:
    means = [float(x[a:b].mean()) for a, b in segments]
    return all(hi - lo >= min_gap for lo, hi in zip(means, means[1:]))


def _choose_partition(values: list[float], max_bins: int, min_bin_gap: float = 0.0) -> tuple[list[tuple[int, int]], str]:
    """Best partition (by BIC) of sorted ``values`` into contiguous clusters, and a description.

    Only partitions whose adjacent centroids are at least ``min_bin_gap`` apart compete:
    bins closer than the benchmarks' resolution are not different GPUs to a scheduler.
    """
    n = len(values)
    distinct = 1 + sum(1 for i in range(1, n) if values[i] != values[i - 1])
    k_max = min(max_bins, distinct)
    if k_max == 1:
        why = "one GPU" if n == 1 else ("all values equal" if distinct == 1 else f"max_bins={max_bins}")
        return [(0, n)], f"K=1 ({why}; no choice to make)"
    x = np.asarray(values, dtype=float)
    floor_var = (VARIANCE_FLOOR_REL * _median_sorted(values)) ** 2
    best: tuple[float, list[tuple[int, int]]] | None = None
    for k in range(1, k_max + 1):
        if k == 1:
            segments = [(0, n)]
        else:
            segments = _segments_from_labels(kmeans1d.cluster(values, k).clusters)
            if segments is None or len(segments) != k:
                continue
            if not _centroids_apart(x, segments, min_bin_gap):
                continue
        bic = _mixture_bic(x, segments, floor_var)
        if best is None or bic < best[0]:  # strict: ties keep the smaller K
            best = (bic, segments)
    assert best is not None
    chosen = best[1]
    return chosen, (
        f"BIC over K=1..{k_max} (optimal 1-D k-means via kmeans1d; Gaussian-mixture likelihood "
        f"as in Ckmeans.1d.dp; adjacent bins at least {min_bin_gap:g} PerfVar apart); chose K={len(chosen)}"
    )


# --------------------------------------------------------------------------- API


def robust_median(scores: list[float], run_ratio: float) -> tuple[float, list[float]]:
    """(median of the GPU's sorted runs after dropping broken ones, the runs kept).

    A run more than ``run_ratio`` times off the GPU's own median (a timer in the wrong
    unit, a benchmark that crashed at once) says nothing about the GPU's speed; the
    median is recomputed without it. 0 turns this off.
    """
    med = _median_sorted(scores)
    if run_ratio <= 0 or len(scores) < 3:
        return med, scores
    kept = [s for s in scores if med / run_ratio <= s <= med * run_ratio]
    if len(kept) == len(scores) or not kept:
        return med, scores
    return _median_sorted(kept), kept


def _chi2_quantile_99(df: int) -> float:
    """The 99 % quantile of chi-square with df degrees of freedom (Wilson-Hilferty; within 1 % for df >= 1)."""
    z = 2.3263478740408408  # the standard normal's 99 % quantile
    a = 2.0 / (9.0 * df)
    return df * (1.0 - a + z * math.sqrt(a)) ** 3


def _homogeneous(x: np.ndarray, seg: tuple[int, int], noise_var: float) -> bool:
    """Whether a bin's spread is explained by measurement noise alone (chi-square test at 99 %).

    ``sum((x - mean)^2) / noise_var <= chi2_0.99(n - 1)``: the members could all be the
    same GPU measured with noise ``noise_var``; a bin wider than that holds GPUs a
    scheduler could tell apart.
    """
    s, e = seg
    n = e - s
    if n < 2:
        return True
    members = x[s:e]
    ss = float(np.sum((members - members.mean()) ** 2))
    if noise_var <= 0.0:
        return ss == 0.0
    return ss / noise_var <= _chi2_quantile_99(n - 1)


def _resolve_partition(values: list[float], segments: list[tuple[int, int]], max_bins: int, min_bin_gap: float,
                       noise_var: float) -> tuple[list[tuple[int, int]], str]:
    """Split further than BIC until every bin is as narrow as the measurement noise allows.

    From the K that BIC chose up to ``max_bins``, the first K (optimal k-means, adjacent
    centroids at least ``min_bin_gap`` apart) whose every bin passes :func:`_homogeneous`;
    when none does, the largest such K. BIC asks "is there more than one hump?", which a
    continuous spread never has; this asks "can one bin's GPUs be told apart?".
    """
    n = len(values)
    distinct = 1 + sum(1 for i in range(1, n) if values[i] != values[i - 1])
    x = np.asarray(values, dtype=float)
    k_bic = len(segments)
    if all(_homogeneous(x, s, noise_var) for s in segments):
        return segments, f"K={k_bic}: every bin is within measurement noise"
    best = segments
    for k in range(k_bic + 1, min(max_bins, distinct) + 1):
        cand = _segments_from_labels(kmeans1d.cluster(values, k).clusters)
        if cand is None or len(cand) != k or not _centroids_apart(x, cand, min_bin_gap):
            continue
        best = cand
        if all(_homogeneous(x, s, noise_var) for s in cand):
            return cand, f"K={k}: the smallest K >= {k_bic} whose every bin is within measurement noise"
    why = f"max_bins={max_bins}" if len(best) == max_bins else f"min_bin_gap={min_bin_gap:g}"
    return best, f"K={len(best)}: bins still wider than measurement noise, limited by {why}"


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

    Returns:
        A :class:`GroupResult`; see the module docstring for the method.
    """
    uuids = sorted(runs)
    valid = {u: sorted(_valid_scores(runs[u])) for u in uuids}
    medians: dict[str, float | None] = {}
    kept_runs: dict[str, list[float]] = {}
    for u, v in valid.items():
        if v:
            medians[u], kept_runs[u] = robust_median(v, params.run_ratio)
        else:
            medians[u], kept_runs[u] = None, []
    dropped = {u: len(valid[u]) - len(kept_runs[u]) for u in uuids}
    profiled = [u for u in uuids if len(valid[u]) - dropped[u] >= params.min_runs]

    def unprofiled(u: str) -> GpuResult:
        return GpuResult(u, len(valid[u]) - dropped[u], medians[u], None, None, None, False, False,
                         dropped=dropped[u])

    if not profiled:
        return GroupResult(None, 0, "no profiled GPU (none has min_runs valid runs)", (),
                           tuple(unprofiled(u) for u in uuids), method=params.method)

    def normalise(fleet: float, score: float) -> float:
        return score / fleet if lower_is_better else fleet / score

    # Pass 1: PerfVar against all profiled GPUs, to find the outliers (both sides).
    fleet = _median_sorted(sorted(medians[u] for u in profiled))  # type: ignore[type-var]
    pv1 = {u: normalise(fleet, medians[u]) for u in profiled}  # type: ignore[arg-type]
    pv_sorted = sorted(pv1.values())
    pv_med = _median_sorted(pv_sorted)
    mad = _median_sorted(sorted(abs(v - pv_med) for v in pv_sorted))
    threshold = max(params.outlier_min_excess, params.outlier_z * MAD_TO_SIGMA * mad)
    slow = {u for u in profiled if pv1[u] - pv_med > threshold}
    fast = {u for u in profiled if pv_med - pv1[u] > threshold}
    regular_set = [u for u in profiled if u not in slow and u not in fast]
    if not regular_set:  # only with outlier_z = outlier_min_excess = 0 and no GPU exactly at the median
        slow, fast, regular_set = set(), set(), list(profiled)

    # Pass 2: PerfVar against the regular GPUs only, so an outlier (or a broken measurement)
    # never rescales the healthy GPUs.
    fleet = _median_sorted(sorted(medians[u] for u in regular_set))  # type: ignore[type-var]
    perfvar = {u: normalise(fleet, medians[u]) for u in profiled}  # type: ignore[arg-type]
    noise: dict[str, float | None] = {}
    for u in profiled:
        kept = [normalise(fleet, s) for s in kept_runs[u]]
        med = perfvar[u]
        if len(kept) < 2:
            noise[u] = None
        else:
            rel = [p / med for p in kept]  # relative, so that 1e300-sized values do not overflow
            mean = _mean(rel)
            var = math.fsum((p - mean) ** 2 for p in rel) / (len(rel) - 1)
            noise[u] = med * MEDIAN_SE * math.sqrt(var / len(rel))
    order = sorted(profiled, key=lambda u: (perfvar[u], u))
    regular = [u for u in order if u not in slow and u not in fast]
    # pooled noise: the MEAN squared standard error (the median of these chi-square-like values
    # is well below their mean, which would split fleets of identical GPUs), each clipped at
    # NOISE_CLIP x their median so that one erratic GPU does not blur every bin
    known = sorted(noise[u] ** 2 for u in regular if noise[u] is not None)  # type: ignore[operator]
    floor_var = (VARIANCE_FLOOR_REL * _median_sorted([perfvar[u] for u in regular])) ** 2
    noise_var = None
    if known:
        cap = NOISE_CLIP * _median_sorted(known)
        noise_var = max(_mean([min(v, cap) for v in known]), floor_var)

    # Cluster the regular GPUs (sorted by (PerfVar, uuid)).
    reg_values = [perfvar[u] for u in regular]
    if params.method == "pal-k2":
        distinct = len(set(reg_values))
        k = min(2, distinct, params.max_bins)
        segments = [(0, len(regular))] if k == 1 else _segments_from_labels(kmeans1d.cluster(reg_values, 2).clusters)
        assert segments is not None
        criterion = f"K={len(segments)} fixed, as the PAL artifact (method pal-k2)"
    else:
        segments, criterion = _choose_partition(reg_values, params.max_bins, params.min_bin_gap)
        if params.method == "shrink" and noise_var is not None:
            segments, why = _resolve_partition(reg_values, segments, params.max_bins, params.min_bin_gap, noise_var)
            criterion = f"{criterion}; {why} (method shrink)"
    k_regular = len(segments)
    members: list[tuple[list[str], str]] = [([u], "fast") for u in order if u in fast]
    members.extend((regular[s:e], "") for s, e in segments)
    members.extend(([u], "slow") for u in order if u in slow)

    centroids = [_mean([perfvar[u] for u in ms]) for ms, _ in members]
    bin_of = {u: i for i, (ms, _) in enumerate(members) for u in ms}
    # The anchor: the middle half of the regular GPUs, each at its bin's centroid (_middle_half_mean).
    anchor = _middle_half_mean([centroids[bin_of[u]] for u in regular])
    slowdowns = [1.0 if kind == "fast" else c / anchor for c, (_, kind) in zip(centroids, members)]

    # Hysteresis: keep a GPU in the regular bin closest to its previous slowdown if still near it.
    reg_idx = [i for i, (_, kind) in enumerate(members) if not kind]
    if params.hysteresis > 0 and previous:
        h = params.hysteresis
        ranges = [(perfvar[ms[0]], perfvar[ms[-1]]) for ms, _ in members]  # members sorted by PerfVar
        for u in regular:
            prev = previous.get(u)
            try:
                prev_f = float(prev) if prev is not None else math.nan
            except (TypeError, ValueError):
                prev_f = math.nan
            if not math.isfinite(prev_f):
                continue
            new = bin_of[u]
            # closest slowdown; on a tie prefer the GPU's new bin, then the faster bin
            target = min(reg_idx, key=lambda i: (abs(slowdowns[i] - prev_f), i != new, i))
            lo, hi = ranges[target]
            if lo - h <= perfvar[u] <= hi + h:
                bin_of[u] = target

    # Per-GPU factors: a bin's factor, or (method shrink) the GPU's PerfVar shrunk toward its bin.
    factor = {u: slowdowns[bin_of[u]] for u in order}
    if params.method == "shrink":
        for i in reg_idx:
            ms = members[i][0]
            if len(ms) < 2:
                continue
            xs = [perfvar[u] for u in ms]
            within = math.fsum((x - centroids[i]) ** 2 for x in xs) / (len(xs) - 1)
            tau2 = max(0.0, within - (noise_var or 0.0))
            for u in order:
                if bin_of[u] != i:
                    continue
                s2 = noise[u] ** 2 if noise[u] is not None else (noise_var or 0.0)  # type: ignore[operator]
                weight = 1.0 if s2 == 0.0 else tau2 / (tau2 + s2)
                factor[u] = (centroids[i] + weight * (perfvar[u] - centroids[i])) / anchor
    for u in slow:
        factor[u] = perfvar[u] / anchor

    # Build bins from final membership; drop bins hysteresis emptied and re-index.
    final: list[list[str]] = [[] for _ in members]
    for u in order:
        final[bin_of[u]].append(u)
    bins: list[Bin] = []
    new_index: dict[int, int] = {}
    for i, ((_, kind), ms) in enumerate(zip(members, final)):
        if not ms:
            continue
        new_index[i] = len(bins)
        vals = [perfvar[u] for u in ms]
        bins.append(Bin(len(bins), centroids[i], slowdowns[i], len(ms), bool(kind), min(vals), max(vals),
                        fast=kind == "fast"))

    gpus_out: list[GpuResult] = []
    for u in uuids:
        if u in perfvar:
            gpus_out.append(
                GpuResult(u, len(valid[u]) - dropped[u], medians[u], perfvar[u], new_index[bin_of[u]], factor[u],
                          u in slow or u in fast, True, fast=u in fast, noise=noise[u], dropped=dropped[u])
            )
        else:
            gpus_out.append(unprofiled(u))
    return GroupResult(fleet, k_regular, criterion, tuple(bins), tuple(gpus_out), method=params.method,
                       noise=None if noise_var is None else math.sqrt(noise_var))


def _middle_half_mean(values: Sequence[float]) -> float:
    """The mean of the middle half of `values` (sorted ascending): the interquartile mean,
    with fractional weights at the quartiles.

    Why not the median GPU's bin: that jumps by a whole bin gap when one GPU more or less
    moves the median across a bin boundary (one GPU of 336 moved every Longhorn resnet50
    factor by 3 %). Here each value owns the rank interval ``[(i-1)/n, i/n]`` and weighs
    its overlap with ``[1/4, 3/4]``, so one value more or less shifts the window by half a
    rank and moves the anchor by at most about ``(spread of the middle half) / (n / 2)``;
    when the middle half lies in one bin the anchor is that bin's centroid exactly.
    """
    n = len(values)
    lo = values[n // 4]  # the value every weight is taken relative to: exact when all are equal
    weights = [max(0.0, min((i + 1) / n, 0.75) - max(i / n, 0.25)) * 2.0 for i in range(n)]
    return lo + math.fsum(w * (v - lo) for w, v in zip(weights, values) if w > 0.0)


def percentile_summary(values: Sequence[float]) -> dict[str, float]:
    """min, p5, median, p95, max of the finite values (numpy linear interpolation), for reports.

    Non-finite values are ignored so a stray NaN does not turn a whole report
    line into NaN; raises ValueError when no finite value is left, because a
    summary of nothing has no honest numbers.
    """
    arr = np.asarray([float(v) for v in values], dtype=float)
    arr = arr[np.isfinite(arr)]
    if arr.size == 0:
        raise ValueError("percentile_summary: no finite values")
    q = np.percentile(arr, [0.0, 5.0, 50.0, 95.0, 100.0], method="linear")
    return {
        "min": float(q[0]),
        "p5": float(q[1]),
        "median": float(q[2]),
        "p95": float(q[3]),
        "max": float(q[4]),
    }
