"""A stand-in for the NVML library (nvidia-ml-py's `pynvml` module), fed with recorded answers.

`pal_slurm.gpu.nvml.NvmlBackend` takes the NVML module as an argument (`nvml=`); on a machine
without a GPU the real `pynvml` cannot start, so its inventory, ECC, retired-page, throttle
and telemetry paths would never run in CI. This module plays the library's part: the same
function names, argument orders, constants and return shapes as `pynvml`, answering from a
recording of a real node (tests/data/nvml/*.json). Nothing of pal-slurm is replaced: the
backend's own code turns these answers into inventory and samples exactly as on a GPU node
(`backend_on` plugs it in). NVML's constants, errors and structs are in nvml_api.py.

What it keeps of the real library, because the backend depends on it:
- NVML must be initialised: a query before `nvmlInit` or after the last `nvmlShutdown`
  raises NVML_ERROR_UNINITIALIZED; init and shutdown are reference counted.
- Device handles are opaque (`DeviceHandle`), not the index: code that passed an index where
  a handle belongs fails here as it would against the real library.
- Errors are `NVMLError` with the NVML return code in `.value` and NVML's text as `str()`.
- Strings come back as `str` (nvidia-ml-py 11.515 and later decode them) or as `bytes`
  (earlier releases), chosen by `strings=`; so do the char fields of the PCI struct.
- A query the driver's libnvidia-ml lacks (`missing_functions` in the recording) raises
  NVML_ERROR_FUNCTION_NOT_FOUND; the unversioned running-process queries raise
  `NVMLLibraryMismatchError` (not an NVMLError) instead, as nvidia-ml-py 12 and later do
  when the driver lacks their _v3 symbols. `module_lacks=` removes a function from the module
  itself, as an older nvidia-ml-py lacks it (`hasattr` is then false).

Recording conventions: a GPU field that is null (or absent) answers NVML_ERROR_NOT_SUPPORTED;
`{"nvml_error": "NO_PERMISSION"}` answers that error. `fail()` and `lose()` inject what a
recording cannot hold: an error on the N-th call, a GPU that falls off the bus mid-read.
"""

from __future__ import annotations

import json
import threading
import types
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from tests.support import nvml_api
from tests.support.nvml_api import (
    DeviceHandle,
    Memory,
    NVMLError,
    NVMLLibraryMismatchError,
    NVML_AGGREGATE_ECC,
    NVML_CLOCK_GRAPHICS,
    NVML_CLOCK_MEM,
    NVML_CLOCK_SM,
    NVML_CLOCK_VIDEO,
    NVML_ERROR_FUNCTION_NOT_FOUND,
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_INVALID_ARGUMENT,
    NVML_ERROR_NOT_FOUND,
    NVML_ERROR_NOT_SUPPORTED,
    NVML_ERROR_UNINITIALIZED,
    NVML_MEMORY_ERROR_TYPE_CORRECTED,
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
    NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR,
    NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
    NVML_TEMPERATURE_GPU,
    NVML_VOLATILE_ECC,
    PciInfo,
    ProcessInfo,
    Utilization,
    error_code,
)
from pal_slurm.gpu.nvml import NvmlBackend

RECORDINGS = Path(__file__).resolve().parents[1] / "data" / "nvml"
#: the nodes recorded there
NODES = ("h100-node", "v100-node")

# -- recordings -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Recording:
    """What NVML answered on one node (one JSON file of tests/data/nvml)."""

    driver_version: str
    cuda_driver_version: int
    gpus: tuple[dict[str, Any], ...]
    missing_functions: frozenset[str] = frozenset()
    process_names: dict[int, str] = field(default_factory=dict)

    @classmethod
    def load(cls, name: str) -> Recording:
        """tests/data/nvml/<name>.json."""
        raw = json.loads((RECORDINGS / f"{name}.json").read_text())
        return cls(driver_version=raw["driver_version"], cuda_driver_version=raw["cuda_driver_version"],
                   gpus=tuple(raw["gpus"]), missing_functions=frozenset(raw.get("missing_functions", ())),
                   process_names={int(pid): n for pid, n in raw.get("process_names", {}).items()})


@dataclass
class Failure:
    """An injected NVML error: `function` raises `code` for GPU `gpu` (None: any, and the
    system queries), from its `nth` call on, `times` times (None: for good)."""

    function: str
    code: int
    gpu: int | None = None
    nth: int = 1
    times: int | None = None
    seen: int = 0
    fired: int = 0

    def hits(self, function: str, gpu: int | None) -> bool:
        if function != self.function or (self.gpu is not None and gpu != self.gpu):
            return False
        self.seen += 1
        if self.seen < self.nth or (self.times is not None and self.fired >= self.times):
            return False
        self.fired += 1
        return True


