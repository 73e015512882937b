"""The one GPU interface the profiler and the agent talk to, and its typed errors.

Two backends implement `GpuBackend`: NVML (real GPUs, `gpu.nvml`) and a simulated
fleet (`gpu.simulated`). Callers never ask which one they have. What a GPU cannot tell
(an unsupported query) is None, never a guess. An error that concerns one GPU (it fell
off the bus, a query failed) is a `GpuError` carrying that GPU's index, so a scan can
report it and go on with the others; an error that concerns the whole backend (no
library, no driver) is a `BackendUnavailable`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from pal_slurm.errors import PalError
from pal_slurm.ingest.records import GpuInfo

__all__ = [
    "BackendUnavailable",
    "GpuBackend",
    "GpuError",
    "GpuFault",
    "GpuInventory",
    "GpuLostError",
    "GpuProcess",
    "GpuQueryError",
    "GpuSample",
    "InventoryScan",
    "scan_inventory",
]

log = logging.getLogger(__name__)


class BackendUnavailable(PalError):
    """The backend cannot be used at all on this machine (no library, no driver, no GPUs)."""


class GpuError(PalError):
    """One GPU failed; the others are fine. `index` is the backend's index of that GPU;
    `uuid` is set when the GPU told its UUID before failing."""

    def __init__(self, index: int, message: str, *, uuid: str | None = None) -> None:
        self.index = index
        self.uuid = uuid
        super().__init__(f"GPU {index}{f' ({uuid})' if uuid else ''}: {message}")


class GpuLostError(GpuError):
    """The GPU fell off the bus (NVML_ERROR_GPU_IS_LOST) or is otherwise gone; needs a reset."""


class GpuQueryError(GpuError):
    """A query that the GPU must answer failed (not merely 'not supported')."""


@dataclass(frozen=True, slots=True)
class GpuInventory:
    """What a node's GPU is: identity, memory, limits, versions, health counters.

    `index` addresses the GPU in its backend (the NVML index on a real node);
    `minor_number` is the /dev/nvidiaN number that Slurm's gres.conf names.
    """

    index: int
    uuid: str
    node: str
    name: str
    nvml_index: int | None = None
    minor_number: int | None = None
    pci_bus_id: str | None = None
    serial: str | None = None
    memory_mib: int | None = None
    power_limit_w: float | None = None
    driver_version: str | None = None
    cuda_version: str | None = None
    vbios_version: str | None = None
    ecc_corrected: int | None = None
    ecc_uncorrected: int | None = None
    retired_pages: int | None = None

    def gpu_info(self) -> GpuInfo:
        """The identity a profile record carries."""
        return GpuInfo(uuid=self.uuid, node=self.node, model=self.name, nvml_index=self.nvml_index,
                       minor_number=self.minor_number, pci_bus_id=self.pci_bus_id, serial=self.serial,
                       memory_mib=self.memory_mib)


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One telemetry reading. `throttle_reasons` is NVML's clocks-event-reasons bitmask;
    `utilization_memory` is the memory-bandwidth utilisation (percent of time the memory
    controller was busy), not memory occupancy."""

    timestamp: float  # Unix time of the reading
    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    power_w: float | None = None
    temperature_c: float | None = None
    throttle_reasons: int | None = None
    utilization_gpu: int | None = None  # percent
    utilization_memory: int | None = None  # percent


@dataclass(frozen=True, slots=True)
class GpuProcess:
    """A compute process using a GPU (what `pal profile run` refuses to benchmark on top of)."""

    pid: int
    name: str | None = None
    used_memory_mib: int | None = None


@dataclass(frozen=True, slots=True)
class GpuFault:
    """A GPU that could not be inventoried, and why (reported; the scan went on)."""

    index: int
    error: str
    uuid: str | None = None
    lost: bool = False


@dataclass(frozen=True)
class InventoryScan:
    """One scan of a backend: the GPUs it could read, the ones it could not, the nodes covered."""

    backend: str
    nodes: tuple[str, ...]
    gpus: tuple[GpuInventory, ...]
    faults: tuple[GpuFault, ...] = field(default=())


@runtime_checkable
class GpuBackend(Protocol):
    """The GPU interface. Indices run 0 .. device_count() - 1.

    Implementations raise `GpuError` (or a subclass) for a failure of one GPU and
    `BackendUnavailable` when nothing works. They must be safe to call from several
    threads at once (the runner samples telemetry while benchmarks run).
    """

    name: str

    def nodes(self) -> tuple[str, ...]:
        """The node names this backend covers (one on a real node)."""
        ...

    def device_count(self) -> int: ...

    def inventory(self, index: int) -> GpuInventory: ...

    def sample(self, index: int) -> GpuSample: ...

    def processes(self, index: int) -> list[GpuProcess]:
        """Compute processes running on the GPU now (empty when idle)."""
        ...

    def visible_device(self, index: int) -> str:
        """What CUDA_VISIBLE_DEVICES must say to show a benchmark only this GPU."""
        ...

    def close(self) -> None: ...


def scan_inventory(backend: GpuBackend) -> InventoryScan:
    """Inventory every GPU; a GPU that fails is reported in `faults` and the scan goes on."""
    gpus: list[GpuInventory] = []
    faults: list[GpuFault] = []
    for index in range(backend.device_count()):
        try:
            gpus.append(backend.inventory(index))
        except GpuError as exc:
            log.warning("inventory: %s", exc)
            faults.append(GpuFault(index=index, error=str(exc), uuid=exc.uuid,
                                   lost=isinstance(exc, GpuLostError)))
    return InventoryScan(backend=backend.name, nodes=backend.nodes(), gpus=tuple(gpus), faults=tuple(faults))
