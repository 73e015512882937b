"""The GPU interface on a simulated fleet (`pal_slurm.gpu.simulated_fleet`), for machines without GPUs.

A backend covers some nodes of one seeded fleet (all of them by default), so tests,
the demo and CI exercise the same profiler code as a real node, with telemetry that
obeys the same physics as the simulated scores. It can also play the failures a real
node has: a GPU that another process uses (`busy`) and one that fell off the bus (`lost`).
`pal_slurm.gpu.choose` makes sure it is never used on a node that has real GPUs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping, Sequence

from pal_slurm.errors import InputError
from pal_slurm.gpu.interface import (
    GpuInventory,
    GpuLostError,
    GpuProcess,
    GpuQueryError,
    GpuSample,
)
from pal_slurm.gpu.simulated_fleet import CUDA_VERSION, DRIVER_VERSION, SimFleet, SimGpu

__all__ = ["BUSY_LOAD", "SimBackend", "busy_process"]

BUSY_LOAD = 0.8  # the load a simulated foreign process puts on its GPU
_VBIOS = {"V100": "88.00.4F.00.09", "H100": "96.00.99.00.01"}
_MEMORY_ACTIVITY_PER_LOAD = 0.3  # memory-controller busy share per unit of (GEMM-like) load


def busy_process(index: int) -> GpuProcess:
    """The process a simulated busy GPU reports (deterministic, so tests can name it)."""
    return GpuProcess(pid=40000 + index, name="python3 train.py (simulated user job)", used_memory_mib=12288)


class SimBackend:
    """GPUs of `fleet` on `nodes` (None: every node), indexed 0.. in fleet order.

    `load(index, t)` says how loaded a GPU is at Unix time t (0 idle .. 1 dense GEMM); by
    default a busy GPU runs at BUSY_LOAD and the others idle. `clock` is injectable so
    that samples are reproducible.
    """

    name = "sim"

    def __init__(self, fleet: SimFleet, nodes: Sequence[str] | None = None, *,
                 busy: Mapping[int, Sequence[GpuProcess]] | Collection[int] = (), lost: Collection[int] = (),
                 load: Callable[[int, float], float] | None = None, clock: Callable[[], float] = time.time) -> None:
        if nodes is not None:
            unknown = sorted(set(nodes) - set(fleet.nodes))
            if unknown:
                raise InputError(f"simulated fleet has no node {', '.join(unknown)} "
                                 f"(it has {fleet.nodes[0]} .. {fleet.nodes[-1]})")
        self.fleet = fleet
        self._gpus: tuple[SimGpu, ...] = tuple(g for g in fleet.gpus if nodes is None or g.node in nodes)
        self._nodes = tuple(n for n in fleet.nodes if nodes is None or n in nodes)
        for what, indices in (("busy", busy), ("lost", lost)):
            bad = sorted(i for i in indices if not 0 <= i < len(self._gpus))
            if bad:
                raise InputError(f"simulated {what} GPU index {bad[0]} out of range 0..{len(self._gpus) - 1}")
        self._busy: dict[int, list[GpuProcess]] = (
            {i: list(p) for i, p in busy.items()} if isinstance(busy, Mapping) else {i: [busy_process(i)] for i in busy}
        )
        self._lost = frozenset(lost)
        self._load = load or (lambda index, t: BUSY_LOAD if self._busy.get(index) else 0.0)
        self._clock = clock

    def sim_gpu(self, index: int) -> SimGpu:
        self._check(index)
        return self._gpus[index]

    def _check(self, index: int) -> None:
        if not 0 <= index < len(self._gpus):
            raise GpuQueryError(index, f"no such GPU (this backend has {len(self._gpus)})")
        if index in self._lost:
            raise GpuLostError(index, "the GPU fell off the bus (simulated NVML: GPU is lost); "
                                      "drain the node and reset the GPU or reboot")

    def nodes(self) -> tuple[str, ...]:
        return self._nodes

    def device_count(self) -> int:
        return len(self._gpus)

    def inventory(self, index: int) -> GpuInventory:
        self._check(index)
        g = self._gpus[index]
        family = "H100" if "H100" in g.model.name else "V100"
        # Health counters follow the planted defects, so a report has something to show.
        return GpuInventory(
            index=index, uuid=g.uuid, node=g.node, name=g.model.name, nvml_index=g.slot, minor_number=g.slot,
            pci_bus_id=g.pci_bus_id, serial=g.serial, memory_mib=g.model.memory_mib,
            power_limit_w=round(g.power_limit_w, 1), driver_version=DRIVER_VERSION, cuda_version=CUDA_VERSION,
            vbios_version=_VBIOS[family], ecc_corrected=17 if g.is_bad else 0, ecc_uncorrected=0,
            retired_pages=None if family == "H100" else (2 if g.is_bad else 0),  # Hopper remaps rows instead
        )

    def sample(self, index: int) -> GpuSample:
        self._check(index)
        t = self._clock()
        load = min(1.0, max(0.0, float(self._load(index, t))))
        s = self._gpus[index].sample(load, t)
        return GpuSample(
            timestamp=t, sm_clock_mhz=float(s["sm_clock_mhz"]), mem_clock_mhz=float(s["mem_clock_mhz"]),
            power_w=float(s["power_w"]), temperature_c=float(s["temperature_c"]),
            throttle_reasons=int(s["throttle_reasons"]), utilization_gpu=int(s["utilization"]),
            utilization_memory=round(100 * load * _MEMORY_ACTIVITY_PER_LOAD),
        )

    def processes(self, index: int) -> list[GpuProcess]:
        self._check(index)
        return list(self._busy.get(index, ()))

    def visible_device(self, index: int) -> str:
        self._check(index)
        return self._gpus[index].uuid

    def close(self) -> None:
        pass
