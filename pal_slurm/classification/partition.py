"""The regular GPUs' bins: sorted PerfVars cut into contiguous clusters (optimal 1-D k-means).

`choose_partition` picks K by BIC over a Gaussian mixture; `resolve_partition` splits further
until every bin is within measurement noise (a chi-square test), for method ``shrink``.
docs/classification.md, step 4, says why each. Pure: numbers in, index ranges out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import kmeans1d
import numpy as np

from pal_slurm.classification.stats import exact_mean, median_sorted

__all__ = ["VARIANCE_FLOOR_REL", "choose_partition", "resolve_partition", "segments_from_labels"]

#: Relative floor of the per-cluster standard deviation in the BIC likelihood.
VARIANCE_FLOOR_REL = 1e-4


def segments_from_labels(labels: Sequence[int]) -> list[tuple[int, int]] | None:
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
        mean = exact_mean(members.tolist())
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


def choose_partition(values: list[float], max_bins: int, min_bin_gap: float = 0.0) -> tuple[list[tuple[int, int]], str]:
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
    floor_var = (VARIANCE_FLOOR_REL * median_sorted(values)) ** 2
    best: tuple[float, list[tuple[int, int]]] | None = None
    for k in range(1, k_max + 1):
        if k == 1:
            segments = [(0, n)]
        else:
            segments = segments_from_labels(kmeans1d.cluster(values, k).clusters)
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


def resolve_partition(values: list[float], segments: list[tuple[int, int]], max_bins: int, min_bin_gap: float,
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
        cand = segments_from_labels(kmeans1d.cluster(values, k).clusters)
        if cand is None or len(cand) != k or not _centroids_apart(x, cand, min_bin_gap):
            continue
        best = cand
        if all(_homogeneous(x, s, noise_var) for s in cand):
            return cand, f"K={k}: the smallest K >= {k_bic} whose every bin is within measurement noise"
    why = f"max_bins={max_bins}" if len(best) == max_bins else f"min_bin_gap={min_bin_gap:g}"
    return best, f"K={len(best)}: bins still wider than measurement noise, limited by {why}"