# the C symbol each pynvml function calls, where it is not the function's own name
_SYMBOL = {
    "nvmlInit": "nvmlInitWithFlags",
    "nvmlDeviceGetCount": "nvmlDeviceGetCount_v2",
    "nvmlDeviceGetHandleByIndex": "nvmlDeviceGetHandleByIndex_v2",
    "nvmlDeviceGetPciInfo": "nvmlDeviceGetPciInfo_v3",
    "nvmlDeviceGetComputeRunningProcesses": "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetGraphicsRunningProcesses": "nvmlDeviceGetGraphicsRunningProcesses_v3",
}
# unversioned wrappers that turn a missing symbol into NVMLLibraryMismatchError
_MISMATCH_WRAPPED = {"nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"}

_CLOCKS = {NVML_CLOCK_GRAPHICS: "graphics", NVML_CLOCK_SM: "sm", NVML_CLOCK_MEM: "mem", NVML_CLOCK_VIDEO: "video"}
_ECC_COUNTERS = {NVML_VOLATILE_ECC: "volatile", NVML_AGGREGATE_ECC: "aggregate"}
_ECC_TYPES = {NVML_MEMORY_ERROR_TYPE_CORRECTED: "corrected", NVML_MEMORY_ERROR_TYPE_UNCORRECTED: "uncorrected"}
_RETIREMENT = {NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS: "multiple_single_bit",
               NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR: "double_bit"}

#: the functions the stand-in offers, named as in pynvml
FUNCTIONS = (
    "nvmlInit", "nvmlShutdown", "nvmlSystemGetDriverVersion", "nvmlSystemGetCudaDriverVersion",
    "nvmlSystemGetProcessName", "nvmlDeviceGetCount", "nvmlDeviceGetHandleByIndex", "nvmlDeviceGetName",
    "nvmlDeviceGetUUID", "nvmlDeviceGetPciInfo", "nvmlDeviceGetMinorNumber", "nvmlDeviceGetSerial",
    "nvmlDeviceGetVbiosVersion", "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetEnforcedPowerLimit",
    "nvmlDeviceGetPowerManagementLimit", "nvmlDeviceGetPowerUsage", "nvmlDeviceGetTemperature",
    "nvmlDeviceGetClockInfo", "nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons",
    "nvmlDeviceGetUtilizationRates", "nvmlDeviceGetTotalEccErrors", "nvmlDeviceGetRetiredPages",
    "nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses",
)


