"""The physics of a simulated GPU, vectorised over the GPUs of a fleet: from its hidden traits
(`pal_slurm.gpu.sim_traits`) and its model's constants (`pal_slurm.gpu.sim_specs`) to the
operating point of a benchmark (run time, clock, power, temperature, NVML clocks-event reasons).

The model of one GPU (all quantities per GPU unless said otherwise):

* **Power** at SM clock ``f`` and die temperature ``T`` for work of SM activity ``a``::

      P = leakage_w * leak * exp(leakage_per_c * (T - leakage_ref_c))      (static)
        + a * vf * dynamic_power_w * (f / f_max) ** clock_power_exponent   (dynamic)

  ``vf`` (silicon V/f quality: the power needed for a given clock) and ``leak``
  (leakage) are drawn per GPU, negatively correlated like real process corners (fast,
  leaky silicon needs less voltage). The exponent ~2.7 is P ~ f V^2 with V rising with f.
* **Temperature** ``T = inlet + R * P_avg``: the node's inlet air (rack position, plus
  the machine room's daily cycle) and a thermal resistance ``R`` = model value x node
  airflow x slot position in the chassis x the GPU's own heatsink/paste. Hotter silicon
  leaks more, which costs clock under a power cap.
* **Clock**: the boost algorithm picks the highest clock whose power fits the enforced
  power limit (held ~1 % below it, as the firmware does) and that keeps the die at or
  below its maximum operating temperature; never above ``f_max``.
* **Benchmarks** alternate a compute phase (fraction ``f`` of the time at ``f_max``, runs
  at the power-capped clock) and a memory phase (runs at full clock, time independent
  of the SM clock): ``time = base * (f * f_max / f_compute + (1 - f) * mem_eff)``.

Pure: arrays in, arrays out; no randomness of its own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pal_slurm.gpu.sim_specs import BenchmarkSpec, GpuModelSpec
from pal_slurm.gpu.sim_traits import Traits

__all__ = [
    "CLOCKS_EVENT_APPLICATIONS_CLOCKS_SETTING",
    "CLOCKS_EVENT_DISPLAY_CLOCK_SETTING",
    "CLOCKS_EVENT_GPU_IDLE",
    "CLOCKS_EVENT_HW_POWER_BRAKE_SLOWDOWN",
    "CLOCKS_EVENT_HW_SLOWDOWN",
    "CLOCKS_EVENT_HW_THERMAL_SLOWDOWN",
    "CLOCKS_EVENT_SW_POWER_CAP",
    "CLOCKS_EVENT_SW_THERMAL_SLOWDOWN",
    "CLOCKS_EVENT_SYNC_BOOST",
    "Operation",
    "idle_sample",
    "inlet_at",
    "operate",
]

# NVML clocks-event reasons (nvmlClocksEventReason*, formerly nvmlClocksThrottleReason*).
# The values are NVML's, so the bitmasks in simulated records read like real ones.
CLOCKS_EVENT_GPU_IDLE = 0x1
CLOCKS_EVENT_APPLICATIONS_CLOCKS_SETTING = 0x2
CLOCKS_EVENT_SW_POWER_CAP = 0x4
CLOCKS_EVENT_HW_SLOWDOWN = 0x8
CLOCKS_EVENT_SYNC_BOOST = 0x10
CLOCKS_EVENT_SW_THERMAL_SLOWDOWN = 0x20
CLOCKS_EVENT_HW_THERMAL_SLOWDOWN = 0x40
CLOCKS_EVENT_HW_POWER_BRAKE_SLOWDOWN = 0x80
CLOCKS_EVENT_DISPLAY_CLOCK_SETTING = 0x100

_POWER_TARGET = 0.99  # the power controller holds the board ~1 % under its limit
_DIURNAL_AMPLITUDE_C = 1.5  # machine-room inlet swings over a day
_IDLE_ACTIVITY = 0.02  # idle dynamic power (display/memory refresh, PCIe) as an activity
_FIXED_POINT_ITERATIONS = 12  # temperature <-> leakage converges in ~5; margin


@dataclass(frozen=True, slots=True)
class Operation:
    """One benchmark's operating point per GPU: what the run costs and what NVML shows."""

    time_factor: np.ndarray  # run time / (base time at max clock)
    sm_clock: np.ndarray  # median SM clock over the run (a supported clock)
    power: np.ndarray  # median board power, W
    temperature: np.ndarray  # die temperature, C
    reasons: np.ndarray  # OR of the clocks-event reasons over the run


