"""A seeded, reproducible simulated GPU fleet whose variability comes from physics.

Why simulate physics instead of drawing random PerfVars: the PAL artifact assigns every
GPU a random row of measured data, so a GPU's ResNet-50 speed has nothing to do with its
SGEMM speed, and nothing explains *why* it is slow. Real fleets are different: on Longhorn's V100s
(the PAL artifact's measurements) SGEMM time tracks the SM clock at Spearman -0.98,
because every GPU runs at the highest clock its 300 W cap allows, and that clock depends
on how much power the silicon needs and how hot it runs. Modelling that mechanism gives
us, for free, the properties the rest of pal-slurm relies on: compute-bound benchmarks
vary much more than memory-bound ones, the variability of one GPU is consistent across
benchmarks, telemetry (clock, power, temperature, NVML clocks-event reasons) agrees with
the scores, and broken GPUs are broken for a reason the agent can see.

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
* **Defects** (a few % of GPUs): a firmware-derated power limit, a failed cooler (the GPU
  throttles to stay at its maximum operating temperature), or a stuck HW slowdown
  (clock pinned low). Each makes compute-bound work ~1.3-1.5x slower and shows up in
  the telemetry the way it would through NVML.

Everything random comes from ``numpy.random.Generator`` objects seeded from the fleet
seed (never the global random state), so the same seed gives byte-identical records on
any machine. The module does no I/O.
"""

from __future__ import annotations

import hashlib
import math
import uuid as uuidlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from types import MappingProxyType

import numpy as np

from pal_slurm.errors import InputError
from pal_slurm.ingest.records import GpuInfo, ProfileRecord

__all__ = [
    "BENCHMARKS",
    "CLOCKS_EVENT_APPLICATIONS_CLOCKS_SETTING",
    "CLOCKS_EVENT_DISPLAY_CLOCK_SETTING",
    "CLOCKS_EVENT_GPU_IDLE",
    "CLOCKS_EVENT_HW_POWER_BRAKE_SLOWDOWN",
    "CLOCKS_EVENT_HW_SLOWDOWN",
    "CLOCKS_EVENT_HW_THERMAL_SLOWDOWN",
    "CLOCKS_EVENT_SW_POWER_CAP",
    "CLOCKS_EVENT_SW_THERMAL_SLOWDOWN",
    "CLOCKS_EVENT_SYNC_BOOST",
    "CUDA_VERSION",
    "DEFAULT_BENCHMARKS",
    "DEFAULT_START",
    "DEFAULT_TIER_EDGES",
    "DEFECTS",
    "DRIVER_VERSION",
    "H100",
    "SOURCE",
    "V100",
    "BenchmarkSpec",
    "GpuModelSpec",
    "SimFleet",
    "SimGpu",
    "make_fleet",
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

SOURCE = "pal-sim"
SOURCE_FILE = "<sim>"
DRIVER_VERSION = "550.54.15"
CUDA_VERSION = "12.4"
RUN_KEY_NAMESPACE = "pal-sim/1"
# A fixed default so that `pal demo` output does not depend on when it runs.
DEFAULT_START = datetime(2026, 1, 5, 8, 0, 0, tzinfo=UTC)
DEFAULT_BENCHMARKS = ("resnet50", "bert", "pagerank", "sgemm")
# Tier edges on the true PerfVar: <= 1.04 regular, <= 1.20 slow, above that an outlier.
# A convention for tests and reports only; the classifier finds its own bins.
DEFAULT_TIER_EDGES = (1.04, 1.20)

DEFECT_LOW_POWER_LIMIT = "low_power_limit"
DEFECT_COOLING_FAILURE = "cooling_failure"
DEFECT_HW_SLOWDOWN = "hw_slowdown"
DEFECTS = (DEFECT_LOW_POWER_LIMIT, DEFECT_COOLING_FAILURE, DEFECT_HW_SLOWDOWN)

_POWER_TARGET = 0.99  # the power controller holds the board ~1 % under its limit
_DIURNAL_AMPLITUDE_C = 1.5  # machine-room inlet swings over a day
_RUN_INLET_JITTER_C = 0.5  # neighbours' load, fan control: run-to-run inlet noise
_POWER_READ_NOISE = 0.002  # relative noise of the median power reading
_IQR_PER_SIGMA = 1.349  # IQR of a normal distribution in units of its sigma
_IDLE_ACTIVITY = 0.02  # idle dynamic power (display/memory refresh, PCIe) as an activity
_FIXED_POINT_ITERATIONS = 12  # temperature <-> leakage converges in ~5; margin


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

# PCI bus numbers of real 4- and 8-GPU servers (a typical 4-GPU 2-socket board, DGX).
_PCI_BUSES_4 = (0x18, 0x3B, 0x86, 0xAF)
_PCI_BUSES_8 = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)
_MAX_GPUS_PER_NODE = 32


