"""The hidden traits of a simulated fleet's GPUs, as arrays so the physics runs vectorised: drawn
healthy (silicon per GPU, cooling per node, per slot position and per GPU), then a few made
defective.

* **Defects** (a few % of GPUs): a firmware-derated power limit, a failed cooler (the GPU
  throttles to stay at its maximum operating temperature), or a stuck HW slowdown
  (clock pinned low). Each makes compute-bound work ~1.3-1.5x slower and shows up in
  the telemetry the way it would through NVML.

Everything random comes from the ``numpy.random.Generator`` the caller passes (seeded from
the fleet seed). No I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pal_slurm.gpu.sim_specs import GpuModelSpec

__all__ = ["DEFECTS", "Traits", "draw_traits", "plant_defects"]

DEFECT_LOW_POWER_LIMIT = "low_power_limit"
DEFECT_COOLING_FAILURE = "cooling_failure"
DEFECT_HW_SLOWDOWN = "hw_slowdown"
DEFECTS = (DEFECT_LOW_POWER_LIMIT, DEFECT_COOLING_FAILURE, DEFECT_HW_SLOWDOWN)


@dataclass(frozen=True, slots=True)
class Traits:
    """The hidden traits of a set of GPUs as arrays, so physics runs vectorised."""

    vf: np.ndarray  # dynamic-power multiplier (silicon V/f quality)
    leak: np.ndarray  # leakage multiplier
    r_th: np.ndarray  # thermal resistance, C/W
    inlet: np.ndarray  # mean inlet temperature, C
    phase: np.ndarray  # phase of the daily inlet cycle, rad
    mem_eff: np.ndarray  # memory-phase time multiplier
    limit: np.ndarray  # enforced power limit, W
    stuck: np.ndarray  # clock ceiling from a HW slowdown, MHz (inf when healthy)


def draw_traits(rng: np.random.Generator, spec: GpuModelSpec, nodes: int, per_node: int) -> Traits:
    """Healthy traits: silicon per GPU, cooling per node, per slot position and per GPU."""
    n = nodes * per_node
    node_inlet = rng.normal(spec.inlet_temp_c, 2.0, nodes)  # rack position, CRAC distance
    node_airflow = rng.lognormal(0.0, 0.05, nodes)  # fan wear, cabling, blanking panels
    node_phase = rng.uniform(0.0, 2.0 * math.pi, nodes)
    slot_airflow = rng.lognormal(0.0, 0.06, per_node)  # downstream slots breathe pre-heated air
    # Process corners: fast, leaky dies need less voltage (less dynamic power) and vice versa.
    z = rng.multivariate_normal([0.0, 0.0], [[1.0, -0.5], [-0.5, 1.0]], n, method="cholesky")
    vf = np.exp(0.048 * z[:, 0])
    leak = np.exp(0.10 * z[:, 1])
    heatsink = rng.lognormal(0.0, 0.04, n)  # mounting pressure, thermal paste
    mem_eff = rng.lognormal(0.0, 0.003, n)
    node_of = np.repeat(np.arange(nodes), per_node)
    slot_of = np.tile(np.arange(per_node), nodes)
    r_th = spec.thermal_resistance_c_per_w * node_airflow[node_of] * slot_airflow[slot_of] * heatsink
    return Traits(vf, leak, r_th, node_inlet[node_of], node_phase[node_of], mem_eff,
                   np.full(n, spec.power_cap_w), np.full(n, math.inf))


def plant_defects(rng: np.random.Generator, spec: GpuModelSpec, tr: Traits,
                   bad_fraction: float) -> tuple[Traits, list[str | None]]:
    """Make round(bad_fraction * n) GPUs defective, each with one of DEFECTS.

    A fixed count (not a coin per GPU) so that a demo fleet always shows its outliers.
    The ranges make each defect cost ~1.3-1.5x on compute-bound work.
    """
    n = len(tr.vf)
    count = min(n, int(round(bad_fraction * n)))
    chosen = rng.choice(n, size=count, replace=False)
    kinds = rng.integers(0, len(DEFECTS), count)
    severity = rng.uniform(0.0, 1.0, count)
    limit, r_th, stuck = tr.limit.copy(), tr.r_th.copy(), tr.stuck.copy()
    defects: list[str | None] = [None] * n
    for i, kind, s in zip(chosen.tolist(), kinds.tolist(), severity.tolist()):
        defects[i] = DEFECTS[kind]
        if DEFECTS[kind] == DEFECT_LOW_POWER_LIMIT:  # a failed VRM phase; firmware derates the board
            limit[i] = spec.power_cap_w * (0.49 - 0.09 * s)
        elif DEFECTS[kind] == DEFECT_COOLING_FAILURE:  # dried paste or a loose heatsink
            r_th[i] = spec.thermal_resistance_c_per_w * (2.3 + 0.3 * s)
        else:  # a board sensor asserting HW slowdown: the clock is pinned low
            stuck[i] = float(spec.supported_clock(spec.max_sm_clock_mhz * (0.66 - 0.08 * s)))
    return Traits(tr.vf, tr.leak, r_th, tr.inlet, tr.phase, tr.mem_eff, limit, stuck), defects
