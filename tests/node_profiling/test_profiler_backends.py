"""The GPU interface: the same tests for every backend, plus backend choice and NVML error handling.

The interface tests run against the simulated backend always and against NVML when this
machine has a GPU (skipped with the reason otherwise). The NVML adapter's translation of
NVML's errors is tested on machines without a GPU through a stand-in for the NVML
library with the same functions (the only fake here: for hardware we lack); it raises
the real pynvml error classes when nvidia-ml-py is installed.
"""

from __future__ import annotations

import math
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pal_slurm.gpu.interface import (
    BackendUnavailable,
    GpuBackend,
    GpuInventory,
    GpuLostError,
    GpuQueryError,
    GpuSample,
    scan_inventory,
)
from pal_slurm.gpu.nvml import NvmlBackend, cuda_version_text
from pal_slurm.gpu.choose import (
    BackendRefused,
    NvidiaProbe,
    SimOptions,
    choose_backend,
    open_backend,
    parse_indices,
    probe_nvidia,
)
from pal_slurm.gpu.simulated import SimBackend, busy_process
from pal_slurm.gpu.sim_physics import CLOCKS_EVENT_GPU_IDLE
from pal_slurm.gpu.simulated_fleet import make_fleet

try:
    import pynvml  # type: ignore[import-not-found]
except ImportError:
    pynvml = None


def _real_nvml_count() -> tuple[int, str]:
    if pynvml is None:
        return 0, "nvidia-ml-py is not installed"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return 0, f"NVML cannot start here ({exc}): no GPU on this machine"
    try:
        return int(pynvml.nvmlDeviceGetCount()), "NVML sees no GPU"
    finally:
        pynvml.nvmlShutdown()


NVML_GPUS, NVML_REASON = _real_nvml_count()


@pytest.fixture(params=["sim", pytest.param("nvml", marks=pytest.mark.skipif(NVML_GPUS == 0, reason=NVML_REASON))])
def backend(request: pytest.FixtureRequest) -> Any:
    if request.param == "sim":
        b: Any = SimBackend(make_fleet(nodes=2, gpus_per_node=4, seed=3), ["gpu002"])
    else:
        b = NvmlBackend(node="test-node")
    yield b
    b.close()


# -- the interface, for every backend ---------------------------------------------------------


def test_is_a_gpu_backend(backend: Any) -> None:
    assert isinstance(backend, GpuBackend)
    assert backend.name in ("sim", "nvml") and len(backend.nodes()) >= 1
    assert backend.device_count() >= 1


def test_inventory_identity_and_health(backend: Any) -> None:
    invs = [backend.inventory(i) for i in range(backend.device_count())]
    assert len({g.uuid for g in invs}) == len(invs), "UUIDs are unique"
    for i, g in enumerate(invs):
        assert isinstance(g, GpuInventory) and g.index == i
        assert g.uuid.startswith(("GPU-", "MIG-")) and g.name and g.node in backend.nodes()
        assert g.memory_mib is None or g.memory_mib > 1024
        assert g.power_limit_w is None or 20 < g.power_limit_w < 2000
        assert g.minor_number is None or g.minor_number >= 0
        assert g.pci_bus_id is None or ":" in g.pci_bus_id
        for counter in (g.ecc_corrected, g.ecc_uncorrected, g.retired_pages):
            assert counter is None or counter >= 0
        assert g.driver_version and g.cuda_version and "." in g.cuda_version
        assert g.gpu_info().uuid == g.uuid and g.gpu_info().model == g.name
        assert backend.visible_device(i)  # what CUDA_VISIBLE_DEVICES gets


def test_sample_is_plausible(backend: Any) -> None:
    s = backend.sample(0)
    assert isinstance(s, GpuSample) and s.timestamp > 0
    assert s.sm_clock_mhz is None or 0 < s.sm_clock_mhz < 4000
    assert s.mem_clock_mhz is None or 0 < s.mem_clock_mhz < 20000
    assert s.power_w is None or 0 < s.power_w < 2000
    assert s.temperature_c is None or 0 < s.temperature_c < 120
    assert s.throttle_reasons is None or s.throttle_reasons >= 0
    for u in (s.utilization_gpu, s.utilization_memory):
        assert u is None or 0 <= u <= 100


