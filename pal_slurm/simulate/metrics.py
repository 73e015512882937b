"""Simulation metrics: pure functions from job outcomes to the figures operators compare.

Definitions (docs/simulation.md repeats them):
- JCT (job completion time) = finish - submit; queueing delay = first start - submit.
- makespan = the last traced job's finish time, from t = 0 (the trace start).
- GPU utilization = GPU-seconds allocated to jobs / (cluster GPUs x makespan): the share of
  the cluster's capacity over the run that held a job. It rises when jobs finish faster
  on better GPUs and when fewer GPUs sit idle behind a blocked queue.
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

    @property
    def jct(self) -> float:
        return self.finish_time - self.submit_time

    @property
    def queue_delay(self) -> float:
        return self.start_time - self.submit_time


@dataclass(frozen=True)
class RunMetrics:
    jobs: int
    avg_jct_s: float
    median_jct_s: float
    p99_jct_s: float
    avg_queue_delay_s: float
    makespan_s: float
    utilization: float

    def as_dict(self) -> dict[str, float | int]:
        return {
            "jobs": self.jobs, "avg_jct_s": self.avg_jct_s, "median_jct_s": self.median_jct_s,
            "p99_jct_s": self.p99_jct_s, "avg_queue_delay_s": self.avg_queue_delay_s,
            "makespan_s": self.makespan_s, "utilization": self.utilization,
        }


def run_metrics(outcomes: Sequence[JobOutcome], *, busy_gpu_seconds: float, cluster_gpus: int) -> RunMetrics:
    """Figures of one simulated run over the traced jobs' outcomes."""
    if not outcomes:
        return RunMetrics(0, math.nan, math.nan, math.nan, math.nan, 0.0, 0.0)
    jct = np.fromiter((o.jct for o in outcomes), dtype=float, count=len(outcomes))
    delay = np.fromiter((o.queue_delay for o in outcomes), dtype=float, count=len(outcomes))
    makespan = max(o.finish_time for o in outcomes)
    util = busy_gpu_seconds / (cluster_gpus * makespan) if makespan > 0 and cluster_gpus > 0 else 0.0
    return RunMetrics(
        jobs=len(outcomes),
        avg_jct_s=float(jct.mean()),
        median_jct_s=float(np.median(jct)),
        p99_jct_s=float(np.percentile(jct, 99)),
        avg_queue_delay_s=float(delay.mean()),
        makespan_s=float(makespan),
        utilization=float(min(util, 1.0)),
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
