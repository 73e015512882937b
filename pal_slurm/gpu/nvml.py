"""The GPU interface on real NVIDIA GPUs, through NVML (nvidia-ml-py, `import pynvml`).

Every NVML call goes through `_call`, which turns NVML's errors into ours: a query the
GPU does not support (or that needs privileges we lack) answers None, a GPU that fell
off the bus raises `GpuLostError`, anything else about one GPU raises `GpuQueryError`,
so one broken GPU never stops the others. The `nvml` module is injectable for tests on
machines without a GPU; by default it is the real `pynvml`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from pal_slurm.gpu.interface import (
    BackendUnavailable,
    GpuInventory,
    GpuLostError,
    GpuProcess,
    GpuQueryError,
    GpuSample,
)

__all__ = ["NvmlBackend", "cuda_version_text", "load_nvml"]

log = logging.getLogger(__name__)

_MIB = 1024 * 1024
# NVML return codes (nvml.h); the values are fixed by NVIDIA's ABI.
_NOT_SUPPORTED = 3
_NO_PERMISSION = 4
_DRIVER_NOT_LOADED = 9
_LIBRARY_NOT_FOUND = 12
_FUNCTION_NOT_FOUND = 13
_GPU_IS_LOST = 15
_ANSWERS_NONE = {_NOT_SUPPORTED, _NO_PERMISSION, _FUNCTION_NOT_FOUND}

_CLOCK_SM = 1  # NVML_CLOCK_SM
_CLOCK_MEM = 2  # NVML_CLOCK_MEM
_TEMPERATURE_GPU = 0  # NVML_TEMPERATURE_GPU
_ECC_CORRECTED = 0  # NVML_MEMORY_ERROR_TYPE_CORRECTED
_ECC_UNCORRECTED = 1  # NVML_MEMORY_ERROR_TYPE_UNCORRECTED
_ECC_AGGREGATE = 1  # NVML_AGGREGATE_ECC: lifetime counts, not since the last driver load
_RETIRE_SBE = 0  # NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS
_RETIRE_DBE = 1  # NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR


def load_nvml() -> Any:
    """The pynvml module, or BackendUnavailable saying how to install it."""
    try:
        import pynvml  # type: ignore[import-not-found]
    except ImportError:
        raise BackendUnavailable(
            "nvidia-ml-py is not installed: pip install 'pal-slurm[nvml]' (or nvidia-ml-py) on the GPU nodes"
        ) from None
    return pynvml


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def cuda_version_text(version: int) -> str:
    """NVML's CUDA driver version integer (12040) as '12.4'."""
    return f"{version // 1000}.{(version % 1000) // 10}"


def _code(exc: BaseException) -> int | None:
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else None