def test_processes_and_bad_index(backend: Any) -> None:
    assert isinstance(backend.processes(0), list)
    n = backend.device_count()
    with pytest.raises(GpuQueryError, match=f"GPU {n}"):
        backend.inventory(n)


def test_sampling_from_threads(backend: Any) -> None:
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(20):
                backend.sample(0)
        except BaseException as exc:  # noqa: BLE001 - collected and asserted
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


# -- the simulated backend's own behaviour ---------------------------------------------------


def test_sim_slice_busy_and_lost() -> None:
    fleet = make_fleet(nodes=3, gpus_per_node=2, seed=1)
    b = SimBackend(fleet, ["gpu002"], busy=[1], lost=[0], clock=lambda: 1_700_000_000.0)
    assert b.nodes() == ("gpu002",) and b.device_count() == 2
    assert b.inventory(1).uuid == fleet.gpus[3].uuid and b.inventory(1).minor_number == 1
    assert b.processes(1) == [busy_process(1)]
    with pytest.raises(GpuLostError, match="fell off the bus"):
        b.inventory(0)
    scan = scan_inventory(b)
    assert [g.index for g in scan.gpus] == [1] and scan.faults[0].index == 0 and scan.faults[0].lost
    busy = b.sample(1)
    assert busy.utilization_gpu == 80 and busy.sm_clock_mhz > 1000  # under load
    idle = SimBackend(fleet, clock=lambda: 1_700_000_000.0).sample(0)
    assert idle.throttle_reasons == CLOCKS_EVENT_GPU_IDLE and idle.utilization_gpu == 0
    with pytest.raises(Exception, match="no node gpu009"):
        SimBackend(fleet, ["gpu009"])


def test_sim_telemetry_follows_physics() -> None:
    """A derated GPU (low power limit) runs a lower clock under load than a healthy one."""
    fleet = make_fleet(nodes=16, gpus_per_node=4, seed=1, bad_fraction=0.1)
    derated = next(g for g in fleet.gpus if g.defect == "low_power_limit")
    healthy = next(g for g in fleet.gpus if g.defect is None)
    b = SimBackend(fleet, load=lambda i, t: 1.0, clock=lambda: 1_700_000_000.0)
    assert b.sample(derated.index).sm_clock_mhz < b.sample(healthy.index).sm_clock_mhz - 100
    assert b.inventory(derated.index).power_limit_w < 200


# -- backend choice ----------------------------------------------------------------------------

NO_GPU = NvidiaProbe(device_files=(), nvml_gpus=None, nvml_error="libnvidia-ml.so.1 not found")
GPU_NODE = NvidiaProbe(device_files=("/dev/nvidia0", "/dev/nvidia1"), nvml_gpus=2)
DEV_ONLY = NvidiaProbe(device_files=("/dev/nvidia0",), nvml_gpus=None, nvml_error="driver not loaded")


def test_choose_backend() -> None:
    assert choose_backend("auto", GPU_NODE) == "nvml"
    assert choose_backend("auto", DEV_ONLY) == "nvml"  # NVML's own error will explain
    with pytest.raises(BackendRefused, match="pass --backend sim"):
        choose_backend("auto", NO_GPU)
    assert choose_backend("sim", NO_GPU) == "sim"
    with pytest.raises(BackendRefused, match="has NVIDIA GPUs.*--force-sim"):
        choose_backend("sim", GPU_NODE)
    with pytest.raises(BackendRefused, match="--force-sim"):
        choose_backend("sim", DEV_ONLY)
    assert choose_backend("sim", GPU_NODE, force_sim=True) == "sim"
    assert choose_backend("nvml", NO_GPU) == "nvml"


