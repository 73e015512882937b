"""The order-independent statistics the classification is defined by: medians of sorted values,
exactly rounded means, a GPU's median without its broken runs, the anchor's interquartile mean,
and the percentile summary the reports print.

Apart from the steps (`classify`) and the bins (`partition`), which both use them, so that each
of those reads as its method; every function here gives the same answer in any input order.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = ["exact_mean", "median_sorted", "middle_half_mean", "percentile_summary", "robust_median"]


def median_sorted(xs: Sequence[float]) -> float:
    """Median of an already sorted, non-empty sequence (mean of the middle two for even n)."""
    n = len(xs)
    mid = n // 2
    if n % 2:
        return xs[mid]
    return (xs[mid - 1] + xs[mid]) / 2.0


def exact_mean(xs: Sequence[float]) -> float:
    """Exactly rounded mean: independent of the order of xs."""
    return math.fsum(xs) / len(xs)


def robust_median(scores: list[float], run_ratio: float) -> tuple[float, list[float]]:
    """(median of the GPU's sorted runs after dropping broken ones, the runs kept).

    A run more than ``run_ratio`` times off the GPU's own median (a timer in the wrong
    unit, a benchmark that crashed at once) says nothing about the GPU's speed; the
    median is recomputed without it. 0 turns this off.
    """
    med = median_sorted(scores)
    if run_ratio <= 0 or len(scores) < 3:
        return med, scores
    kept = [s for s in scores if med / run_ratio <= s <= med * run_ratio]
    if len(kept) == len(scores) or not kept:
        return med, scores
    return median_sorted(kept), kept


def middle_half_mean(values: Sequence[float]) -> float:
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
