"""Which class (A most clock-sensitive .. D least) a job belongs to, from how it used the GPU.

Why this rule. A GPU's variability is a variability of its SM clock (the power cap picks
the clock: on the Longhorn V100s of the PAL artifact, SGEMM time follows the SM clock at
Spearman -0.98, 1245-1440 MHz at about 297 W under a 300 W cap), so a job is exactly as sensitive to a slow GPU as the
share of its wall time that the SM clock governs. That share is what we estimate from the
agent's job profiles (all figures are means over the job, in percent):

* ``sm``  - SM activity (DCGM's SM_ACTIVE / NVML GPM): how much of the time the SMs had
  work. Without it (older GPUs through plain NVML) the GPU utilisation (a kernel was
  running) stands in for it; the evidence says which was used.
* ``mem`` - memory-bandwidth utilisation (DRAM_ACTIVE, or NVML's memory utilisation):
  how much of the time DRAM was busy moving data.

While the SMs are busy, the part that is compute and not waiting for memory runs at the
SM clock; the memory part runs at the memory clock, which the power cap does not touch.
So the estimate is::

    compute_score = sm * sm / (sm + mem)        (0 when both are 0)

A compute-bound job (ResNet-50 training: sm ~80 %, mem ~30 %) scores ~0.58, a transformer
(BERT: ~70 %, ~45 %) ~0.43, a graph/memory-bound job (PageRank: ~50 %, ~80 %) ~0.19, and a
job that leaves the GPU idle waiting for I/O or the CPU scores near 0 however it uses the
GPU when it does. The classes are thresholds on the score, highest first (configurable
in ``[jobs] thresholds``; defaults A >= 0.50, B >= 0.35, C >= 0.20, else D). These are
the same four classes as PAL's profiles (A ResNet-50, B/C BERT, D PageRank).

Several jobs of one fingerprint are combined sample-weighted, newest first up to
``history`` jobs (a job that changes what it does is re-learned); with fewer than
``min_samples`` samples in all, no class is learned (the job stays unknown and gets the
default, A: the worst case). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pal_slurm.errors import ConfigError

__all__ = ["DEFAULT_THRESHOLDS", "Evidence", "ProfileMetrics", "SensitivityRule", "Verdict", "classify",
           "combine", "compute_score"]

DEFAULT_THRESHOLDS: dict[str, float] = {"A": 0.50, "B": 0.35, "C": 0.20}


@dataclass(frozen=True, slots=True)
class ProfileMetrics:
    """One job profile's aggregates (percent for utilisations; None when the GPU did not say)."""

    samples: int
    gpu_util_mean: float | None
    sm_active_mean: float | None
    mem_bw_util_mean: float | None
    power_w_mean: float | None = None


@dataclass(frozen=True, slots=True)
class Evidence:
    """What a class was decided from: shown by `pal jobs classes` and stored in job_sensitivity."""

    jobs: int
    samples: int
    gpu_util_mean: float | None
    sm_active_mean: float | None
    mem_bw_util_mean: float | None
    power_w_mean: float | None
    compute_score: float | None
    sm_source: str  # "sm_active" | "gpu_util" (proxy) | "none"


@dataclass(frozen=True, slots=True)
class Verdict:
    job_class: str | None  # None: not enough evidence
    evidence: Evidence
    reason: str


