"""Running aggregates of one job's GPU telemetry: constant memory however long the job runs.

A job profile needs means, a 95th percentile of GPU utilisation and a sample count. Means
are running sums; the percentile comes from a 101-bin histogram of the integer percent
NVML reports, which gives the exact p95 of those integers in 101 counters. So a job that
runs for a week costs the same few hundred bytes as one that runs for a minute, and the
agent's memory stays flat (bench/agent_overhead.py shows it).

Samples are GPU-samples: a 4-GPU job sampled for 60 s at 1 Hz has 240. Pure, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

__all__ = ["JobAggregate", "JobProfileRecord", "Mean"]


class Mean:
    """Sum and count of the samples that had a value (None readings are not zeros)."""

    __slots__ = ("count", "total")

    def __init__(self, total: float = 0.0, count: int = 0) -> None:
        self.total = total
        self.count = count

    def add(self, value: float | None) -> None:
        if value is not None:
            self.total += value
            self.count += 1

    @property
    def value(self) -> float | None:
        return self.total / self.count if self.count else None


@dataclass(frozen=True, slots=True)
class JobProfileRecord:
    """A finished job's profile on one node: one job_profiles row (utilisations in percent)."""

    slurm_job_id: str
    node: str
    user: str | None
    gpu_uuids: tuple[str, ...]
    started_at: datetime
    ended_at: datetime
    samples: int
    gpu_util_mean: float | None
    gpu_util_p95: float | None
    sm_active_mean: float | None
    mem_bw_util_mean: float | None
    power_w_mean: float | None
    sm_clock_mhz_mean: float | None

    @property
    def duration_s(self) -> float:
        return max(0.0, (self.ended_at - self.started_at).total_seconds())

    def to_dict(self) -> dict[str, Any]:
        out = {f: getattr(self, f) for f in self.__slots__}  # type: ignore[attr-defined]
        out["gpu_uuids"] = list(self.gpu_uuids)
        out["started_at"] = self.started_at.timestamp()
        out["ended_at"] = self.ended_at.timestamp()
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JobProfileRecord:
        data = dict(data)
        data["gpu_uuids"] = tuple(data["gpu_uuids"])
        data["started_at"] = datetime.fromtimestamp(data["started_at"], UTC)
        data["ended_at"] = datetime.fromtimestamp(data["ended_at"], UTC)
        return cls(**data)


_MEANS = ("util", "sm_active", "mem_bw", "power", "sm_clock")


class JobAggregate:
    """Everything kept about one running job: identity, GPU UUIDs, sums and a utilisation histogram."""

    __slots__ = ("job_id", "user", "start", "gpu_uuids", "samples", "util_hist", *_MEANS)

    def __init__(self, job_id: str, user: str | None, start: float, gpu_uuids: tuple[str, ...]) -> None:
        self.job_id = job_id
        self.user = user
        self.start = start
        self.gpu_uuids = gpu_uuids
        self.samples = 0
        self.util_hist = [0] * 101
        for name in _MEANS:
            setattr(self, name, Mean())

    def add_gpu(self, uuid: str) -> None:
        """One more GPU of the job (found from its processes after the prolog's list)."""
        if uuid not in self.gpu_uuids:
            self.gpu_uuids = (*self.gpu_uuids, uuid)

    def add(self, util: int | None, sm_active: float | None, mem_bw: int | None, power: float | None,
            sm_clock: float | None) -> None:
        """One GPU-sample of one of the job's GPUs."""
        self.samples += 1
        if util is not None:
            self.util_hist[min(100, max(0, int(util)))] += 1
        self.util.add(util)
        self.sm_active.add(sm_active)
        self.mem_bw.add(mem_bw)
        self.power.add(power)
        self.sm_clock.add(sm_clock)

    def percentile(self, q: float) -> float | None:
        """The q-quantile (0..1) of the utilisation readings, nearest-rank, from the histogram."""
        total = sum(self.util_hist)
        if total == 0:
            return None
        rank = max(1, math.ceil(q * total - 1e-9))  # nearest rank; the epsilon absorbs 0.95 * 20 = 19.000000000000004
        seen = 0
        for value, count in enumerate(self.util_hist):
            seen += count
            if seen >= rank:
                return float(value)
        return 100.0

    def profile(self, node: str, end: float) -> JobProfileRecord:
        def r(value: float | None, digits: int = 2) -> float | None:
            return None if value is None else round(value, digits)

        return JobProfileRecord(
            slurm_job_id=self.job_id, node=node, user=self.user, gpu_uuids=self.gpu_uuids,
            started_at=datetime.fromtimestamp(self.start, UTC), ended_at=datetime.fromtimestamp(max(end, self.start), UTC),
            samples=self.samples, gpu_util_mean=r(self.util.value), gpu_util_p95=self.percentile(0.95),
            sm_active_mean=r(self.sm_active.value), mem_bw_util_mean=r(self.mem_bw.value),
            power_w_mean=r(self.power.value), sm_clock_mhz_mean=r(self.sm_clock.value, 1),
        )

    def to_dict(self) -> dict[str, Any]:
        """For the agent's state file (a restart keeps what running jobs did so far)."""
        out: dict[str, Any] = {"job_id": self.job_id, "user": self.user, "start": self.start,
                               "gpu_uuids": list(self.gpu_uuids), "samples": self.samples,
                               "util_hist": list(self.util_hist)}
        for name in _MEANS:
            mean = getattr(self, name)
            out[name] = [mean.total, mean.count]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JobAggregate:
        agg = cls(str(data["job_id"]), data.get("user"), float(data["start"]), tuple(data["gpu_uuids"]))
        agg.samples = int(data["samples"])
        hist = [int(x) for x in data["util_hist"]]
        if len(hist) != 101:
            raise ValueError("util_hist must have 101 bins")
        agg.util_hist = hist
        for name in _MEANS:
            total, count = data[name]
            setattr(agg, name, Mean(float(total), int(count)))
        return agg