def test_probe_reads_device_files(tmp_path: Path) -> None:
    for name in ("nvidia10", "nvidia2", "nvidiactl", "nvidia-uvm", "null"):
        (tmp_path / name).touch()
    probe = probe_nvidia(tmp_path)
    assert probe.device_files == (str(tmp_path / "nvidia2"), str(tmp_path / "nvidia10"))
    assert probe.has_gpus
    if NVML_GPUS == 0:
        assert probe.nvml_gpus is None and probe.nvml_error
        empty = probe_nvidia(tmp_path / "nowhere")
        assert not empty.has_gpus and "pass --backend sim" in str(pytest.raises(
            BackendRefused, choose_backend, "auto", empty).value)


@pytest.mark.skipif(pynvml is None or NVML_GPUS > 0, reason="needs nvidia-ml-py on a machine without a GPU")
def test_real_nvml_without_gpu_is_one_clear_error() -> None:
    with pytest.raises(BackendUnavailable, match="libnvidia-ml.so.1 not found|driver is not loaded"):
        NvmlBackend(node="x")


def test_open_backend_sim_and_indices() -> None:
    b = open_backend("sim", node="ignored", sim=SimOptions(nodes=2, gpus_per_node=2, seed=5, busy=(3,)))
    assert b.device_count() == 4 and b.nodes() == ("gpu001", "gpu002") and b.processes(3)
    with pytest.raises(Exception, match="out of range"):
        open_backend("sim", node="x", sim=SimOptions(nodes=1, gpus_per_node=2, lost=(2,)))
    assert parse_indices("0, 2,2") == (0, 2) and parse_indices(None) is None
    with pytest.raises(Exception, match="not a GPU index"):
        parse_indices("0,x")


# -- the NVML adapter on a stand-in library ---------------------------------------------------


class _NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


def _err(code: int) -> Exception:
    if pynvml is not None:
        return pynvml.NVMLError(code)  # the real library's classes (NVMLError_GpuIsLost, ...)
    return _NVMLError(code)


class StandInNvml:
    """NVML's functions for two GPUs: GPU 0 healthy but without ECC/retired pages (like an
    Ampere+ board with ECC off), GPU 1 fallen off the bus after telling its UUID."""

    NVMLError = pynvml.NVMLError if pynvml is not None else _NVMLError

    def __init__(self, lost_at_start: bool = False, init_error: int | None = None) -> None:
        self.lost_at_start = lost_at_start
        self.init_error = init_error
        self.shutdowns = 0

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise _err(self.init_error)

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlSystemGetDriverVersion(self) -> bytes:
        return b"550.54.15"

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return 12040

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        if i == 1 and self.lost_at_start:
            raise _err(15)
        return i

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return f"GPU-0000000{h}-aaaa-bbbb-cccc-dddddddddddd"

    def _lost(self, h: int) -> None:
        if h == 1:
            raise _err(15)  # NVML_ERROR_GPU_IS_LOST

    def nvmlDeviceGetName(self, h: int) -> str:
        self._lost(h)
        return "NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetPciInfo(self, h: int) -> Any:
        return SimpleNamespace(busId=b"00000000:18:00.0")

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        return SimpleNamespace(total=85520809984)

    def nvmlDeviceGetEnforcedPowerLimit(self, h: int) -> int:
        return 700000

    def nvmlDeviceGetPowerManagementLimit(self, h: int) -> int:
        return 700000

    def nvmlDeviceGetSerial(self, h: int) -> str:
        return "1652823012345"

    def nvmlDeviceGetVbiosVersion(self, h: int) -> str:
        return "96.00.99.00.01"

    def nvmlDeviceGetMinorNumber(self, h: int) -> int:
        return 4 + h

    def nvmlDeviceGetTotalEccErrors(self, h: int, kind: int, counter: int) -> int:
        raise _err(3)  # NOT_SUPPORTED: ECC off

    def nvmlDeviceGetRetiredPages(self, h: int, cause: int) -> list[int]:
        raise _err(3)  # NOT_SUPPORTED: Hopper remaps rows

    def nvmlDeviceGetClockInfo(self, h: int, kind: int) -> int:
        self._lost(h)
        return {1: 1980, 2: 2619}[kind]

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        self._lost(h)
        return 612345

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        return 61

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: int) -> int:
        return 0x4

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:
        raise _err(4)  # NO_PERMISSION: answers None, not an error

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[Any]:
        return [SimpleNamespace(pid=4242, usedGpuMemory=2 * 1024**3)] if h == 0 else []

    def nvmlDeviceGetGraphicsRunningProcesses(self, h: int) -> list[Any]:
        return [SimpleNamespace(pid=4242, usedGpuMemory=None)] if h == 0 else []

    def nvmlSystemGetProcessName(self, pid: int) -> str:
        raise _err(6)  # NOT_FOUND: another container's process