class NvmlBackend:
    """The real GPUs of this node. Thread-safe (NVML is); `close()` shuts NVML down."""

    name = "nvml"

    def __init__(self, node: str, nvml: Any = None) -> None:
        self._nvml = load_nvml() if nvml is None else nvml
        self._node = node
        self._uuids: dict[int, str] = {}
        # nvidia-ml-py raises this, not an NVMLError, when the driver's NVML lacks the versioned
        # query an unversioned call maps to (the _v3 process queries on a 470 driver); `except ()`
        # catches nothing where the module has no such class
        mismatch = getattr(self._nvml, "NVMLLibraryMismatchError", None)
        self._mismatch: tuple[type[BaseException], ...] = (mismatch,) if isinstance(mismatch, type) else ()
        try:
            self._nvml.nvmlInit()
        except self._nvml.NVMLError as exc:
            raise BackendUnavailable(self._init_message(exc)) from exc
        try:
            self._count = int(self._nvml.nvmlDeviceGetCount())
        except self._nvml.NVMLError as exc:
            self.close()
            raise BackendUnavailable(f"NVML cannot count the GPUs: {exc}") from exc
        self._driver = self._optional(-1, "driver version", lambda: _text(self._nvml.nvmlSystemGetDriverVersion()))
        cuda = self._optional(-1, "CUDA driver version", self._nvml.nvmlSystemGetCudaDriverVersion)
        self._cuda = cuda_version_text(int(cuda)) if cuda else None
        self._has_event_reasons = hasattr(self._nvml, "nvmlDeviceGetCurrentClocksEventReasons")

    @staticmethod
    def _init_message(exc: BaseException) -> str:
        code = _code(exc)
        if code == _LIBRARY_NOT_FOUND:
            return "libnvidia-ml.so.1 not found: the NVIDIA driver is not installed on this node"
        if code == _DRIVER_NOT_LOADED:
            return "the NVIDIA kernel driver is not loaded (NVML: Driver Not Loaded)"
        return f"NVML cannot start: {exc}"

    # -- error translation -------------------------------------------------------------

    def _call(self, index: int, what: str, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except self._nvml.NVMLError as exc:
            uuid = self._uuids.get(index)
            if _code(exc) == _GPU_IS_LOST:
                raise GpuLostError(index, f"{what}: the GPU fell off the bus (NVML: GPU is lost); "
                                          "drain the node and reset the GPU or reboot", uuid=uuid) from exc
            raise GpuQueryError(index, f"{what}: NVML error: {exc}", uuid=uuid) from exc
        except self._mismatch as exc:
            raise GpuQueryError(index, f"{what}: this nvidia-ml-py asks for a query the NVIDIA driver's NVML "
                                       "lacks; update the driver or install an older nvidia-ml-py",
                                uuid=self._uuids.get(index)) from exc

    def _optional(self, index: int, what: str, fn: Callable[..., Any], *args: Any) -> Any:
        """A query some GPUs cannot answer: None then. A lost GPU still raises."""
        try:
            return self._call(index, what, fn, *args)
        except GpuQueryError as exc:
            cause = exc.__cause__
            if cause is not None and _code(cause) in _ANSWERS_NONE:
                log.debug("GPU %d: %s not available: %s", index, what, cause)
                return None
            if index < 0:  # a system-level query: never fatal
                log.warning("NVML: %s: %s", what, cause)
                return None
            raise

    def _handle(self, index: int) -> Any:
        if not 0 <= index < self._count:
            raise GpuQueryError(index, f"no such GPU (this node has {self._count})")
        return self._call(index, "get handle", self._nvml.nvmlDeviceGetHandleByIndex, index)

    # -- the interface -----------------------------------------------------------------

    def nodes(self) -> tuple[str, ...]:
        return (self._node,)

    def device_count(self) -> int:
        return self._count

    def uuid(self, index: int) -> str:
        if index not in self._uuids:
            h = self._handle(index)
            self._uuids[index] = _text(self._call(index, "UUID", self._nvml.nvmlDeviceGetUUID, h))
        return self._uuids[index]

    def inventory(self, index: int) -> GpuInventory:
        nv = self._nvml
        h = self._handle(index)
        uuid = self.uuid(index)
        name = _text(self._call(index, "name", nv.nvmlDeviceGetName, h))
        opt = lambda what, fn, *a: self._optional(index, what, fn, h, *a)
        pci = opt("PCI info", nv.nvmlDeviceGetPciInfo)
        memory = opt("memory info", nv.nvmlDeviceGetMemoryInfo)
        limit_mw = opt("enforced power limit", nv.nvmlDeviceGetEnforcedPowerLimit) \
            if hasattr(nv, "nvmlDeviceGetEnforcedPowerLimit") else None
        if limit_mw is None:
            limit_mw = opt("power limit", nv.nvmlDeviceGetPowerManagementLimit)
        serial = opt("serial", nv.nvmlDeviceGetSerial)
        vbios = opt("VBIOS version", nv.nvmlDeviceGetVbiosVersion)
        minor = opt("minor number", nv.nvmlDeviceGetMinorNumber)
        ecc_c = opt("corrected ECC errors", nv.nvmlDeviceGetTotalEccErrors, _ECC_CORRECTED, _ECC_AGGREGATE)
        ecc_u = opt("uncorrected ECC errors", nv.nvmlDeviceGetTotalEccErrors, _ECC_UNCORRECTED, _ECC_AGGREGATE)
        sbe = opt("retired pages (SBE)", nv.nvmlDeviceGetRetiredPages, _RETIRE_SBE)
        dbe = opt("retired pages (DBE)", nv.nvmlDeviceGetRetiredPages, _RETIRE_DBE)
        return GpuInventory(
            index=index, uuid=uuid, node=self._node, name=name, nvml_index=index,
            minor_number=None if minor is None else int(minor),
            pci_bus_id=None if pci is None else _text(pci.busId),
            serial=None if serial is None else (_text(serial).strip() or None),
            memory_mib=None if memory is None else int(memory.total) // _MIB,
            power_limit_w=None if limit_mw is None else limit_mw / 1000.0,
            driver_version=self._driver, cuda_version=self._cuda,
            vbios_version=None if vbios is None else _text(vbios),
            ecc_corrected=None if ecc_c is None else int(ecc_c),
            ecc_uncorrected=None if ecc_u is None else int(ecc_u),
            retired_pages=None if sbe is None and dbe is None else len(sbe or ()) + len(dbe or ()),
        )

    def sample(self, index: int) -> GpuSample:
        nv = self._nvml
        h = self._handle(index)
        opt = lambda what, fn, *a: self._optional(index, what, fn, h, *a)
        sm = opt("SM clock", nv.nvmlDeviceGetClockInfo, _CLOCK_SM)
        mem = opt("memory clock", nv.nvmlDeviceGetClockInfo, _CLOCK_MEM)
        power_mw = opt("power", nv.nvmlDeviceGetPowerUsage)
        temp = opt("temperature", nv.nvmlDeviceGetTemperature, _TEMPERATURE_GPU)
        reasons = self._reasons(index, h)
        util = opt("utilization", nv.nvmlDeviceGetUtilizationRates)
        return GpuSample(
            timestamp=time.time(),
            sm_clock_mhz=None if sm is None else float(sm),
            mem_clock_mhz=None if mem is None else float(mem),
            power_w=None if power_mw is None else power_mw / 1000.0,
            temperature_c=None if temp is None else float(temp),
            throttle_reasons=None if reasons is None else int(reasons),
            utilization_gpu=None if util is None else int(util.gpu),
            utilization_memory=None if util is None else int(util.memory),
        )

    def _reasons(self, index: int, h: Any) -> int | None:
        """Clocks-event reasons; drivers before 535 know only the older 'throttle reasons' call."""
        nv = self._nvml
        if self._has_event_reasons:
            try:
                return self._call(index, "clocks event reasons", nv.nvmlDeviceGetCurrentClocksEventReasons, h)
            except GpuQueryError as exc:
                code = _code(exc.__cause__) if exc.__cause__ is not None else None
                if code != _FUNCTION_NOT_FOUND:
                    if code in _ANSWERS_NONE:
                        return None
                    raise
                self._has_event_reasons = False
        return self._optional(index, "clocks throttle reasons", nv.nvmlDeviceGetCurrentClocksThrottleReasons, h)

    def processes(self, index: int) -> list[GpuProcess]:
        nv = self._nvml
        h = self._handle(index)
        found: dict[int, GpuProcess] = {}
        queries = [("compute processes", nv.nvmlDeviceGetComputeRunningProcesses)]
        if hasattr(nv, "nvmlDeviceGetGraphicsRunningProcesses"):
            queries.append(("graphics processes", nv.nvmlDeviceGetGraphicsRunningProcesses))
        for what, fn in queries:
            for p in self._optional(index, what, fn, h) or ():
                pid = int(p.pid)
                used = getattr(p, "usedGpuMemory", None)
                name = self._process_name(pid)
                found.setdefault(pid, GpuProcess(pid=pid, name=None if name is None else _text(name),
                                                 used_memory_mib=None if used is None else int(used) // _MIB))
        return sorted(found.values(), key=lambda p: p.pid)

    def _process_name(self, pid: int) -> str | None:
        """Best effort: NVML cannot name processes of other containers or PID namespaces."""
        try:
            return _text(self._nvml.nvmlSystemGetProcessName(pid))
        except self._nvml.NVMLError:
            return None

    def visible_device(self, index: int) -> str:
        # The UUID, not the index: it means the same GPU whatever the enumeration order.
        return self.uuid(index)

    def close(self) -> None:
        try:
            self._nvml.nvmlShutdown()
        except self._nvml.NVMLError as exc:  # shutting down is best effort
            log.debug("nvmlShutdown: %s", exc)
