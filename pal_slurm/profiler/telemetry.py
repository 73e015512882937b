"""Telemetry taken while a benchmark runs, reduced to what is stored with its result. Pure.

A benchmark's process spends its first seconds starting up (CUDA context, allocation)
with the GPU idle; those samples would drag the medians towards idle clocks and add
NVML's "GPU idle" reason. So only samples with GPU utilisation >= `LOADED_UTILISATION`
count, when there are any (a GPU that does not report utilisation counts every sample).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from pal_slurm.gpu.interface import GpuSample

__all__ = ["LOADED_UTILISATION", "REASON_NAMES", "TelemetrySummary", "reason_names", "summarize"]

LOADED_UTILISATION = 50  # percent


@dataclass(frozen=True, slots=True)
class TelemetrySummary:
    samples: int  # samples taken during the run
    loaded_samples: int  # of which counted (the GPU was busy)
    sm_clock_mhz: float | None = None  # median
    sm_clock_min_mhz: float | None = None
    mem_clock_mhz: float | None = None  # median
    power_w: float | None = None  # median
    temperature_c: float | None = None  # median
    temperature_max_c: float | None = None
    throttle_reasons: int | None = None  # OR over the counted samples
    utilization_gpu: float | None = None  # median, percent
    utilization_memory: float | None = None  # median, percent (memory-bandwidth)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _values(samples: Sequence[GpuSample], attr: str) -> list[float]:
    return [float(v) for s in samples if (v := getattr(s, attr)) is not None]


def _median(samples: Sequence[GpuSample], attr: str) -> float | None:
    values = _values(samples, attr)
    return round(statistics.median(values), 3) if values else None


def summarize(samples: Sequence[GpuSample]) -> TelemetrySummary:
    loaded = [s for s in samples if s.utilization_gpu is not None and s.utilization_gpu >= LOADED_UTILISATION]
    if not loaded and not any(s.utilization_gpu is not None for s in samples):
        loaded = list(samples)
    if not loaded:
        return TelemetrySummary(samples=len(samples), loaded_samples=0)
    reasons = [s.throttle_reasons for s in loaded if s.throttle_reasons is not None]
    ored = 0
    for r in reasons:
        ored |= r
    clocks = _values(loaded, "sm_clock_mhz")
    temps = _values(loaded, "temperature_c")
    return TelemetrySummary(
        samples=len(samples), loaded_samples=len(loaded),
        sm_clock_mhz=_median(loaded, "sm_clock_mhz"), sm_clock_min_mhz=min(clocks) if clocks else None,
        mem_clock_mhz=_median(loaded, "mem_clock_mhz"), power_w=_median(loaded, "power_w"),
        temperature_c=_median(loaded, "temperature_c"), temperature_max_c=max(temps) if temps else None,
        throttle_reasons=ored if reasons else None,
        utilization_gpu=_median(loaded, "utilization_gpu"), utilization_memory=_median(loaded, "utilization_memory"),
    )


# NVML clocks-event reasons (nvmlClocksEventReason*), the bits of `throttle_reasons`.
REASON_NAMES: tuple[tuple[int, str], ...] = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
)


def reason_names(mask: int | None) -> list[str]:
    """The names of the bits set in a clocks-event-reasons mask (unknown bits as hex)."""
    if mask is None:
        return []
    names = [name for bit, name in REASON_NAMES if mask & bit]
    rest = mask & ~sum(bit for bit, _ in REASON_NAMES)
    if rest:
        names.append(hex(rest))
    return names