class NvmlStandIn:
    """One node's NVML, answering from `recording`. `module()` is what the backend is given.

    Thread-safe like NVML (the profiler samples telemetry while it inventories). `calls`
    lists every query made, as (function, GPU index or None), so a test can tell what the
    backend asked and how often.
    """

    def __init__(self, recording: Recording, *, strings: Literal["str", "bytes"] = "str",
                 module_lacks: Iterable[str] = ()) -> None:
        self.recording = recording
        self.strings = strings
        self.module_lacks = frozenset(module_lacks)
        self.gpus = [dict(g) for g in recording.gpus]  # changeable per test: update()
        self.failures: list[Failure] = []
        self.lost: set[int] = set()
        self._lose_at: dict[int, str] = {}
        self.calls: list[tuple[str, int | None]] = []
        self.initialised = 0  # NVML's reference count
        self._lock = threading.RLock()

    # -- what a test sets up -------------------------------------------------------------

    def fail(self, function: str, code: int, *, gpu: int | None = None, nth: int = 1,
             times: int | None = None) -> NvmlStandIn:
        """Make `function` raise NVML error `code` (see Failure)."""
        self.failures.append(Failure(function, code, gpu, nth, times))
        return self

    def lose(self, gpu: int, *, at: str | None = None) -> NvmlStandIn:
        """GPU `gpu` falls off the bus: now, or when `at` is next asked about it (that query and
        every later one about it answer NVML_ERROR_GPU_IS_LOST)."""
        if at is None:
            self.lost.add(gpu)
        else:
            self._lose_at[gpu] = at
        return self

    def update(self, gpu: int, **fields: Any) -> NvmlStandIn:
        """Change recorded answers of one GPU (a reading that moves between samples)."""
        self.gpus[gpu].update(fields)
        return self

    def count(self, function: str, gpu: int | None = None) -> int:
        """How many times `function` was called (for `gpu`, if given)."""
        return sum(1 for f, g in self.calls if f == function and (gpu is None or g == gpu))

    def module(self) -> types.ModuleType:
        """A module with pynvml's names: its constants, error classes and this node's functions."""
        mod = types.ModuleType("pynvml_standin", "NVML stand-in answering from a recording (tests/support/nvml_standin.py)")
        for name, value in vars(nvml_api).items():
            if name.startswith(("NVML_", "nvmlClocks")):
                setattr(mod, name, value)
        mod.NVMLError = NVMLError
        mod.NVMLLibraryMismatchError = NVMLLibraryMismatchError
        for name in FUNCTIONS:
            if name not in self.module_lacks:
                setattr(mod, name, getattr(self, name))
        return mod

    # -- the machinery every query goes through ------------------------------------------

    def _text(self, value: str) -> str | bytes:
        return value.encode() if self.strings == "bytes" else value

    def _enter(self, function: str, handle: Any = None, *, needs_init: bool = True) -> int | None:
        """Check a call as libnvidia-ml would, in its order; return the handle's GPU index."""
        with self._lock:
            gpu = handle._index if isinstance(handle, DeviceHandle) else None
            self.calls.append((function, gpu))
            if needs_init and self.initialised == 0:
                raise NVMLError(NVML_ERROR_UNINITIALIZED)
            if _SYMBOL.get(function, function) in self.recording.missing_functions:
                if function in _MISMATCH_WRAPPED:
                    raise NVMLLibraryMismatchError(
                        f"Unversioned function called and the pyNVML version does not match the NVML lib "
                        f"version: {function} needs {_SYMBOL[function]}")
                raise NVMLError(NVML_ERROR_FUNCTION_NOT_FOUND)
            if handle is not None and (gpu is None or not 0 <= gpu < len(self.gpus)):
                raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
            if gpu is not None:
                if self._lose_at.get(gpu) == function:
                    del self._lose_at[gpu]
                    self.lost.add(gpu)
                if gpu in self.lost:
                    raise NVMLError(NVML_ERROR_GPU_IS_LOST)
            for failure in self.failures:
                if failure.hits(function, gpu):
                    raise NVMLError(failure.code)
            return gpu

    def _field(self, gpu: int, key: str) -> Any:
        value = self.gpus[gpu].get(key)
        if value is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        if isinstance(value, dict) and "nvml_error" in value:
            raise NVMLError(error_code(value["nvml_error"]))
        return value

    def _device(self, function: str, handle: Any, key: str) -> Any:
        gpu = self._enter(function, handle)
        assert gpu is not None
        return self._field(gpu, key)

    # -- the library's functions, as pynvml names and shapes them -------------------------

    def nvmlInit(self) -> None:
        self._enter("nvmlInit", needs_init=False)
        with self._lock:
            self.initialised += 1

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        with self._lock:
            self.initialised -= 1

    def nvmlSystemGetDriverVersion(self) -> str | bytes:
        self._enter("nvmlSystemGetDriverVersion")
        return self._text(self.recording.driver_version)

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._enter("nvmlSystemGetCudaDriverVersion")
        return self.recording.cuda_driver_version

    def nvmlSystemGetProcessName(self, pid: int) -> str | bytes:
        self._enter("nvmlSystemGetProcessName")
        name = self.recording.process_names.get(int(pid))
        if name is None:
            raise NVMLError(NVML_ERROR_NOT_FOUND)  # another container's process
        return self._text(name)

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> DeviceHandle:
        self._enter("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.gpus):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        if index in self.lost:
            raise NVMLError(NVML_ERROR_GPU_IS_LOST)
        return DeviceHandle(index)

    def nvmlDeviceGetName(self, handle: DeviceHandle) -> str | bytes:
        return self._text(self._device("nvmlDeviceGetName", handle, "name"))

    def nvmlDeviceGetUUID(self, handle: DeviceHandle) -> str | bytes:
        return self._text(self._device("nvmlDeviceGetUUID", handle, "uuid"))

    def nvmlDeviceGetSerial(self, handle: DeviceHandle) -> str | bytes:
        return self._text(self._device("nvmlDeviceGetSerial", handle, "serial"))

    def nvmlDeviceGetVbiosVersion(self, handle: DeviceHandle) -> str | bytes:
        return self._text(self._device("nvmlDeviceGetVbiosVersion", handle, "vbios_version"))

    def nvmlDeviceGetPciInfo(self, handle: DeviceHandle) -> PciInfo:
        pci = self._device("nvmlDeviceGetPciInfo", handle, "pci")
        return PciInfo(busIdLegacy=self._text(pci["busIdLegacy"]), domain=pci["domain"], bus=pci["bus"],
                       device=pci["device"], pciDeviceId=pci["pciDeviceId"], pciSubSystemId=pci["pciSubSystemId"],
                       busId=self._text(pci["busId"]))

    def nvmlDeviceGetMinorNumber(self, handle: DeviceHandle) -> int:
        return int(self._device("nvmlDeviceGetMinorNumber", handle, "minor_number"))

    def nvmlDeviceGetMemoryInfo(self, handle: DeviceHandle, version: int | None = None) -> Memory:
        m = self._device("nvmlDeviceGetMemoryInfo", handle, "memory")
        return Memory(total=m["total"], free=m["free"], used=m["used"])

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: DeviceHandle) -> int:
        return int(self._device("nvmlDeviceGetEnforcedPowerLimit", handle, "enforced_power_limit_mw"))

    def nvmlDeviceGetPowerManagementLimit(self, handle: DeviceHandle) -> int:
        return int(self._device("nvmlDeviceGetPowerManagementLimit", handle, "power_management_limit_mw"))

    def nvmlDeviceGetPowerUsage(self, handle: DeviceHandle) -> int:
        return int(self._device("nvmlDeviceGetPowerUsage", handle, "power_usage_mw"))

    def nvmlDeviceGetTemperature(self, handle: DeviceHandle, sensor: int) -> int:
        value = self._device("nvmlDeviceGetTemperature", handle, "temperature_gpu_c")
        if sensor != NVML_TEMPERATURE_GPU:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return int(value)

    def nvmlDeviceGetClockInfo(self, handle: DeviceHandle, type: int) -> int:  # noqa: A002 - pynvml's name
        clocks = self._device("nvmlDeviceGetClockInfo", handle, "clocks_mhz")
        if type not in _CLOCKS:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        value = clocks.get(_CLOCKS[type])
        if value is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return int(value)

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: DeviceHandle) -> int:
        return int(self._device("nvmlDeviceGetCurrentClocksEventReasons", handle, "clocks_event_reasons"))

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: DeviceHandle) -> int:
        """The pre-535 name of the same bitmask."""
        return int(self._device("nvmlDeviceGetCurrentClocksThrottleReasons", handle, "clocks_event_reasons"))

    def nvmlDeviceGetUtilizationRates(self, handle: DeviceHandle) -> Utilization:
        u = self._device("nvmlDeviceGetUtilizationRates", handle, "utilization")
        return Utilization(gpu=u["gpu"], memory=u["memory"])

    def nvmlDeviceGetTotalEccErrors(self, handle: DeviceHandle, errorType: int, counterType: int) -> int:
        ecc = self._device("nvmlDeviceGetTotalEccErrors", handle, "ecc_errors")
        if errorType not in _ECC_TYPES or counterType not in _ECC_COUNTERS:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return int(ecc[_ECC_COUNTERS[counterType]][_ECC_TYPES[errorType]])

    def nvmlDeviceGetRetiredPages(self, device: DeviceHandle, sourceFilter: int) -> list[int]:
        pages = self._device("nvmlDeviceGetRetiredPages", device, "retired_pages")
        if sourceFilter not in _RETIREMENT:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return [int(p) for p in pages[_RETIREMENT[sourceFilter]]]

    def _processes(self, function: str, handle: DeviceHandle, key: str) -> list[ProcessInfo]:
        listed = self._device(function, handle, key)
        return [ProcessInfo(pid=p["pid"], usedGpuMemory=p.get("used_gpu_memory")) for p in listed]

    def nvmlDeviceGetComputeRunningProcesses(self, handle: DeviceHandle) -> list[ProcessInfo]:
        return self._processes("nvmlDeviceGetComputeRunningProcesses", handle, "compute_processes")

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: DeviceHandle) -> list[ProcessInfo]:
        return self._processes("nvmlDeviceGetGraphicsRunningProcesses", handle, "graphics_processes")


def backend_on(standin: NvmlStandIn) -> NvmlBackend:
    """pal-slurm's NVML backend given `standin` as its `nvml` module, on a node named gpu-node."""
    return NvmlBackend(node="gpu-node", nvml=standin.module())