@dataclass(frozen=True, slots=True)
class SensitivityRule:
    """Thresholds on the compute score, highest class first; `lowest` takes everything below."""

    thresholds: tuple[tuple[str, float], ...]
    lowest: str
    min_samples: int = 300
    history: int = 20

    @classmethod
    def build(cls, classes: Sequence[str], thresholds: Mapping[str, float], *, min_samples: int = 300,
              history: int = 20) -> SensitivityRule:
        """Validate thresholds against the configured classes (sorted: A is the most sensitive).

        Every class but the last needs a threshold, strictly decreasing in class order,
        each within 0..1; the last class takes the rest. Errors name the offending key.
        """
        ordered = sorted(classes)
        if not ordered:
            raise ConfigError("jobs.thresholds: no job classes configured")
        unknown = sorted(set(thresholds) - set(ordered))
        if unknown:
            raise ConfigError(f"jobs.thresholds: {', '.join(unknown)} is not a configured job class "
                              f"(classes: {', '.join(ordered)})")
        if ordered[-1] in thresholds:
            raise ConfigError(f"jobs.thresholds: the least sensitive class {ordered[-1]} takes every job below "
                              f"the others and has no threshold")
        out: list[tuple[str, float]] = []
        for name in ordered[:-1]:
            if name not in thresholds:
                raise ConfigError(f"jobs.thresholds: class {name} needs a threshold (0..1)")
            value = float(thresholds[name])
            if not 0.0 <= value <= 1.0:
                raise ConfigError(f"jobs.thresholds.{name}: {value} is not within 0..1")
            if out and value >= out[-1][1]:
                raise ConfigError(f"jobs.thresholds.{name}: {value} must be below {out[-1][0]}'s {out[-1][1]}")
            out.append((name, value))
        if min_samples < 1:
            raise ConfigError(f"jobs.min_samples: must be >= 1, got {min_samples}")
        if history < 1:
            raise ConfigError(f"jobs.history: must be >= 1, got {history}")
        return cls(tuple(out), ordered[-1], min_samples, history)

    def class_for(self, score: float) -> str:
        for name, threshold in self.thresholds:
            if score >= threshold:
                return name
        return self.lowest


def compute_score(sm_pct: float, mem_pct: float) -> float:
    """sm * sm / (sm + mem) on fractions: the share of wall time the SM clock governs (see module doc)."""
    sm = min(max(sm_pct / 100.0, 0.0), 1.0)
    mem = min(max(mem_pct / 100.0, 0.0), 1.0)
    if sm + mem <= 0.0:
        return 0.0
    return sm * sm / (sm + mem)


def _weighted(profiles: Sequence[ProfileMetrics], attr: str) -> float | None:
    total = weight = 0.0
    for p in profiles:
        value = getattr(p, attr)
        if value is not None and p.samples > 0:
            total += value * p.samples
            weight += p.samples
    return total / weight if weight else None


def combine(profiles: Sequence[ProfileMetrics]) -> Evidence:
    """Sample-weighted means over `profiles` and the score they give."""
    samples = sum(max(p.samples, 0) for p in profiles)
    util = _weighted(profiles, "gpu_util_mean")
    sm_active = _weighted(profiles, "sm_active_mean")
    mem = _weighted(profiles, "mem_bw_util_mean")
    power = _weighted(profiles, "power_w_mean")
    sm, source = (sm_active, "sm_active") if sm_active is not None else (util, "gpu_util")
    if sm is None:
        source = "none"
    score = None if sm is None else compute_score(sm, mem or 0.0)
    return Evidence(jobs=len(profiles), samples=samples, gpu_util_mean=util, sm_active_mean=sm_active,
                    mem_bw_util_mean=mem, power_w_mean=power, compute_score=score, sm_source=source)


def classify(profiles: Sequence[ProfileMetrics], rule: SensitivityRule) -> Verdict:
    """The class of one fingerprint from its job profiles, newest first (only `rule.history` are used)."""
    used = list(profiles[: rule.history])
    evidence = combine(used)
    if evidence.samples < rule.min_samples:
        return Verdict(None, evidence, f"{evidence.samples} samples < min_samples {rule.min_samples}")
    if evidence.compute_score is None:
        return Verdict(None, evidence, "no utilisation figures in the profiles")
    job_class = rule.class_for(evidence.compute_score)
    return Verdict(job_class, evidence, f"compute score {evidence.compute_score:.2f} ({evidence.sm_source})")