def test_nvml_adapter_unsupported_is_none_and_lost_gpu_is_reported() -> None:
    nv = StandInNvml()
    b = NvmlBackend(node="n1", nvml=nv)
    g = b.inventory(0)
    assert (g.name, g.minor_number, g.pci_bus_id, g.memory_mib) == ("NVIDIA H100 80GB HBM3", 4, "00000000:18:00.0",
                                                                     81559)
    assert g.power_limit_w == 700.0 and g.driver_version == "550.54.15" and g.cuda_version == "12.4"
    assert g.ecc_corrected is None and g.ecc_uncorrected is None and g.retired_pages is None
    s = b.sample(0)
    assert (s.sm_clock_mhz, s.mem_clock_mhz, s.power_w, s.throttle_reasons) == (1980.0, 2619.0, 612.345, 4)
    assert s.utilization_gpu is None  # no permission -> None, not a failure
    assert b.processes(0)[0].pid == 4242 and b.processes(0)[0].used_memory_mib == 2048
    assert len(b.processes(0)) == 1 and b.processes(0)[0].name is None
    with pytest.raises(GpuLostError) as lost:
        b.inventory(1)
    assert lost.value.uuid == "GPU-00000001-aaaa-bbbb-cccc-dddddddddddd"
    with pytest.raises(GpuLostError):
        b.sample(1)
    scan = scan_inventory(b)
    assert [x.index for x in scan.gpus] == [0]
    assert scan.faults[0].lost and scan.faults[0].uuid.startswith("GPU-00000001") and "drain" in scan.faults[0].error
    b.close()
    assert nv.shutdowns == 1


def test_nvml_adapter_old_driver_throttle_reasons() -> None:
    """A driver before 535 lacks nvmlDeviceGetCurrentClocksEventReasons: the older call answers."""

    class OldDriver(StandInNvml):
        def nvmlDeviceGetCurrentClocksEventReasons(self, h: int) -> int:
            raise _err(13)  # NVML_ERROR_FUNCTION_NOT_FOUND

        def nvmlDeviceGetCurrentClocksThrottleReasons(self, h: int) -> int:
            return 0x20

    b = NvmlBackend(node="n1", nvml=OldDriver())
    assert b.sample(0).throttle_reasons == 0x20 and b.sample(0).throttle_reasons == 0x20


def test_nvml_adapter_gpu_lost_before_uuid() -> None:
    b = NvmlBackend(node="n1", nvml=StandInNvml(lost_at_start=True))
    scan = scan_inventory(b)
    assert len(scan.gpus) == 1 and scan.faults[0].uuid is None and scan.faults[0].lost


@pytest.mark.parametrize(("code", "message"), [(12, "libnvidia-ml.so.1 not found"), (9, "driver is not loaded"),
                                               (999, "NVML cannot start")])
def test_nvml_init_errors_are_one_line(code: int, message: str) -> None:
    with pytest.raises(BackendUnavailable, match=message):
        NvmlBackend(node="n1", nvml=StandInNvml(init_error=code))


def test_cuda_version_text() -> None:
    assert cuda_version_text(12040) == "12.4" and cuda_version_text(11080) == "11.8"
    assert math.isclose(float(cuda_version_text(12000)), 12.0)
