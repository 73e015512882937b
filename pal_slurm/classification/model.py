"""The classification's vocabulary: the knobs of a run and what it gives each group, bin and GPU.

Apart from the steps (`classify`) because every reader of a classification needs these and none
of the arithmetic: the fleet step, the store (whose rows extend `GpuOutcome` and `Bin`), the
service and the reports.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["Bin", "ClassifyParams", "GpuOutcome", "GpuResult", "GroupResult", "METHODS"]

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
    """One GPU's classification in one group: what :func:`classify.classify_group` gives it
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