def _phase_point(spec: GpuModelSpec, tr: Traits, inlet: np.ndarray, activity: float,
                 temp: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Clock, power and clocks-event reasons of one phase of work at die temperature `temp`.

    The clock is the highest one whose power fits both the power limit and the power at
    which the die would sit at its maximum operating temperature (SW thermal slowdown);
    a HW slowdown caps it further. Whichever constraint binds names the NVML reason.
    """
    f_max = spec.max_sm_clock_mhz
    leak_w = spec.leakage_w * tr.leak * np.exp(spec.leakage_per_c * (temp - spec.leakage_ref_c))
    power_limit = tr.limit * _POWER_TARGET
    thermal_limit = (spec.max_operating_temp_c - inlet) / tr.r_th
    target = np.minimum(power_limit, thermal_limit)
    dyn_full = activity * tr.vf * spec.dynamic_power_w
    budget = np.maximum(target - leak_w, 1e-6 * dyn_full)
    f_fit = f_max * (budget / dyn_full) ** (1.0 / spec.clock_power_exponent)
    clock = np.maximum(np.minimum(np.minimum(f_fit, f_max), tr.stuck), spec.idle_sm_clock_mhz)
    power = leak_w + dyn_full * (clock / f_max) ** spec.clock_power_exponent
    limited = f_fit < np.minimum(f_max, tr.stuck)
    reasons = np.where(limited & (thermal_limit < power_limit), CLOCKS_EVENT_SW_THERMAL_SLOWDOWN, 0)
    reasons |= np.where(limited & (thermal_limit >= power_limit), CLOCKS_EVENT_SW_POWER_CAP, 0)
    reasons |= np.where(tr.stuck < np.minimum(f_fit, f_max), CLOCKS_EVENT_HW_SLOWDOWN, 0)
    return clock, power, reasons


def operate(spec: GpuModelSpec, tr: Traits, bench: BenchmarkSpec, inlet: np.ndarray) -> Operation:
    """Steady-state operating point of `bench` on every GPU of `tr` at inlet temperature `inlet`.

    Temperature depends on the time-averaged power and leakage on temperature, so the
    two are solved by fixed-point iteration (it contracts: a degree adds ~1 W of leakage
    and a watt ~0.1-0.5 degrees).
    """
    f = bench.compute_fraction
    t_max = spec.max_operating_temp_c
    temp = np.minimum(inlet + tr.r_th * tr.limit * 0.8, t_max)
    for _ in range(_FIXED_POINT_ITERATIONS):
        clock_c, power_c, reasons_c = _phase_point(spec, tr, inlet, bench.compute_activity, temp)
        clock_m, power_m, reasons_m = _phase_point(spec, tr, inlet, bench.memory_activity, temp)
        time_c = f * spec.max_sm_clock_mhz / clock_c
        time_m = (1.0 - f) * tr.mem_eff
        share_c = time_c / (time_c + time_m)
        # The thermal controller holds the die at t_max at most (clamping also keeps a
        # failed cooler's leakage from running away in the iteration).
        temp = np.minimum(inlet + tr.r_th * (share_c * power_c + (1.0 - share_c) * power_m), t_max)
    compute_majority = share_c >= 0.5
    reasons = np.where(share_c > 0.01, reasons_c, 0) | np.where(share_c < 0.99, reasons_m, 0)
    return Operation(
        time_factor=time_c + time_m,
        sm_clock=spec.supported_clock(np.where(compute_majority, clock_c, clock_m)),
        power=np.where(compute_majority, power_c, power_m),
        temperature=temp,
        reasons=reasons.astype(np.int64),
    )


def inlet_at(tr: Traits, t: np.ndarray | float) -> np.ndarray:
    """Inlet air at Unix time `t` (seconds): the node's mean plus the room's daily cycle."""
    return tr.inlet + _DIURNAL_AMPLITUDE_C * np.sin(2.0 * math.pi * np.asarray(t, dtype=float) / 86400.0 + tr.phase)


def idle_sample(spec: GpuModelSpec, vf_power_factor: float, leakage_factor: float,
                thermal_resistance_c_per_w: float, inlet: float) -> dict[str, float | int]:
    """Idle: clocks drop to the idle clock, power is leakage plus a little; NVML says GPU idle."""
    dyn = _IDLE_ACTIVITY * vf_power_factor * spec.dynamic_power_w
    temp = inlet
    for _ in range(_FIXED_POINT_ITERATIONS):
        leak = spec.leakage_w * leakage_factor * math.exp(spec.leakage_per_c * (temp - spec.leakage_ref_c))
        power = leak + dyn
        temp = inlet + thermal_resistance_c_per_w * power
    return {"sm_clock_mhz": spec.idle_sm_clock_mhz, "mem_clock_mhz": spec.mem_clock_mhz,
            "power_w": round(power, 3), "temperature_c": float(round(temp)),
            "utilization": 0, "throttle_reasons": CLOCKS_EVENT_GPU_IDLE}
