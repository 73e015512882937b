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

The physics of one GPU is `pal_slurm.gpu.sim_physics`'s, the GPU models and benchmarks are
`pal_slurm.gpu.sim_specs`'s, the hidden traits and the planted defects
`pal_slurm.gpu.sim_traits`'s; this module makes a fleet of them and runs its benchmarks.

Everything random comes from ``numpy.random.Generator`` objects seeded from the fleet
seed (never the global random state), so the same seed gives byte-identical records on
any machine. The module does no I/O.
"""

from __future__ import annotations

import hashlib
import math
import uuid as uuidlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import numpy as np

from pal_slurm.errors import InputError
from pal_slurm.gpu.sim_physics import idle_sample, inlet_at, operate
from pal_slurm.gpu.sim_specs import BENCHMARKS, V100, BenchmarkSpec, GpuModelSpec, benchmark_spec
from pal_slurm.gpu.sim_traits import Traits, draw_traits, plant_defects
from pal_slurm.ingest.records import GpuInfo, ProfileRecord

__all__ = [
    "CUDA_VERSION",
    "DEFAULT_BENCHMARKS",
    "DEFAULT_START",
    "DEFAULT_TIER_EDGES",
    "DRIVER_VERSION",
    "SOURCE",
    "SimFleet",
    "SimGpu",
    "make_fleet",
]

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

_RUN_INLET_JITTER_C = 0.5  # neighbours' load, fan control: run-to-run inlet noise
_POWER_READ_NOISE = 0.002  # relative noise of the median power reading
_IQR_PER_SIGMA = 1.349  # IQR of a normal distribution in units of its sigma

# PCI bus numbers of real 4- and 8-GPU servers (a typical 4-GPU 2-socket board, DGX).
_PCI_BUSES_4 = (0x18, 0x3B, 0x86, 0xAF)
_PCI_BUSES_8 = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)
_MAX_GPUS_PER_NODE = 32


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

    def _traits(self) -> Traits:
        one = lambda v: np.array([v], dtype=float)  # noqa: E731
        stuck = math.inf if self.stuck_sm_clock_mhz is None else self.stuck_sm_clock_mhz
        return Traits(one(self.vf_power_factor), one(self.leakage_factor), one(self.thermal_resistance_c_per_w),
                       one(self.inlet_temp_c), one(self.diurnal_phase), one(self.memory_efficiency),
                       one(self.power_limit_w), one(stuck))

    def sample(self, load: float, t: float) -> dict[str, float | int]:
        """What NVML would report at load `load` (0 idle .. 1 a full dense-GEMM load) at Unix time `t`.

        Deterministic: the same inputs give the same sample. Meant for the node agent's
        simulated backend, so that its telemetry obeys the same physics as the scores.
        """
        if not 0.0 <= load <= 1.0 or math.isnan(load):
            raise InputError(f"load must be within 0..1, got {load}")
        spec, tr = self.model, self._traits()
        inlet = inlet_at(tr, t)
        if load == 0.0:
            return idle_sample(spec, self.vf_power_factor, self.leakage_factor, self.thermal_resistance_c_per_w,
                               float(inlet[0]))
        load_bench = BenchmarkSpec("load", 1.0, load, load, 0.0, 0.0, 1, 0.0)
        op = operate(spec, tr, load_bench, inlet)
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
    _traits: Traits = field(repr=False, compare=False)

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
        cols = self._runs(idx, benchmark_spec(benchmark), np.array([started_at.timestamp()]), rng)
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
        specs = [benchmark_spec(b) for b in benchmarks]
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
        tr = Traits(*(getattr(self._traits, f)[idx] for f in Traits.__slots__))
        inlet = inlet_at(tr, t) + rng.normal(0.0, _RUN_INLET_JITTER_C, n)
        op = operate(self.model, tr, spec, inlet)
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
    healthy = draw_traits(phys_rng, model, nodes, gpus_per_node)
    traits, defects = plant_defects(defect_rng, model, healthy, bad_fraction)

    truth: dict[str, np.ndarray] = {}
    for name, bench in BENCHMARKS.items():
        times = model.base_ms(name) * operate(model, traits, bench, traits.inlet).time_factor
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
    cols = {f: getattr(traits, f).tolist() for f in Traits.__slots__}
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
