"""What nvidia-ml-py's `pynvml` module exposes besides its functions, as the NVML stand-in
(tests/support/nvml_standin.py) gives it to the backend: NVML's constants (nvml.h), its error
codes with NVML's own text, pynvml's error classes, and the structs NVML answers in.

The values are NVML's ABI: the stand-in's fidelity tests (tests/node_profiling/test_nvml_standin.py)
hold them to the real pynvml where it is installed.
"""

from __future__ import annotations

from dataclasses import dataclass

#: bytes in a MiB: NVML answers memory in bytes, the backend keeps MiB
MIB = 1024 * 1024

# -- NVML's constants (nvml.h; pynvml spells them the same) ------------------------------------

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_ALREADY_INITIALIZED = 5
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_INSUFFICIENT_POWER = 8
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_IRQ_ISSUE = 11
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_CORRUPTED_INFOROM = 14
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_OPERATING_SYSTEM = 17
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_MEMORY = 20
NVML_ERROR_UNKNOWN = 999

NVML_TEMPERATURE_GPU = 0

NVML_VOLATILE_ECC = 0
NVML_AGGREGATE_ECC = 1
NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1

NVML_CLOCK_GRAPHICS = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_CLOCK_VIDEO = 3

NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0
NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1

nvmlClocksEventReasonGpuIdle = 0x1
nvmlClocksEventReasonApplicationsClocksSetting = 0x2
nvmlClocksEventReasonSwPowerCap = 0x4
nvmlClocksEventReasonHwSlowdown = 0x8
nvmlClocksEventReasonSyncBoost = 0x10
nvmlClocksEventReasonSwThermalSlowdown = 0x20
nvmlClocksEventReasonHwThermalSlowdown = 0x40
nvmlClocksEventReasonHwPowerBrakeSlowdown = 0x80
nvmlClocksEventReasonDisplayClockSetting = 0x100
# the same bits under their pre-535 names
nvmlClocksThrottleReasonGpuIdle = nvmlClocksEventReasonGpuIdle
nvmlClocksThrottleReasonApplicationsClocksSetting = nvmlClocksEventReasonApplicationsClocksSetting
nvmlClocksThrottleReasonSwPowerCap = nvmlClocksEventReasonSwPowerCap
nvmlClocksThrottleReasonHwSlowdown = nvmlClocksEventReasonHwSlowdown
nvmlClocksThrottleReasonSyncBoost = nvmlClocksEventReasonSyncBoost
nvmlClocksThrottleReasonSwThermalSlowdown = nvmlClocksEventReasonSwThermalSlowdown
nvmlClocksThrottleReasonHwThermalSlowdown = nvmlClocksEventReasonHwThermalSlowdown
nvmlClocksThrottleReasonHwPowerBrakeSlowdown = nvmlClocksEventReasonHwPowerBrakeSlowdown
nvmlClocksThrottleReasonDisplayClockSetting = nvmlClocksEventReasonDisplayClockSetting

#: NVML's own text for each code (what nvmlErrorString says, and so what str(NVMLError) shows).
ERROR_TEXT: dict[int, str] = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
    NVML_ERROR_ALREADY_INITIALIZED: "Already Initialized",
    NVML_ERROR_NOT_FOUND: "Not Found",
    NVML_ERROR_INSUFFICIENT_SIZE: "Insufficient Size",
    NVML_ERROR_INSUFFICIENT_POWER: "Insufficient External Power",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_TIMEOUT: "Timeout",
    NVML_ERROR_IRQ_ISSUE: "Interrupt Request Issue",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
    NVML_ERROR_CORRUPTED_INFOROM: "Corrupted infoROM",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost",
    NVML_ERROR_RESET_REQUIRED: "GPU requires restart",
    NVML_ERROR_OPERATING_SYSTEM: "The operating system has blocked the request.",
    NVML_ERROR_LIB_RM_VERSION_MISMATCH: "RM has detected an NVML/RM version mismatch.",
    NVML_ERROR_MEMORY: "Insufficient Memory",
    NVML_ERROR_UNKNOWN: "Unknown Error",
}


class NVMLError(Exception):
    """An NVML return code other than success; `value` is the code, as in pynvml."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return ERROR_TEXT.get(self.value, f"NVML Error with code {self.value}")


class NVMLLibraryMismatchError(Exception):
    """nvidia-ml-py's error for an unversioned query whose versioned symbol the driver lacks.
    Not an NVMLError, and it carries no code: callers that catch only NVMLError miss it."""


def error_code(name: str) -> int:
    """`"NOT_SUPPORTED"` -> NVML_ERROR_NOT_SUPPORTED (a recording names errors so)."""
    code = globals().get(f"NVML_ERROR_{name}")
    if not isinstance(code, int):
        raise ValueError(f"no NVML error named {name!r}")
    return code


# -- the shapes NVML answers in --------------------------------------------------------------


@dataclass(frozen=True)
class DeviceHandle:
    """An opaque device handle (pynvml's c_nvmlDevice_t): deliberately not the index."""

    _index: int


@dataclass
class PciInfo:
    """nvmlPciInfo_t: `busId` is the 8-digit-domain form NVML uses ("00000000:18:00.0")."""

    busIdLegacy: str | bytes
    domain: int
    bus: int
    device: int
    pciDeviceId: int
    pciSubSystemId: int
    busId: str | bytes


@dataclass
class Memory:
    """c_nvmlMemory_t, in bytes."""

    total: int
    free: int
    used: int


@dataclass
class Utilization:
    """c_nvmlUtilization_t, in percent of the last sample period."""

    gpu: int
    memory: int


@dataclass
class ProcessInfo:
    """What pynvml returns per running process; `usedGpuMemory` is None where NVML cannot
    tell (NVML_VALUE_NOT_AVAILABLE), as pynvml maps it."""

    pid: int
    usedGpuMemory: int | None
    gpuInstanceId: int = 0xFFFFFFFF
    computeInstanceId: int = 0xFFFFFFFF