@dataclass(frozen=True, slots=True)
class _Traits:
    """The hidden traits of a set of GPUs as arrays, so physics runs vectorised."""

    vf: np.ndarray  # dynamic-power multiplier (silicon V/f quality)
    leak: np.ndarray  # leakage multiplier
    r_th: np.ndarray  # thermal resistance, C/W
    inlet: np.ndarray  # mean inlet temperature, C
    phase: np.ndarray  # phase of the daily inlet cycle, rad
    mem_eff: np.ndarray  # memory-phase time multiplier
    limit: np.ndarray  # enforced power limit, W
    stuck: np.ndarray  # clock ceiling from a HW slowdown, MHz (inf when healthy)


@dataclass(frozen=True, slots=True)
class _Operation:
    """One benchmark's operating point per GPU: what the run costs and what NVML shows."""

    time_factor: np.ndarray  # run time / (base time at max clock)
    sm_clock: np.ndarray  # median SM clock over the run (a supported clock)
    power: np.ndarray  # median board power, W
    temperature: np.ndarray  # die temperature, C
    reasons: np.ndarray  # OR of the clocks-event reasons over the run


def _phase_point(spec: GpuModelSpec, tr: _Traits, inlet: np.ndarray, activity: float,
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


def _operate(spec: GpuModelSpec, tr: _Traits, bench: BenchmarkSpec, inlet: np.ndarray) -> _Operation:
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
    return _Operation(
        time_factor=time_c + time_m,
        sm_clock=spec.supported_clock(np.where(compute_majority, clock_c, clock_m)),
        power=np.where(compute_majority, power_c, power_m),
        temperature=temp,
        reasons=reasons.astype(np.int64),
    )


def _inlet_at(tr: _Traits, t: np.ndarray | float) -> np.ndarray:
    """Inlet air at Unix time `t` (seconds): the node's mean plus the room's daily cycle."""
    return tr.inlet + _DIURNAL_AMPLITUDE_C * np.sin(2.0 * math.pi * np.asarray(t, dtype=float) / 86400.0 + tr.phase)


def _benchmark(name: str) -> BenchmarkSpec:
    try:
        return BENCHMARKS[name]
    except KeyError:
        raise InputError(f"unknown simulated benchmark {name!r} (known: {', '.join(BENCHMARKS)})") from None


def _key_prefix(*parts: object) -> str:
    """Fields of a run key, unit-separated; the caller appends the rest and hashes (sha256)."""
    return "".join(f"{p}\x1f" for p in parts)


# Per-run columns of `SimFleet._runs`, in the order `SimFleet._record` takes them.
_COLUMNS = ("score", "duration_s", "repeats", "spread", "sm_clock_mhz", "power_w", "temperature_c", "throttle_reasons")


@dataclass(frozen=True, slots=True)
class SimGpu:
    """One simulated GPU: its identity, its hidden physical traits and its ground truth.

    The traits are what a real GPU hides and pal-slurm has to infer from measurements;
    tests compare the classifier's output with `true_perfvar`/`true_tier`/`is_bad`.
    """

    index: int  # position in the fleet (node-major)
    uuid: str
    node: str
    node_index: int
    slot: int  # = NVML index = device minor number
    pci_bus_id: str
    serial: str
    model: GpuModelSpec = field(repr=False)
    vf_power_factor: float  # power needed for a given clock, relative to the median part
    leakage_factor: float
    thermal_resistance_c_per_w: float
    inlet_temp_c: float  # the node's mean inlet air
    diurnal_phase: float
    memory_efficiency: float  # memory-bound time multiplier (~1)
    power_limit_w: float  # enforced limit (below the model's cap for a derated GPU)
    stuck_sm_clock_mhz: float | None  # clock pinned by a HW slowdown, None when healthy
    defect: str | None  # one of DEFECTS for a planted bad GPU
    true_perfvars: tuple[tuple[str, float], ...] = field(repr=False)

    @property
    def is_bad(self) -> bool:
        """Whether this GPU was planted as defective (the classifier should fence it off)."""
        return self.defect is not None

    @property
    def nvml_index(self) -> int:
        return self.slot

    @property
    def minor_number(self) -> int:
        return self.slot

    @property
    def info(self) -> GpuInfo:
        """The identity a profile record carries, as NVML would report it."""
        return GpuInfo(uuid=self.uuid, node=self.node, model=self.model.name, nvml_index=self.slot,
                       minor_number=self.slot, pci_bus_id=self.pci_bus_id, serial=self.serial,
                       memory_mib=self.model.memory_mib)

    def true_perfvar(self, benchmark: str) -> float:
        """Noise-free run time / the fleet's median GPU's, at the node's mean inlet temperature.

        This is what PerfVar estimates from measurements (> 1 = slower than the median).
        """
        for name, value in self.true_perfvars:
            if name == benchmark:
                return value
        raise InputError(f"unknown simulated benchmark {benchmark!r} (known: {', '.join(BENCHMARKS)})")

    def true_tier(self, benchmark: str, edges: Sequence[float] = DEFAULT_TIER_EDGES) -> int:
        """0 = regular, 1 = slow, 2 = outlier by default: how many of `edges` the true PerfVar exceeds."""
        return int(np.searchsorted(np.asarray(edges, dtype=float), self.true_perfvar(benchmark), side="left"))

    def _traits(self) -> _Traits:
        one = lambda v: np.array([v], dtype=float)  # noqa: E731
        stuck = math.inf if self.stuck_sm_clock_mhz is None else self.stuck_sm_clock_mhz
        return _Traits(one(self.vf_power_factor), one(self.leakage_factor), one(self.thermal_resistance_c_per_w),
                       one(self.inlet_temp_c), one(self.diurnal_phase), one(self.memory_efficiency),
                       one(self.power_limit_w), one(stuck))

    def _idle_sample(self, inlet: float) -> dict[str, float | int]:
        """Idle: clocks drop to the idle clock, power is leakage plus a little; NVML says GPU idle."""
        spec = self.model
        dyn = _IDLE_ACTIVITY * self.vf_power_factor * spec.dynamic_power_w
        temp = inlet
        for _ in range(_FIXED_POINT_ITERATIONS):
            leak = spec.leakage_w * self.leakage_factor * math.exp(spec.leakage_per_c * (temp - spec.leakage_ref_c))
            power = leak + dyn
            temp = inlet + self.thermal_resistance_c_per_w * power
        return {"sm_clock_mhz": spec.idle_sm_clock_mhz, "mem_clock_mhz": spec.mem_clock_mhz,
                "power_w": round(power, 3), "temperature_c": float(round(temp)),
                "utilization": 0, "throttle_reasons": CLOCKS_EVENT_GPU_IDLE}

    def sample(self, load: float, t: float) -> dict[str, float | int]:
        """What NVML would report at load `load` (0 idle .. 1 a full dense-GEMM load) at Unix time `t`.

        Deterministic: the same inputs give the same sample. Meant for the node agent's
        simulated backend, so that its telemetry obeys the same physics as the scores.
        """
        if not 0.0 <= load <= 1.0 or math.isnan(load):
            raise InputError(f"load must be within 0..1, got {load}")
        spec, tr = self.model, self._traits()
        inlet = _inlet_at(tr, t)
        if load == 0.0:
            return self._idle_sample(float(inlet[0]))
        load_bench = BenchmarkSpec("load", 1.0, load, load, 0.0, 0.0, 1, 0.0)
        op = _operate(spec, tr, load_bench, inlet)
        return {"sm_clock_mhz": float(op.sm_clock[0]), "mem_clock_mhz": spec.mem_clock_mhz,
                "power_w": round(float(op.power[0]), 3), "temperature_c": float(round(float(op.temperature[0]))),
                "utilization": int(round(load * 100)), "throttle_reasons": int(op.reasons[0])}


@dataclass(frozen=True)
class SimFleet:
    """A seeded fleet of simulated GPUs of one model, node-major (gpu001 slots 0.., gpu002 ..)."""

    seed: int
    model: GpuModelSpec
    nodes: tuple[str, ...]
    gpus_per_node: int
    gpus: tuple[SimGpu, ...]
    _traits: _Traits = field(repr=False, compare=False)

    @property
    def bad_gpus(self) -> tuple[SimGpu, ...]:
        return tuple(g for g in self.gpus if g.is_bad)

    def gpu(self, uuid: str) -> SimGpu:
        """The GPU with this UUID."""
        for g in self.gpus:
            if g.uuid == uuid:
                return g
        raise InputError(f"no simulated GPU {uuid}")

    def true_perfvars(self, benchmark: str) -> dict[str, float]:
        """UUID -> noise-free PerfVar of `benchmark`: the answer classification should recover."""
        return {g.uuid: g.true_perfvar(benchmark) for g in self.gpus}

    def true_bins(self, benchmark: str, edges: Sequence[float] = DEFAULT_TIER_EDGES) -> dict[str, int]:
        """UUID -> true tier (see `SimGpu.true_tier`)."""
        return {g.uuid: g.true_tier(benchmark, edges) for g in self.gpus}

    def run_benchmark(self, gpu: SimGpu, benchmark: str, started_at: datetime, rng: np.random.Generator,
                      *, line: int = 1) -> ProfileRecord:
        """One run of `benchmark` on `gpu` starting at `started_at`, with noise from `rng`.

        For the node profiler's simulated backend, which runs one benchmark at a time; the
        run key is derived from the fleet seed, GPU, benchmark and start time.
        """
        if started_at.tzinfo is None:
            raise InputError("started_at must be timezone-aware")
        started_at = started_at.astimezone(UTC)
        idx = np.array([gpu.index])
        cols = self._runs(idx, _benchmark(benchmark), np.array([started_at.timestamp()]), rng)
        key = hashlib.sha256(f"{_key_prefix(RUN_KEY_NAMESPACE, 'run', self.seed, gpu.uuid)}{benchmark}\x1f"
                             f"{started_at.isoformat()}".encode()).hexdigest()
        return self._record(gpu.info, benchmark, key, started_at, line, *(cols[c].tolist()[0] for c in _COLUMNS))

    def profile_records(self, benchmarks: Sequence[str] = DEFAULT_BENCHMARKS, runs_per_gpu: int = 5,
                        start: datetime = DEFAULT_START, seed: int | None = None) -> list[ProfileRecord]:
        """A whole profiling campaign: every GPU runs every benchmark `runs_per_gpu` times.

        Each GPU works through (run 1: all benchmarks), (run 2: ...), ... back to back, as
        the node profiler would, so runs of one benchmark are spread over the campaign and
        see the room's temperature drift. Nodes start a few seconds apart. `seed` (default:
        the fleet seed) drives only the run-to-run noise; records come GPU by GPU.
        """
        if runs_per_gpu < 1:
            raise InputError(f"runs_per_gpu must be >= 1, got {runs_per_gpu}")
        if start.tzinfo is None:
            raise InputError("start must be timezone-aware")
        specs = [_benchmark(b) for b in benchmarks]
        campaign = self.seed if seed is None else seed
        rng = np.random.default_rng([self.seed, campaign, 0x5A1])
        n = len(self.gpus)
        idx = np.arange(n)
        node_of = np.array([g.node_index for g in self.gpus])
        start_ts = start.astimezone(UTC).timestamp()
        offset = node_of * 7.0 + rng.uniform(0.0, 1.5, n)  # seconds after `start`
        steps: list[tuple[int, str, np.ndarray, dict[str, np.ndarray]]] = []
        for run in range(runs_per_gpu):
            for spec in specs:
                cols = self._runs(idx, spec, start_ts + offset, rng)
                steps.append((run, spec.name, offset.copy(), cols))
                offset = offset + cols["duration_s"] + rng.uniform(2.0, 6.0, n)
        # Transpose once into per-GPU rows: building 80k records is the slow part.
        lists = [(run, name, np.round(off, 3).tolist(), list(zip(*(cols[c].tolist() for c in _COLUMNS))))
                 for run, name, off, cols in steps]
        out: list[ProfileRecord] = []
        for i, gpu in enumerate(self.gpus):
            info = gpu.info
            prefix = _key_prefix(RUN_KEY_NAMESPACE, self.seed, campaign, gpu.uuid)
            for run, name, off, rows in lists:
                key = hashlib.sha256(f"{prefix}{name}\x1f{run}".encode()).hexdigest()
                out.append(self._record(info, name, key, start + timedelta(seconds=off[i]), len(out) + 1, *rows[i]))
        return out

    def _runs(self, idx: np.ndarray, spec: BenchmarkSpec, t: np.ndarray,
              rng: np.random.Generator) -> dict[str, np.ndarray]:
        """Noisy runs of `spec` on GPUs `idx` starting at Unix times `t` (vectorised)."""
        n = len(idx)
        tr = _Traits(*(getattr(self._traits, f)[idx] for f in _Traits.__slots__))
        inlet = _inlet_at(tr, t) + rng.normal(0.0, _RUN_INLET_JITTER_C, n)
        op = _operate(self.model, tr, spec, inlet)
        score = self.model.base_ms(spec.name) * op.time_factor * np.exp(rng.normal(0.0, spec.run_noise, n))
        spread = _IQR_PER_SIGMA * spec.repeat_jitter * np.abs(1.0 + 0.15 * rng.normal(0.0, 1.0, n))
        power = op.power * (1.0 + rng.normal(0.0, _POWER_READ_NOISE, n))
        return {
            "score": np.round(score, 4),
            "duration_s": np.round(spec.setup_s + spec.repeats * score / 1000.0, 3),
            "repeats": np.full(n, spec.repeats),
            "spread": np.round(spread, 5),
            "sm_clock_mhz": op.sm_clock,
            "power_w": np.round(power, 3),
            "temperature_c": np.round(op.temperature),
            "throttle_reasons": op.reasons,
        }

    def _record(self, info: GpuInfo, benchmark: str, key: str, started_at: datetime, line: int, score: float,
                duration_s: float, repeats: int, spread: float, sm_clock_mhz: float, power_w: float,
                temperature_c: float, throttle_reasons: int) -> ProfileRecord:
        return ProfileRecord(
            run_key=key, gpu=info, benchmark=benchmark, started_at=started_at, score=score, unit="ms",
            lower_is_better=True, source=SOURCE, source_file=SOURCE_FILE, line=line, duration_s=duration_s,
            repeats=repeats, spread=spread, sm_clock_mhz=sm_clock_mhz, mem_clock_mhz=self.model.mem_clock_mhz,
            power_w=power_w, temperature_c=temperature_c, throttle_reasons=throttle_reasons,
            driver_version=DRIVER_VERSION, cuda_version=CUDA_VERSION,
        )


def _pci_bus_ids(spec: GpuModelSpec, gpus_per_node: int) -> list[str]:
    if gpus_per_node <= 4:
        buses = _PCI_BUSES_4[:gpus_per_node]
    elif gpus_per_node <= 8:
        buses = _PCI_BUSES_8[:gpus_per_node]
    else:
        buses = tuple(0x10 + 7 * s for s in range(gpus_per_node))
    return [f"{spec.pci_domain}:{b:02X}:00.0" for b in buses]


def _draw_traits(rng: np.random.Generator, spec: GpuModelSpec, nodes: int, per_node: int) -> _Traits:
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
    return _Traits(vf, leak, r_th, node_inlet[node_of], node_phase[node_of], mem_eff,
                   np.full(n, spec.power_cap_w), np.full(n, math.inf))


def _plant_defects(rng: np.random.Generator, spec: GpuModelSpec, tr: _Traits,
                   bad_fraction: float) -> tuple[_Traits, list[str | None]]:
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
    return _Traits(tr.vf, tr.leak, r_th, tr.inlet, tr.phase, tr.mem_eff, limit, stuck), defects


def make_fleet(nodes: int = 16, gpus_per_node: int = 4, model: GpuModelSpec = V100, seed: int = 0,
               bad_fraction: float = 0.03, node_prefix: str = "gpu",
               node_names: Sequence[str] | None = None) -> SimFleet:
    """A reproducible fleet: the same arguments always give the same GPUs, traits and truth.

    Identity, physics and defects come from independent streams spawned from `seed`, so
    changing `bad_fraction` does not change any healthy GPU's traits or any UUID.
    """
    if nodes < 1:
        raise InputError(f"nodes must be >= 1, got {nodes}")
    if not 1 <= gpus_per_node <= _MAX_GPUS_PER_NODE:
        raise InputError(f"gpus_per_node must be within 1..{_MAX_GPUS_PER_NODE}, got {gpus_per_node}")
    if not 0.0 <= bad_fraction <= 1.0:
        raise InputError(f"bad_fraction must be within 0..1, got {bad_fraction}")
    id_rng, phys_rng, defect_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(3))
    n = nodes * gpus_per_node
    healthy = _draw_traits(phys_rng, model, nodes, gpus_per_node)
    traits, defects = _plant_defects(defect_rng, model, healthy, bad_fraction)

    truth: dict[str, np.ndarray] = {}
    for name, bench in BENCHMARKS.items():
        times = model.base_ms(name) * _operate(model, traits, bench, traits.inlet).time_factor
        truth[name] = times / np.median(times)
    truth_rows = list(zip(*(np.round(v, 6).tolist() for v in truth.values())))

    if node_names is not None and len(node_names) != nodes:
        raise InputError(f"{len(node_names)} node names for {nodes} nodes")
    width = max(3, len(str(nodes)))
    node_names = tuple(node_names) if node_names is not None else tuple(
        f"{node_prefix}{i + 1:0{width}d}" for i in range(nodes))
    raw = id_rng.bytes(16 * n)
    uuids = [f"GPU-{uuidlib.UUID(bytes=raw[16 * i:16 * i + 16])}" for i in range(n)]
    base_serial = int(id_rng.integers(10**9, 9 * 10**9))
    serials = base_serial + np.cumsum(id_rng.integers(1, 40, n))  # one procurement batch
    serials = id_rng.permutation(serials)  # installed in no particular order
    buses = _pci_bus_ids(model, gpus_per_node)
    cols = {f: getattr(traits, f).tolist() for f in _Traits.__slots__}
    gpus = []
    for i in range(n):
        node, slot = divmod(i, gpus_per_node)
        gpus.append(SimGpu(
            index=i, uuid=uuids[i], node=node_names[node], node_index=node, slot=slot, pci_bus_id=buses[slot],
            serial=f"{model.serial_prefix}{int(serials[i]):010d}", model=model,
            vf_power_factor=cols["vf"][i], leakage_factor=cols["leak"][i], thermal_resistance_c_per_w=cols["r_th"][i],
            inlet_temp_c=cols["inlet"][i], diurnal_phase=cols["phase"][i], memory_efficiency=cols["mem_eff"][i],
            power_limit_w=cols["limit"][i],
            stuck_sm_clock_mhz=None if math.isinf(cols["stuck"][i]) else cols["stuck"][i],
            defect=defects[i], true_perfvars=tuple(zip(BENCHMARKS, truth_rows[i])),
        ))
    return SimFleet(seed=seed, model=model, nodes=node_names, gpus_per_node=gpus_per_node, gpus=tuple(gpus),
                    _traits=traits)
