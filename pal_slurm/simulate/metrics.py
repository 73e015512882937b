"""Simulation metrics: pure functions from job outcomes to the figures operators compare.

Definitions (docs/simulation.md repeats them):
- JCT (job completion time) = finish - submit; queueing delay = first start - submit.
- makespan = the last traced job's finish time, from t = 0 (the trace start).
- GPU utilization = GPU-seconds allocated to jobs / (cluster GPUs x makespan): the share of
  the cluster's capacity over the run that held a job. It rises when jobs finish faster
  on better GPUs and when fewer GPUs sit idle behind a blocked queue.
- variability tax = the GPU time jobs spent beyond their nominal run time because of the
  GPUs they got, locality apart: per placement, gpus x nominal seconds run there x
  max(0, pace - 1), pace = the largest raw PerfVar of the job's class over its GPUs (1.0 =
  the median GPU). The signed sum (faster-than-median GPUs counting negative) is kept too,
  so the clipping hides nothing; tax share = tax / GPU-seconds allocated to traced jobs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class JobOutcome:
    job_id: str
    gpus: int
    submit_time: float
    start_time: float  # first start
    finish_time: float
    # What the variability tax and its best-free reference are computed from. Defaults keep outcomes
    # built without them (a replay's, a test's) valid: they count as paying no tax.
    gpu_ids: tuple[int, ...] = ()  # the GPUs it ran on (event mode; () where it moved, in round mode)
    job_class: str | None = None
    nominal_s: float = 0.0  # run time on median GPUs without locality penalty
    tax_gpu_s: float = 0.0  # the job's variability tax, clipped at 0 per placement
    variability_gpu_s_signed: float = 0.0  # the same, unclipped: negative on faster-than-median GPUs

    @property
    def jct(self) -> float:
        return self.finish_time - self.submit_time

    @property
    def queue_delay(self) -> float:
        return self.start_time - self.submit_time


def variability_gpu_s(gpus: int, nominal_s: float, pace: float) -> float:
    """GPU-seconds a job of `gpus` x `nominal_s` spends beyond nominal at `pace`, signed.

    Locality apart on purpose: the penalty for spanning nodes is the placement's shape, the
    tax is what the GPUs' own speed cost, so the two can be told apart in a result."""
    return gpus * nominal_s * (pace - 1.0)


@dataclass(frozen=True)
class RunMetrics:
    jobs: int
    avg_jct_s: float
    median_jct_s: float
    p99_jct_s: float
    avg_queue_delay_s: float
    makespan_s: float
    utilization: float
    tax_gpu_s: float = 0.0
    variability_gpu_s_signed: float = 0.0
    tax_share: float = 0.0  # tax / GPU-seconds allocated to traced jobs (0 when none were)

    def as_dict(self) -> dict[str, float | int]:
        return {
            "jobs": self.jobs, "avg_jct_s": self.avg_jct_s, "median_jct_s": self.median_jct_s,
            "p99_jct_s": self.p99_jct_s, "avg_queue_delay_s": self.avg_queue_delay_s,
            "makespan_s": self.makespan_s, "utilization": self.utilization,
            "tax_gpu_s": self.tax_gpu_s, "variability_gpu_s_signed": self.variability_gpu_s_signed,
            "tax_share": self.tax_share,
        }


def run_metrics(outcomes: Sequence[JobOutcome], *, busy_gpu_seconds: float, cluster_gpus: int) -> RunMetrics:
    """Figures of one simulated run over the traced jobs' outcomes."""
    if not outcomes:
        return RunMetrics(0, math.nan, math.nan, math.nan, math.nan, 0.0, 0.0)
    jct = np.fromiter((o.jct for o in outcomes), dtype=float, count=len(outcomes))
    delay = np.fromiter((o.queue_delay for o in outcomes), dtype=float, count=len(outcomes))
    makespan = max(o.finish_time for o in outcomes)
    util = busy_gpu_seconds / (cluster_gpus * makespan) if makespan > 0 and cluster_gpus > 0 else 0.0
    tax = math.fsum(o.tax_gpu_s for o in outcomes)
    return RunMetrics(
        jobs=len(outcomes),
        avg_jct_s=float(jct.mean()),
        median_jct_s=float(np.median(jct)),
        p99_jct_s=float(np.percentile(jct, 99)),
        avg_queue_delay_s=float(delay.mean()),
        makespan_s=float(makespan),
        utilization=float(min(util, 1.0)),
        tax_gpu_s=tax,
        variability_gpu_s_signed=math.fsum(o.variability_gpu_s_signed for o in outcomes),
        tax_share=tax / busy_gpu_seconds if busy_gpu_seconds > 0 else 0.0,
    )


def geomean(values: Sequence[float]) -> float:
    vals = [v for v in values if v > 0 and math.isfinite(v)]
    if not vals:
        return math.nan
    return float(math.exp(sum(math.log(v) for v in vals) / len(vals)))


def geomean_ratios(per_trace: Mapping[str, Mapping[str, float]], baseline: str) -> dict[str, float]:
    """policy -> geomean over traces of (policy's value / baseline's value) on the same trace.

    `per_trace[trace][policy]` is e.g. the average JCT; traces without a baseline value are left out.
    Below 1.0 means better than the baseline for JCT-like figures.
    """
    policies = sorted({p for row in per_trace.values() for p in row})
    out: dict[str, float] = {}
    for policy in policies:
        ratios = [row[policy] / row[baseline] for row in per_trace.values()
                  if policy in row and baseline in row and row[baseline] > 0]
        out[policy] = geomean(ratios)
    return out
