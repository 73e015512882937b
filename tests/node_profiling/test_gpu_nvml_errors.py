"""The NVML backend (gpu/nvml.py) on the NVML stand-in when something fails: NVML errors (a library
that cannot start or count, a GPU lost or failing mid-read), the processes on a GPU, and the
callers that take the same library (the probe, open_backend, the profiler's backend request)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from tests.support import nvml_api as nv
from tests.support.nvml_api import MIB
from tests.support.nvml_standin import NvmlStandIn, Recording, backend_on
from pal_slurm.gpu.choose import open_backend, probe_nvidia
from pal_slurm.gpu.interface import BackendUnavailable, GpuError, GpuLostError, GpuQueryError, scan_inventory
from pal_slurm.gpu.nvml import NvmlBackend
from pal_slurm.profiler.service import BackendRequest, inventory_node, open_requested_backend


# -- NVML errors ------------------------------------------------------------------------------


def test_without_nvidia_ml_py_the_backend_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # `import pynvml` now fails as where it is not installed
    with pytest.raises(BackendUnavailable, match=r"pip install 'pal-slurm\[nvml\]'"):
        NvmlBackend(node="gpu-node")


@pytest.mark.parametrize(("code", "message"), [
    (nv.NVML_ERROR_LIBRARY_NOT_FOUND, "libnvidia-ml.so.1 not found: the NVIDIA driver is not installed"),
    (nv.NVML_ERROR_DRIVER_NOT_LOADED, "kernel driver is not loaded"),
    (nv.NVML_ERROR_LIB_RM_VERSION_MISMATCH, "NVML cannot start: "),
    (nv.NVML_ERROR_NO_PERMISSION, "NVML cannot start: "),
])
def test_nvml_that_cannot_start_is_one_clear_error(code: int, message: str) -> None:
    st = NvmlStandIn(Recording.load("h100-node")).fail("nvmlInit", code)
    with pytest.raises(BackendUnavailable) as exc:
        backend_on(st)
    assert message in str(exc.value)
    if message.startswith("NVML cannot start"):
        assert str(nv.NVMLError(code)) in str(exc.value)  # NVML's own words, not a code number
    assert st.calls == [("nvmlInit", None)] and st.initialised == 0


@pytest.mark.parametrize("shutdown_fails", [False, True])
def test_nvml_that_cannot_count_is_shut_down_again(shutdown_fails: bool) -> None:
    st = NvmlStandIn(Recording.load("h100-node")).fail("nvmlDeviceGetCount", nv.NVML_ERROR_UNKNOWN)
    if shutdown_fails:
        st.fail("nvmlShutdown", nv.NVML_ERROR_UNKNOWN)
    with pytest.raises(BackendUnavailable, match="NVML cannot count the GPUs: Unknown Error"):
        backend_on(st)
    assert st.count("nvmlShutdown") == 1
    if not shutdown_fails:
        assert st.initialised == 0


def test_a_gpu_lost_mid_inventory_is_a_fault_and_the_scan_goes_on(standin: NvmlStandIn) -> None:
    standin.lose(1, at="nvmlDeviceGetTotalEccErrors")
    b = backend_on(standin)
    scan = scan_inventory(b)
    assert [g.uuid for g in scan.gpus] == [standin.recording.gpus[0]["uuid"]]
    (fault,) = scan.faults
    assert fault.index == 1 and fault.lost and fault.uuid == standin.recording.gpus[1]["uuid"]
    assert "drain" in fault.error and "corrected ECC errors" in fault.error
    with pytest.raises(GpuLostError):  # and it stays lost
        b.sample(1)
    with pytest.raises(GpuLostError):
        b.processes(1)
    assert b.sample(0).sm_clock_mhz == standin.recording.gpus[0]["clocks_mhz"]["sm"]


@pytest.mark.parametrize(("query", "node"), [
    ("nvmlDeviceGetClockInfo", "v100-node"), ("nvmlDeviceGetPowerUsage", "v100-node"),
    ("nvmlDeviceGetCurrentClocksEventReasons", "h100-node"),
    ("nvmlDeviceGetCurrentClocksThrottleReasons", "v100-node"), ("nvmlDeviceGetUtilizationRates", "v100-node"),
])
def test_a_gpu_lost_while_sampled_raises_not_none(query: str, node: str) -> None:
    """A lost GPU is never 'no reading': the agent and the runner must see it go."""
    st = NvmlStandIn(Recording.load(node)).lose(1, at=query)
    with pytest.raises(GpuLostError) as exc:
        backend_on(st).sample(1)
    assert exc.value.index == 1


def test_a_gpu_lost_before_its_uuid_is_a_fault_without_one() -> None:
    st = NvmlStandIn(Recording.load("h100-node")).lose(0)
    scan = scan_inventory(backend_on(st))
    assert [g.index for g in scan.gpus] == [1]
    assert scan.faults[0].index == 0 and scan.faults[0].lost and scan.faults[0].uuid is None


def test_a_failing_query_is_an_error_of_that_gpu_not_a_missing_value() -> None:
    """Only NOT_SUPPORTED, NO_PERMISSION and FUNCTION_NOT_FOUND mean 'cannot tell'; any other
    error on a query is a failed read, and the next read tries again."""
    st = NvmlStandIn(Recording.load("h100-node")).fail("nvmlDeviceGetMemoryInfo", nv.NVML_ERROR_UNKNOWN,
                                                       gpu=0, times=1)
    b = backend_on(st)
    with pytest.raises(GpuQueryError) as exc:
        b.inventory(0)
    assert not isinstance(exc.value, GpuLostError)
    assert "memory info" in str(exc.value) and "Unknown Error" in str(exc.value)
    assert exc.value.uuid == st.recording.gpus[0]["uuid"]
    assert b.inventory(0).memory_mib == st.recording.gpus[0]["memory"]["total"] // MIB


def test_a_gpu_that_cannot_name_itself_is_a_fault() -> None:
    st = NvmlStandIn(Recording.load("h100-node")).update(1, name=None)
    scan = scan_inventory(backend_on(st))
    assert [g.index for g in scan.gpus] == [0] and not scan.faults[0].lost and "name" in scan.faults[0].error


def test_an_index_nvml_does_not_have_is_refused_before_asking() -> None:
    st = NvmlStandIn(Recording.load("h100-node"))
    b = backend_on(st)
    for index in (-1, 2):
        with pytest.raises(GpuQueryError, match="this node has 2"):
            b.sample(index)
    assert st.count("nvmlDeviceGetHandleByIndex") == 0


def test_close_shuts_nvml_down_once_and_never_raises() -> None:
    st = NvmlStandIn(Recording.load("h100-node"))
    backend_on(st).close()
    assert st.initialised == 0 and st.count("nvmlShutdown") == 1
    failing = NvmlStandIn(Recording.load("h100-node")).fail("nvmlShutdown", nv.NVML_ERROR_UNKNOWN)
    backend_on(failing).close()  # best effort: nothing raised
    assert failing.count("nvmlShutdown") == 1


# -- processes --------------------------------------------------------------------------------


@pytest.mark.parametrize("strings", ["str", "bytes"])
def test_processes_are_merged_and_named_where_nvml_can(strings: str) -> None:
    st = NvmlStandIn(Recording.load("h100-node"), strings=strings)  # type: ignore[arg-type]
    g = st.recording.gpus[1]
    procs = backend_on(st).processes(1)
    pids = sorted({p["pid"] for p in g["compute_processes"] + g["graphics_processes"]})
    assert [p.pid for p in procs] == pids
    assert len(pids) < len(g["compute_processes"]) + len(g["graphics_processes"]), "a process in both lists"
    memory = {p["pid"]: p["used_gpu_memory"] // MIB for p in g["compute_processes"]}
    assert {p.pid: p.used_memory_mib for p in procs} == memory
    assert {p.pid: p.name for p in procs} == {pid: st.recording.process_names.get(pid) for pid in pids}
    assert any(p.name is None for p in procs), "another container's process has no name"
    assert backend_on(st).processes(0) == []


def test_processes_on_a_driver_older_than_the_library_are_a_gpu_error() -> None:
    """nvidia-ml-py 12+ asks for the _v3 process queries, which a 470 driver lacks; pynvml then
    raises NVMLLibraryMismatchError, not an NVMLError. The profiler's busy check and the agent
    catch GpuError: anything else would stop them."""
    b = backend_on(NvmlStandIn(Recording.load("v100-node")))
    with pytest.raises(GpuError) as exc:
        b.processes(1)
    assert not isinstance(exc.value, GpuLostError) and "nvidia-ml-py" in str(exc.value)
    assert b.sample(1).power_w is not None  # the rest of the GPU still reads


# -- callers that take the same library --------------------------------------------------------


def test_probe_and_open_backend_take_the_library(tmp_path: Path) -> None:
    st = NvmlStandIn(Recording.load("v100-node"))
    probe = probe_nvidia(tmp_path, nvml_loader=st.module)
    assert probe.nvml_gpus == 2 and probe.has_gpus and st.initialised == 0
    backend = open_requested_backend(BackendRequest(backend="auto", node="gpu-node"), probe=probe,
                                     nvml_module=st.module())
    outcome = inventory_node(backend, None)
    assert outcome.scan.backend == "nvml" and [g.uuid for g in outcome.scan.gpus] == \
        [g["uuid"] for g in st.recording.gpus]
    backend.close()

    broken = NvmlStandIn(Recording.load("v100-node")).fail("nvmlInit", nv.NVML_ERROR_DRIVER_NOT_LOADED)
    probe = probe_nvidia(tmp_path, nvml_loader=broken.module)
    assert probe.nvml_gpus is None and "driver is not loaded" in (probe.nvml_error or "")


def test_open_backend_refuses_nvml_without_gpus() -> None:
    st = NvmlStandIn(dataclasses.replace(Recording.load("h100-node"), gpus=()))
    with pytest.raises(BackendUnavailable, match="sees no GPU"):
        open_backend("nvml", node="gpu-node", nvml_module=st.module())
    assert st.initialised == 0
