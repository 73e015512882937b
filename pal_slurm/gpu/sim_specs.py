"""The simulated fleet's catalogue: the GPU models (their physical constants, calibrated on real
fleets) and the profiling benchmarks (how much of each the SM clock governs). Data only; the
physics that uses them is `pal_slurm.gpu.sim_physics`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from pal_slurm.errors import InputError

__all__ = ["BENCHMARKS", "H100", "V100", "BenchmarkSpec", "GpuModelSpec", "benchmark_spec"]


@dataclass(frozen=True, slots=True)
class BenchmarkSpec:
    """One profiling benchmark, described by how much of it the SM clock governs.

    ``compute_fraction`` is the share of the run time at full clock spent in SM-bound
    phases (Amdahl): it is why SGEMM (1.0) sees the whole clock spread and PageRank (0.1)
    almost none. The activities scale the dynamic power of each phase: dense GEMMs draw
    the most, so they are what runs into the power cap.
    """

    name: str
    compute_fraction: float
    compute_activity: float
    memory_activity: float
    run_noise: float  # relative sigma of the run-to-run variation of the median time
    repeat_jitter: float  # relative sigma of one iteration's time within a run
    repeats: int  # iterations per run; the score is their median time
    setup_s: float  # process start, data loading, warm-up before the timed iterations


BENCHMARKS: Mapping[str, BenchmarkSpec] = MappingProxyType({
    "resnet50": BenchmarkSpec("resnet50", 0.80, 0.93, 0.35, 0.005, 0.015, 100, 25.0),
    "bert": BenchmarkSpec("bert", 0.50, 0.88, 0.30, 0.006, 0.020, 50, 30.0),
    "pagerank": BenchmarkSpec("pagerank", 0.10, 0.50, 0.12, 0.004, 0.010, 20, 8.0),
    "sgemm": BenchmarkSpec("sgemm", 1.00, 1.00, 0.10, 0.003, 0.002, 20, 4.0),
})


@dataclass(frozen=True, slots=True)
class GpuModelSpec:
    """Physical constants of one GPU model (the median part; each GPU deviates from it).

    The power and thermal constants are calibrated so that the median GPU under SGEMM
    sits at the power cap with the clock and temperature seen in real fleets (V100:
    ~1365 MHz, ~70 C at ~297 W, as on Longhorn). ``benchmark_ms`` is each benchmark's
    time per iteration at ``max_sm_clock_mhz`` on a nominal GPU.
    """

    name: str
    memory_mib: int
    max_sm_clock_mhz: float
    base_sm_clock_mhz: float  # datasheet base clock (informational)
    idle_sm_clock_mhz: float
    sm_clock_step_mhz: float  # spacing of the supported clocks below max
    mem_clock_mhz: float
    power_cap_w: float
    dynamic_power_w: float  # at max clock, activity 1, median silicon
    leakage_w: float  # at leakage_ref_c, median silicon
    leakage_ref_c: float
    leakage_per_c: float  # exponential growth of leakage with temperature, 1/C
    clock_power_exponent: float
    thermal_resistance_c_per_w: float  # die above inlet per watt, median slot and node
    max_operating_temp_c: float  # SW thermal slowdown keeps the die at or below this
    inlet_temp_c: float  # median node inlet air
    serial_prefix: str
    pci_domain: str
    benchmark_ms: tuple[tuple[str, float], ...]

    def base_ms(self, benchmark: str) -> float:
        """Time per iteration of `benchmark` at max clock on a nominal GPU of this model."""
        for name, ms in self.benchmark_ms:
            if name == benchmark:
                return ms
        raise InputError(f"no simulated times for benchmark {benchmark!r} on {self.name}")

    def supported_clock(self, mhz: float | np.ndarray) -> np.ndarray:
        """Nearest supported SM clock (max - k * step, truncated to whole MHz as NVML lists them)."""
        k = np.round((self.max_sm_clock_mhz - np.asarray(mhz, dtype=float)) / self.sm_clock_step_mhz)
        return np.floor(self.max_sm_clock_mhz - np.maximum(k, 0.0) * self.sm_clock_step_mhz)


V100 = GpuModelSpec(
    name="Tesla V100-SXM2-16GB", memory_mib=16160,
    max_sm_clock_mhz=1530.0, base_sm_clock_mhz=1290.0, idle_sm_clock_mhz=135.0, sm_clock_step_mhz=7.5,
    mem_clock_mhz=877.0, power_cap_w=300.0,
    dynamic_power_w=333.0, leakage_w=45.0, leakage_ref_c=60.0, leakage_per_c=0.02, clock_power_exponent=2.7,
    thermal_resistance_c_per_w=0.135, max_operating_temp_c=83.0, inlet_temp_c=28.0,
    serial_prefix="032", pci_domain="00000000",
    benchmark_ms=(("resnet50", 175.4), ("bert", 179.0), ("pagerank", 66.0), ("sgemm", 2100.0)),
)

H100 = GpuModelSpec(
    name="NVIDIA H100 80GB HBM3", memory_mib=81559,
    max_sm_clock_mhz=1980.0, base_sm_clock_mhz=1590.0, idle_sm_clock_mhz=345.0, sm_clock_step_mhz=15.0,
    mem_clock_mhz=2619.0, power_cap_w=700.0,
    dynamic_power_w=805.0, leakage_w=90.0, leakage_ref_c=60.0, leakage_per_c=0.018, clock_power_exponent=2.7,
    thermal_resistance_c_per_w=0.065, max_operating_temp_c=87.0, inlet_temp_c=27.0,
    serial_prefix="165", pci_domain="00000000",
    benchmark_ms=(("resnet50", 58.0), ("bert", 52.0), ("pagerank", 19.5), ("sgemm", 495.0)),
)


def benchmark_spec(name: str) -> BenchmarkSpec:
    """The simulated benchmark of this name; InputError naming the known ones."""
    try:
        return BENCHMARKS[name]
    except KeyError:
        raise InputError(f"unknown simulated benchmark {name!r} (known: {', '.join(BENCHMARKS)})") from None
