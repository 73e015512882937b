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

Determinism: the same input, in any mapping order and any run order, gives an
identical result: GPUs are processed sorted by ``(PerfVar, uuid)``, medians are
taken of sorted values, means use ``math.fsum`` (exactly rounded, so independent
of summation order) and every tie has an explicit rule. Nothing is rounded internally.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import kmeans1d
import numpy as np

__all__ = [
    "Bin",
    "ClassifyParams",
    "GpuOutcome",
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
            (0 = off); docs/classification.md, step 7.
        min_bin_gap: adjacent regular bins must have centroids at least this
            far apart (PerfVar units; 0.01 = 1 %): BIC alone splits tiers that
            are tighter than benchmark noise, which a scheduler cannot use.
        method: how PerfVars become factors. ``shrink`` (default): BIC's K, split
            further until every bin is within measurement noise, and each GPU's
            factor its own PerfVar shrunk toward its bin by its own noise;
            ``bic``: BIC's K, one factor per bin; ``pal-k2``: K = 2 plus
            outliers, one factor per bin (the PAL artifact). docs/classification.md,
            "Methods", compares them.
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
class GpuOutcome:
    """One GPU's classification in one group: what :func:`classify_group` gives it
    (:class:`GpuResult`) and what a stored classification keeps of it
    (`db/classification_store.ResultRow`).

    ``median_score`` is the median of the GPU's valid runs (also reported for
    an unprofiled GPU that has some valid runs, for information; None when it
    has none). ``perfvar``, ``bin`` and ``slowdown`` are None when the GPU is
    unprofiled. ``bin`` indexes the group's bins. ``slowdown`` is the
    GPU's own factor: its bin's for methods ``bic`` and ``pal-k2``, its shrunk
    PerfVar for ``shrink``. ``fast`` marks an outlier that is suspiciously
    *fast* ("fast: check the measurement"; its factor is 1.0, the typical
    GPU's).
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


@dataclass(frozen=True)
class GpuResult(GpuOutcome):
    """Outcome for one GPU of the group, with what only the classification itself knows.

    ``noise`` is the standard error of its PerfVar from the spread of
    its runs (None with fewer than two); ``dropped`` counts runs dropped as
    broken (more than ``run_ratio`` off its own median).
    """

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
    fleet = _median_sorted(sorted(scores.medians[u] for u in profiled))  # type: ignore[type-var]
    pv1 = {u: normalise(fleet, scores.medians[u]) for u in profiled}  # type: ignore[arg-type]
    pv_sorted = sorted(pv1.values())
    pv_med = _median_sorted(pv_sorted)
    mad = _median_sorted(sorted(abs(v - pv_med) for v in pv_sorted))
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
    fleet = _median_sorted(sorted(scores.medians[u] for u in regular_set))  # type: ignore[type-var]
    perfvar = {u: normalise(fleet, scores.medians[u]) for u in profiled}  # type: ignore[arg-type]
    noise: dict[str, float | None] = {}
    for u in profiled:
        kept = [normalise(fleet, s) for s in scores.kept[u]]
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
    return _PerfVar(fleet, perfvar, noise, noise_var, order, regular)


def _cluster(pv: _PerfVar, params: ClassifyParams) -> tuple[list[tuple[int, int]], str]:
    """Step 4: the regular GPUs (sorted by (PerfVar, uuid)) as contiguous bins, and how K was
    chosen: BIC (:func:`_choose_partition`), raised until every bin is within measurement noise
    for ``shrink`` (:func:`_resolve_partition`), or fixed at 2 for ``pal-k2``."""
    reg_values = [pv.perfvar[u] for u in pv.regular]
    if params.method == "pal-k2":
        distinct = len(set(reg_values))
        k = min(2, distinct, params.max_bins)
        segments = ([(0, len(pv.regular))] if k == 1
                    else _segments_from_labels(kmeans1d.cluster(reg_values, 2).clusters))
        assert segments is not None
        return segments, f"K={len(segments)} fixed, as the PAL artifact (method pal-k2)"
    segments, criterion = _choose_partition(reg_values, params.max_bins, params.min_bin_gap)
    if params.method == "shrink" and pv.noise_var is not None:
        segments, why = _resolve_partition(reg_values, segments, params.max_bins, params.min_bin_gap, pv.noise_var)
        criterion = f"{criterion}; {why} (method shrink)"
    return segments, criterion


def _anchored(pv: _PerfVar, slow: set[str], fast: set[str], segments: list[tuple[int, int]],
              criterion: str) -> _Tiers:
    """Step 5, the bins' factors: every outlier a bin of its own around the regular bins, each
    bin's factor its centroid over the anchor (:func:`_middle_half_mean` of the regular GPUs at
    their bins' centroids); a fast outlier's bin reads 1.0."""
    members: list[tuple[list[str], str]] = [([u], "fast") for u in pv.order if u in fast]
    members.extend((pv.regular[s:e], "") for s, e in segments)
    members.extend(([u], "slow") for u in pv.order if u in slow)
    centroids = [_mean([pv.perfvar[u] for u in ms]) for ms, _ in members]
    bin_of = {u: i for i, (ms, _) in enumerate(members) for u in ms}
    anchor = _middle_half_mean([centroids[bin_of[u]] for u in pv.regular])
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
