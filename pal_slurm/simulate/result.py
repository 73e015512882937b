"""What one simulated run produces, the same for both simulation modes."""

from __future__ import annotations

from dataclasses import dataclass

from pal_slurm.simulate.metrics import JobOutcome, RunMetrics


@dataclass(frozen=True)
class SimResult:
    trace: str
    policy: str
    mode: str
    order: str
    outcomes: tuple[JobOutcome, ...]  # traced jobs only, in trace order
    metrics: RunMetrics
    busy_timeline: tuple[tuple[float, int], ...]  # (time, GPUs allocated) at each change
    cluster_gpus: int
    skipped: int = 0  # invalid trace rows skipped with --skip-invalid
    #: the tax a best-free reassignment of this schedule would pay (pal_slurm.simulate.tax);
    #: None in round mode, where jobs move between rounds and hold no one set of GPUs
    tax_best_free_gpu_s: float | None = None
    #: the tax no schedule keeping the jobs' shapes can avoid (pal_slurm.simulate.tax,
    #: unavoidable_tax); None in round mode, whose jobs have no one shape
    tax_unavoidable_gpu_s: float | None = None

    def as_dict(self) -> dict[str, object]:
        return {"trace": self.trace, "policy": self.policy, "mode": self.mode, "order": self.order,
                **self.metrics.as_dict(), "skipped": self.skipped,
                "tax_best_free_gpu_s": self.tax_best_free_gpu_s, "tax_unavoidable_gpu_s": self.tax_unavoidable_gpu_s}
