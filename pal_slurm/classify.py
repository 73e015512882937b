"""Turn per-GPU benchmark runs into performance bins and slowdown factors.

This module is pure: no database, no file I/O, no logging, no global state. It
handles ONE group (one GPU model x one benchmark); the caller groups its
profile records by model and benchmark and calls :func:`classify_group` once
per group, so that every model is normalised against its own fleet (an A100
is never "slow" merely because it is compared with H100s).

Pipeline (each step is documented on the function that does it):

1. **Per-GPU score.** The median of the GPU's *valid* runs. A run is invalid
   when its score is NaN, infinite, non-positive or not a number at all;
   invalid runs are dropped, never fatal, because one broken benchmark run
   must not stop a whole classification. A GPU with fewer than
   ``params.min_runs`` valid runs is *unprofiled*: it gets no PerfVar, bin or
   slowdown. We never guess a value for it, because a wrong guess would steer
   jobs onto a GPU we know nothing about (the scheduler treats unprofiled
   GPUs explicitly instead).

2. **PerfVar.** ``fleet = median(per-GPU medians of the profiled GPUs)``;
   ``PerfVar(g) = median(g) / fleet`` when lower scores are better (times) and
   ``fleet / median(g)`` when higher is better (throughputs). Either way
   PerfVar > 1 means "slower than the median GPU", and a GPU with half the
   throughput of the median has PerfVar 2.0, exactly as one taking twice the
   time.

3. **Outliers (slow side only).** With ``m = median(PerfVar)`` and
   ``MAD = median(|PerfVar - m|)`` over the profiled GPUs, a GPU is an outlier
   iff::

       PerfVar(g) - m > max(params.outlier_min_excess,
                            params.outlier_z * 1.4826 * MAD)

   ``outlier_z * 1.4826 * MAD`` is the modified z-score test
   ``0.6745 * (x - m) / MAD > outlier_z`` (Iglewicz & Hoaglin) solved for x;
   median/MAD are used instead of mean/std (which the PAL artifact uses)
   because a few very slow GPUs inflate the std and hide themselves. The
   ``outlier_min_excess`` term guards the MAD = 0 case (a fleet of identical
   GPUs would otherwise flag a GPU 0.1 % slower). Only the slow side is
   tested: a GPU that is much *faster* than the fleet costs nobody anything,
   a much slower one ("outliers run 1.5x slower") is what must be fenced off.
   Each outlier gets a bin of its own, so it never drags a regular bin's
   centroid.

4. **Number of bins.** The regular (non-outlier) PerfVars are clustered with
   *optimal* 1-D k-means (``kmeans1d``, an exact dynamic program, so there is
   no random start and no run-to-run variation). K is chosen from the data by
   the Bayesian information criterion over ``K = 1 .. min(max_bins, number of
   distinct values)``, as Ckmeans.1d.dp (R package, default ``estimate.k =
   "BIC"``) does: each K's hard partition defines a Gaussian mixture with
   weights ``n_k / n``, means = the cluster means and variances = the unbiased
   within-cluster variances; ``L`` is the log-likelihood of the data under
   that mixture (density summed over the components), ``p = 3K - 1`` free
   parameters and ``BIC = -2 L + p ln n``. The smallest BIC wins; ties go to
   the smaller K. Only partitions whose adjacent centroids differ by at least
   ``min_bin_gap`` (default 0.01, i.e. 1 % speed) compete: BIC on its own splits
   tiers that are tighter than benchmark noise (two GPU groups at 1.000 and
   1.001), which no scheduler can use. Variances that would be zero are replaced as in
   Ckmeans.1d.dp: a one-member cluster uses ``d^2`` and a zero-variance
   multi-member cluster ``d^2 / 36``, with ``d`` the gap to the nearest value
   outside the cluster; finally every variance is floored at
   ``(1e-4 * median(PerfVar))^2`` (a 0.01 % speed difference, far below
   benchmark noise) so that the likelihood is always finite. The PAL
   artifact always used K = 2 (its silhouette loop returns on the first
   iteration); fixing K is wrong both for a uniform fleet (it invents a slow
   half) and for a fleet with three or more real tiers.

5. **Bins and slowdown factors.** Bins are ordered by centroid (mean PerfVar
   of their members) ascending: index 0 is the fastest; outlier bins are the
   slowest and come last. ``slowdown(bin) = centroid / median(centroids of
   the REGULAR bins)``. Outlier bins are left out of that median on purpose:
   otherwise two or three broken GPUs would add bins and shift the reference,
   changing every healthy GPU's slowdown factor although nothing about those
   GPUs changed. With a single regular bin its slowdown is exactly 1.0.

6. **Hysteresis** (``params.hysteresis = h > 0`` and ``previous`` given).
   Re-profiling moves PerfVars a little, and a GPU sitting near a bin
   boundary would otherwise flip bins at every classification run, which
   churns the scheduler's placement decisions for no real reason. So a
   profiled, non-outlier GPU with a previous slowdown factor is kept in the
   regular bin whose (new) slowdown is closest to its previous slowdown, as
   long as its new PerfVar lies within that bin's ``[low - h, high + h]``
   (``low``/``high`` = the bin's member range from the clustering, ``h`` in
   PerfVar units); otherwise it takes its new bin. After the moves each bin's
   ``gpus``/``low``/``high`` are recomputed from its final members while
   centroids and slowdown factors stay those of the clustering, so the scale
   is stable. A regular bin left with no member is dropped and the bins are
   re-indexed (``k_regular`` still reports the K that BIC chose).

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
    "classify_group",
    "percentile_summary",
]

#: Robust-scale constant: 1.4826 * MAD estimates sigma for normal data (= 1 / 0.6745).
MAD_TO_SIGMA = 1.4826
#: Relative floor of the per-cluster standard deviation in the BIC likelihood.
VARIANCE_FLOOR_REL = 1e-4


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
    """

    min_runs: int = 3
    max_bins: int = 8
    outlier_z: float = 3.5
    outlier_min_excess: float = 0.10
    hysteresis: float = 0.0
    min_bin_gap: float = 0.01

    def __post_init__(self) -> None:
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
    unprofiled. ``bin`` indexes :attr:`GroupResult.bins`.
    """

    uuid: str
    runs: int
    median_score: float | None
    perfvar: float | None
    bin: int | None
    slowdown: float | None
    outlier: bool
    profiled: bool


@dataclass(frozen=True)
class Bin:
    """One performance bin; index 0 is the fastest, outlier bins come last.

    ``centroid`` is the mean PerfVar of the members found by the clustering;
    ``low``/``high`` are the min/max PerfVar of the final members (after
    hysteresis, which may make the range overlap a neighbour's).
    """

    index: int
    centroid: float
    slowdown: float
    gpus: int
    outlier: bool
    low: float
    high: float


@dataclass(frozen=True)
class GroupResult:
    """Classification of one group (one GPU model x one benchmark).

    ``k_regular`` is the K the criterion chose for the regular GPUs (0 when no
    GPU is profiled); ``criterion`` says in words how it was chosen, for the
    report. ``gpus`` is sorted by uuid and includes the unprofiled GPUs.
    """

    fleet_median_score: float | None
    k_regular: int
    criterion: str
    bins: tuple[Bin, ...]
    gpus: tuple[GpuResult, ...]


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
    medians = {u: (_median_sorted(v) if v else None) for u, v in valid.items()}
    profiled = [u for u in uuids if len(valid[u]) >= params.min_runs]

    if not profiled:
        gpus = tuple(
            GpuResult(u, len(valid[u]), medians[u], None, None, None, False, False) for u in uuids
        )
        return GroupResult(None, 0, "no profiled GPU (none has min_runs valid runs)", (), gpus)

    fleet = _median_sorted(sorted(medians[u] for u in profiled))  # type: ignore[type-var]
    perfvar: dict[str, float] = {}
    for u in profiled:
        m = medians[u]
        assert m is not None
        perfvar[u] = m / fleet if lower_is_better else fleet / m

    # Outliers (slow side only): excess over the median PerfVar beyond max(min_excess, z*1.4826*MAD).
    pv_sorted = sorted(perfvar.values())
    pv_med = _median_sorted(pv_sorted)
    mad = _median_sorted(sorted(abs(v - pv_med) for v in pv_sorted))
    threshold = max(params.outlier_min_excess, params.outlier_z * MAD_TO_SIGMA * mad)
    order = sorted(profiled, key=lambda u: (perfvar[u], u))
    outliers = [u for u in order if perfvar[u] - pv_med > threshold]
    regular = [u for u in order if perfvar[u] - pv_med <= threshold]

    # Cluster the regular GPUs (sorted by (PerfVar, uuid)).
    members: list[tuple[list[str], bool]] = []  # (uuids, outlier) per bin, ascending centroid
    if regular:
        reg_values = [perfvar[u] for u in regular]
        segments, criterion = _choose_partition(reg_values, params.max_bins, params.min_bin_gap)
        members.extend((regular[s:e], False) for s, e in segments)
        k_regular = len(segments)
    else:  # impossible by the rule (the median GPU is never an outlier); kept for robustness
        criterion, k_regular = "no regular GPU (all profiled GPUs are outliers)", 0
    members.extend(([u], True) for u in outliers)

    centroids = [_mean([perfvar[u] for u in ms]) for ms, _ in members]
    reg_centroids = sorted(c for c, (_, out) in zip(centroids, members) if not out)
    reference = _median_sorted(reg_centroids) if reg_centroids else _median_sorted(sorted(centroids))
    slowdowns = [c / reference for c in centroids]

    bin_of = {u: i for i, (ms, _) in enumerate(members) for u in ms}

    # Hysteresis: keep a GPU in the regular bin closest to its previous slowdown if still near it.
    if params.hysteresis > 0 and previous:
        h = params.hysteresis
        ranges = [(perfvar[ms[0]], perfvar[ms[-1]]) for ms, _ in members]  # members sorted by PerfVar
        reg_idx = [i for i, (_, out) in enumerate(members) if not out]
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

    # Build bins from final membership; drop bins hysteresis emptied and re-index.
    final: list[list[str]] = [[] for _ in members]
    for u in order:
        final[bin_of[u]].append(u)
    bins: list[Bin] = []
    new_index: dict[int, int] = {}
    for i, ((_, out), ms) in enumerate(zip(members, final)):
        if not ms:
            continue
        new_index[i] = len(bins)
        vals = [perfvar[u] for u in ms]
        bins.append(Bin(len(bins), centroids[i], slowdowns[i], len(ms), out, min(vals), max(vals)))

    outlier_set = set(outliers)
    gpus_out: list[GpuResult] = []
    for u in uuids:
        if u in perfvar:
            b = new_index[bin_of[u]]
            gpus_out.append(
                GpuResult(u, len(valid[u]), medians[u], perfvar[u], b, bins[b].slowdown, u in outlier_set, True)
            )
        else:
            gpus_out.append(GpuResult(u, len(valid[u]), medians[u], None, None, None, False, False))
    return GroupResult(fleet, k_regular, criterion, tuple(bins), tuple(gpus_out))


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
