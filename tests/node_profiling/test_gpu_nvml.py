"""The NVML backend (gpu/nvml.py) on a stand-in for the NVML library: every path, without a GPU.

`tests/support/nvml_standin.py` plays nvidia-ml-py's `pynvml` module, answering from recordings of an
H100 and a V100 node (tests/data/nvml) and raising NVML's errors where a test injects them;
`NvmlBackend` is given it as its `nvml` module, so the backend's own code runs as on a GPU
node. Expectations are computed from the recordings by the rules the backend keeps (bytes to
MiB, milliwatts to watts, lifetime ECC counts, pages retired for either cause, the enforced
power limit first, the device minor number as NVML tells it), so a change in how the backend
reads NVML fails here. The last tests hold the stand-in to the real pynvml where it is
installed, so that it cannot drift from the library it stands in for.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support import nvml_standin as nv
from tests.support.nvml_standin import NvmlStandIn, Recording
from pal_slurm.gpu import nvml as nvml_backend
from pal_slurm.gpu.choose import open_backend, probe_nvidia
from pal_slurm.gpu.interface import (
    BackendUnavailable,
    GpuError,
    GpuInventory,
    GpuLostError,
    GpuQueryError,
    GpuSample,
    scan_inventory,
)
from pal_slurm.gpu.nvml import NvmlBackend
from pal_slurm.profiler.service import BackendRequest, inventory_node, open_requested_backend
from pal_slurm.profiler.telemetry import reason_names

try:
    import pynvml  # type: ignore[import-not-found]
except ImportError:
    pynvml = None

NODES = ("h100-node", "v100-node")
MIB = 1024 * 1024


def _open(st: NvmlStandIn) -> NvmlBackend:
    return NvmlBackend(node="gpu-node", nvml=st.module())


@pytest.fixture(params=[(n, s) for n in NODES for s in ("str", "bytes")], ids=lambda p: f"{p[0]}-{p[1]}")
def standin(request: pytest.FixtureRequest) -> NvmlStandIn:
    """Each recorded node, with strings as current nvidia-ml-py (str) and older releases (bytes) return them."""
    node, strings = request.param
    return NvmlStandIn(Recording.load(node), strings=strings)


def _cuda_text(version: int) -> str:
    major, rest = divmod(version, 1000)
    return f"{major}.{rest // 10}"


def _expected_inventory(rec: Recording, index: int) -> GpuInventory:
    """What the backend must make of one recorded GPU."""
    g = rec.gpus[index]
    pages = g["retired_pages"]
    return GpuInventory(
        index=index, uuid=g["uuid"], node="gpu-node", name=g["name"], nvml_index=index,
        minor_number=g["minor_number"], pci_bus_id=g["pci"]["busId"], serial=g["serial"],
        memory_mib=g["memory"]["total"] // MIB, power_limit_w=g["enforced_power_limit_mw"] / 1000,
        driver_version=rec.driver_version, cuda_version=_cuda_text(rec.cuda_driver_version),
        vbios_version=g["vbios_version"],
        ecc_corrected=g["ecc_errors"]["aggregate"]["corrected"],
        ecc_uncorrected=g["ecc_errors"]["aggregate"]["uncorrected"],
        retired_pages=None if pages is None else len(pages["multiple_single_bit"]) + len(pages["double_bit"]),
    )


def _expected_sample(g: dict[str, Any], timestamp: float) -> GpuSample:
    return GpuSample(timestamp=timestamp, sm_clock_mhz=g["clocks_mhz"]["sm"], mem_clock_mhz=g["clocks_mhz"]["mem"],
                     power_w=g["power_usage_mw"] / 1000, temperature_c=g["temperature_gpu_c"],
                     throttle_reasons=g["clocks_event_reasons"], utilization_gpu=g["utilization"]["gpu"],
                     utilization_memory=g["utilization"]["memory"])


# -- the recordings can tell the rules apart ----------------------------------------------------


def test_recordings_tell_the_rules_apart() -> None:
    """Each rule the expectations encode is visible in some recorded GPU; otherwise a backend
    that broke it (the index for the minor number, volatile ECC counts, the limit set instead of
    the one enforced, 0 for 'cannot tell') would pass."""
    gpus = [(i, g) for name in NODES for i, g in enumerate(Recording.load(name).gpus)]
    assert any(g["minor_number"] != i for i, g in gpus)
    assert any(g["ecc_errors"]["volatile"] != g["ecc_errors"]["aggregate"] for _, g in gpus)
    assert any(g["enforced_power_limit_mw"] != g["power_management_limit_mw"] for _, g in gpus)
    assert any(g["retired_pages"] is None for _, g in gpus)
    assert any(g["retired_pages"] and g["retired_pages"]["double_bit"] for _, g in gpus)
    assert any(g["clocks_mhz"]["sm"] != g["clocks_mhz"]["mem"] for _, g in gpus)


# -- inventory --------------------------------------------------------------------------------


def test_inventory_reads_what_nvml_reports(standin: NvmlStandIn) -> None:
    b = _open(standin)
    for index in range(len(standin.recording.gpus)):
        assert b.inventory(index) == _expected_inventory(standin.recording, index)
    assert b.visible_device(1) == standin.recording.gpus[1]["uuid"]  # what CUDA_VISIBLE_DEVICES gets
    b.close()
    assert standin.initialised == 0


def test_inside_a_slurm_job_the_slot_is_the_minor_number() -> None:
    """NVML renumbers the GPUs a job's cgroup shows from 0; gres.conf's slot is /dev/nvidiaN."""
    st = NvmlStandIn(Recording.load("v100-node"))
    scan = scan_inventory(_open(st))
    assert [(g.nvml_index, g.minor_number) for g in scan.gpus] == [(0, 2), (1, 3)]
    assert [g.gpu_info().minor_number for g in scan.gpus] == [2, 3]


def test_ecc_and_retired_pages_are_the_lifetime_counts() -> None:
    st = NvmlStandIn(Recording.load("v100-node"))
    bad = _open(st).inventory(1)
    rec = st.recording.gpus[1]
    lifetime, since_load = rec["ecc_errors"]["aggregate"], rec["ecc_errors"]["volatile"]
    assert (bad.ecc_corrected, bad.ecc_uncorrected) == (lifetime["corrected"], lifetime["uncorrected"])
    assert (bad.ecc_corrected, bad.ecc_uncorrected) != (since_load["corrected"], since_load["uncorrected"])
    pages = rec["retired_pages"]
    assert pages["multiple_single_bit"] and pages["double_bit"], "the recording retired pages for both causes"
    assert bad.retired_pages == len(pages["multiple_single_bit"]) + len(pages["double_bit"])


def test_retired_pages_unsupported_is_unknown_not_zero() -> None:
    """Hopper remaps rows and cannot retire pages: None, which the classifier's health checks
    read as 'cannot tell', never as a clean 0."""
    h100 = _open(NvmlStandIn(Recording.load("h100-node"))).inventory(0)
    v100 = _open(NvmlStandIn(Recording.load("v100-node"))).inventory(0)
    assert h100.retired_pages is None and v100.retired_pages == 0


def test_the_enforced_power_limit_comes_first() -> None:
    st = NvmlStandIn(Recording.load("h100-node"))
    rec = st.recording.gpus[1]
    assert _open(st).inventory(1).power_limit_w == rec["enforced_power_limit_mw"] / 1000
    fallback = NvmlStandIn(Recording.load("h100-node")).fail("nvmlDeviceGetEnforcedPowerLimit",
                                                           nv.NVML_ERROR_NOT_SUPPORTED)
    assert _open(fallback).inventory(1).power_limit_w == rec["power_management_limit_mw"] / 1000
    old_library = NvmlStandIn(Recording.load("h100-node"), module_lacks={"nvmlDeviceGetEnforcedPowerLimit"})
    assert _open(old_library).inventory(1).power_limit_w == rec["power_management_limit_mw"] / 1000


def test_bytes_and_str_libraries_give_the_same_inventory() -> None:
    """nvidia-ml-py before 11.515 returns bytes: every text field must still come out as text."""
    for node in NODES:
        as_str = scan_inventory(_open(NvmlStandIn(Recording.load(node), strings="str")))
        as_bytes = scan_inventory(_open(NvmlStandIn(Recording.load(node), strings="bytes")))
        assert as_bytes == as_str
        for g in as_bytes.gpus:
            for value in (g.uuid, g.name, g.pci_bus_id, g.serial, g.driver_version, g.vbios_version):
                assert isinstance(value, str) and not value.startswith("b'")


# -- telemetry and throttle reasons -----------------------------------------------------------


def test_sample_reads_the_telemetry(standin: NvmlStandIn) -> None:
    b = _open(standin)
    for index, g in enumerate(standin.recording.gpus):
        before = time.time()
        s = b.sample(index)
        assert before <= s.timestamp <= time.time()
        assert s == _expected_sample(g, s.timestamp)


def test_every_sample_is_read_fresh() -> None:
    st = NvmlStandIn(Recording.load("h100-node"))
    b = _open(st)
    first = b.sample(1)
    st.update(1, clocks_mhz={"graphics": 1980, "sm": 1980, "mem": 2619, "video": 1755}, clocks_event_reasons=0,
              power_usage_mw=512000)
    second = b.sample(1)
    assert (second.sm_clock_mhz, second.throttle_reasons, second.power_w) == (1980, 0, 512.0)
    assert first.sm_clock_mhz != second.sm_clock_mhz


def test_the_clocks_are_the_sm_and_memory_domains() -> None:
    """Graphics and SM clocks read alike on these boards, so the recordings cannot tell which one
    the backend asks for: set them apart."""
    st = NvmlStandIn(Recording.load("v100-node")).update(1, clocks_mhz={"graphics": 1, "sm": 2, "mem": 3, "video": 4})
    s = _open(st).sample(1)
    assert (s.sm_clock_mhz, s.mem_clock_mhz) == (2, 3)


def _snake(nvml_suffix: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", nvml_suffix).lower()


def test_reason_names_follow_nvmls_bits() -> None:
    """Each NVML clocks-event reason bit decodes to its NVML name (HwSlowdown -> hw_slowdown)."""
    bits = {name.removeprefix("nvmlClocksEventReason"): value for name, value in vars(nv).items()
            if name.startswith("nvmlClocksEventReason")}
    assert len(bits) >= 9
    for suffix, bit in bits.items():
        assert reason_names(bit) == [_snake(suffix)], suffix
    everything = 0
    for bit in bits.values():
        everything |= bit
    assert len(reason_names(everything)) == len(bits)
    assert reason_names(0) == [] and reason_names(None) == []


def test_a_throttled_gpu_names_its_reasons(standin: NvmlStandIn) -> None:
    """The loaded GPU of each node: power cap and heat, and on the H100 a hardware slowdown."""
    mask = _open(standin).sample(1).throttle_reasons
    assert mask is not None
    names = reason_names(mask)
    expected = [_snake(n.removeprefix("nvmlClocksEventReason")) for n, bit in vars(nv).items()
                if n.startswith("nvmlClocksEventReason") and mask & bit]
    assert sorted(names) == sorted(expected) and "gpu_idle" not in names
    assert "sw_power_cap" in names
    if standin.recording.gpus[1]["name"].startswith("NVIDIA H100"):
        assert {"hw_slowdown", "hw_thermal_slowdown"} <= set(names)
    else:
        assert "sw_thermal_slowdown" in names


def test_a_driver_before_535_answers_the_older_throttle_call_once_asked() -> None:
    """The V100 node's driver lacks the clocks-event-reasons query: NVML says FUNCTION_NOT_FOUND
    once, the backend switches to the older call for good and reads the same mask."""
    st = NvmlStandIn(Recording.load("v100-node"))
    b = _open(st)
    masks = [b.sample(i % 2).throttle_reasons for i in range(4)]
    assert masks == [g["clocks_event_reasons"] for g in st.recording.gpus] * 2
    assert st.count("nvmlDeviceGetCurrentClocksEventReasons") == 1
    assert st.count("nvmlDeviceGetCurrentClocksThrottleReasons") == 4


def test_an_older_library_without_the_event_call_uses_the_throttle_call() -> None:
    st = NvmlStandIn(Recording.load("h100-node"), module_lacks={"nvmlDeviceGetCurrentClocksEventReasons"})
    assert _open(st).sample(1).throttle_reasons == st.recording.gpus[1]["clocks_event_reasons"]
    assert st.count("nvmlDeviceGetCurrentClocksThrottleReasons") == 1


# -- what a GPU cannot tell is None, and only that field ----------------------------------------

#: (NVML query, the record fields it feeds, inventory or sample, the node whose GPU 1 answers it)
OPTIONAL = [
    ("nvmlDeviceGetPciInfo", ("pci_bus_id",), "inventory", "v100-node"),
    ("nvmlDeviceGetMemoryInfo", ("memory_mib",), "inventory", "v100-node"),
    ("nvmlDeviceGetSerial", ("serial",), "inventory", "v100-node"),
    ("nvmlDeviceGetVbiosVersion", ("vbios_version",), "inventory", "v100-node"),
    ("nvmlDeviceGetMinorNumber", ("minor_number",), "inventory", "v100-node"),
    ("nvmlDeviceGetTotalEccErrors", ("ecc_corrected", "ecc_uncorrected"), "inventory", "v100-node"),
    ("nvmlDeviceGetRetiredPages", ("retired_pages",), "inventory", "v100-node"),
    ("nvmlDeviceGetClockInfo", ("sm_clock_mhz", "mem_clock_mhz"), "sample", "v100-node"),
    ("nvmlDeviceGetPowerUsage", ("power_w",), "sample", "v100-node"),
    ("nvmlDeviceGetTemperature", ("temperature_c",), "sample", "v100-node"),
    ("nvmlDeviceGetCurrentClocksEventReasons", ("throttle_reasons",), "sample", "h100-node"),
    ("nvmlDeviceGetCurrentClocksThrottleReasons", ("throttle_reasons",), "sample", "v100-node"),  # driver < 535
    ("nvmlDeviceGetUtilizationRates", ("utilization_gpu", "utilization_memory"), "sample", "v100-node"),
]


@pytest.mark.parametrize("code", [nv.NVML_ERROR_NOT_SUPPORTED, nv.NVML_ERROR_NO_PERMISSION],
                         ids=["not-supported", "no-permission"])
@pytest.mark.parametrize(("query", "fields", "read", "node"), OPTIONAL, ids=[row[0] for row in OPTIONAL])
def test_an_unanswered_query_is_none_and_nothing_else_changes(query: str, fields: tuple[str, ...], read: str,
                                                              node: str, code: int) -> None:
    full = getattr(_open(NvmlStandIn(Recording.load(node))), read)(1)
    st = NvmlStandIn(Recording.load(node)).fail(query, code, gpu=1)
    b = _open(st)
    got = getattr(b, read)(1)
    if read == "sample":
        got = dataclasses.replace(got, timestamp=full.timestamp)
    assert all(getattr(full, f) is not None for f in fields)
    assert got == dataclasses.replace(full, **dict.fromkeys(fields))
    assert getattr(b, read)(0) is not None  # the other GPU is untouched


def test_both_power_limits_unanswered_is_none() -> None:
    st = NvmlStandIn(Recording.load("h100-node"))
    st.fail("nvmlDeviceGetEnforcedPowerLimit", nv.NVML_ERROR_NOT_SUPPORTED)
    st.fail("nvmlDeviceGetPowerManagementLimit", nv.NVML_ERROR_NOT_SUPPORTED)
    assert _open(st).inventory(0).power_limit_w is None


def test_a_board_that_answers_nothing_optional_still_inventories() -> None:
    """A board (or vGPU) that supports none of the optional queries: its identity, and None."""
    optional = ("pci", "minor_number", "serial", "vbios_version", "memory", "power_management_limit_mw",
                "enforced_power_limit_mw", "ecc_errors", "retired_pages")
    st = NvmlStandIn(Recording.load("h100-node")).update(0, **dict.fromkeys(optional))
    g = _open(st).inventory(0)
    assert (g.uuid, g.name) == (st.recording.gpus[0]["uuid"], st.recording.gpus[0]["name"])
    assert g.driver_version == st.recording.driver_version
    assert all(getattr(g, f) is None for f in ("pci_bus_id", "minor_number", "serial", "vbios_version", "memory_mib",
                                               "power_limit_w", "ecc_corrected", "ecc_uncorrected", "retired_pages"))


def test_a_blank_serial_is_none() -> None:
    st = NvmlStandIn(Recording.load("h100-node"), strings="bytes").update(0, serial="   ")
    assert _open(st).inventory(0).serial is None


@pytest.mark.parametrize("code", [nv.NVML_ERROR_NOT_SUPPORTED, nv.NVML_ERROR_UNKNOWN])
def test_driver_and_cuda_versions_never_stop_the_backend(code: int) -> None:
    st = NvmlStandIn(Recording.load("h100-node"))
    st.fail("nvmlSystemGetDriverVersion", code).fail("nvmlSystemGetCudaDriverVersion", code)
    g = _open(st).inventory(0)
    assert g.driver_version is None and g.cuda_version is None and g.uuid == st.recording.gpus[0]["uuid"]


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
        _open(st)
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
        _open(st)
    assert st.count("nvmlShutdown") == 1
    if not shutdown_fails:
        assert st.initialised == 0


def test_a_gpu_lost_mid_inventory_is_a_fault_and_the_scan_goes_on(standin: NvmlStandIn) -> None:
    standin.lose(1, at="nvmlDeviceGetTotalEccErrors")
    b = _open(standin)
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
        _open(st).sample(1)
    assert exc.value.index == 1


def test_a_gpu_lost_before_its_uuid_is_a_fault_without_one() -> None:
    st = NvmlStandIn(Recording.load("h100-node")).lose(0)
    scan = scan_inventory(_open(st))
    assert [g.index for g in scan.gpus] == [1]
    assert scan.faults[0].index == 0 and scan.faults[0].lost and scan.faults[0].uuid is None


def test_a_failing_query_is_an_error_of_that_gpu_not_a_missing_value() -> None:
    """Only NOT_SUPPORTED, NO_PERMISSION and FUNCTION_NOT_FOUND mean 'cannot tell'; any other
    error on a query is a failed read, and the next read tries again."""
    st = NvmlStandIn(Recording.load("h100-node")).fail("nvmlDeviceGetMemoryInfo", nv.NVML_ERROR_UNKNOWN,
                                                       gpu=0, times=1)
    b = _open(st)
    with pytest.raises(GpuQueryError) as exc:
        b.inventory(0)
    assert not isinstance(exc.value, GpuLostError)
    assert "memory info" in str(exc.value) and "Unknown Error" in str(exc.value)
    assert exc.value.uuid == st.recording.gpus[0]["uuid"]
    assert b.inventory(0).memory_mib == st.recording.gpus[0]["memory"]["total"] // MIB


def test_a_gpu_that_cannot_name_itself_is_a_fault() -> None:
    st = NvmlStandIn(Recording.load("h100-node")).update(1, name=None)
    scan = scan_inventory(_open(st))
    assert [g.index for g in scan.gpus] == [0] and not scan.faults[0].lost and "name" in scan.faults[0].error


def test_an_index_nvml_does_not_have_is_refused_before_asking() -> None:
    st = NvmlStandIn(Recording.load("h100-node"))
    b = _open(st)
    for index in (-1, 2):
        with pytest.raises(GpuQueryError, match="this node has 2"):
            b.sample(index)
    assert st.count("nvmlDeviceGetHandleByIndex") == 0


def test_close_shuts_nvml_down_once_and_never_raises() -> None:
    st = NvmlStandIn(Recording.load("h100-node"))
    _open(st).close()
    assert st.initialised == 0 and st.count("nvmlShutdown") == 1
    failing = NvmlStandIn(Recording.load("h100-node")).fail("nvmlShutdown", nv.NVML_ERROR_UNKNOWN)
    _open(failing).close()  # best effort: nothing raised
    assert failing.count("nvmlShutdown") == 1


# -- processes --------------------------------------------------------------------------------


@pytest.mark.parametrize("strings", ["str", "bytes"])
def test_processes_are_merged_and_named_where_nvml_can(strings: str) -> None:
    st = NvmlStandIn(Recording.load("h100-node"), strings=strings)  # type: ignore[arg-type]
    g = st.recording.gpus[1]
    procs = _open(st).processes(1)
    pids = sorted({p["pid"] for p in g["compute_processes"] + g["graphics_processes"]})
    assert [p.pid for p in procs] == pids
    assert len(pids) < len(g["compute_processes"]) + len(g["graphics_processes"]), "a process in both lists"
    memory = {p["pid"]: p["used_gpu_memory"] // MIB for p in g["compute_processes"]}
    assert {p.pid: p.used_memory_mib for p in procs} == memory
    assert {p.pid: p.name for p in procs} == {pid: st.recording.process_names.get(pid) for pid in pids}
    assert any(p.name is None for p in procs), "another container's process has no name"
    assert _open(st).processes(0) == []


def test_processes_on_a_driver_older_than_the_library_are_a_gpu_error() -> None:
    """nvidia-ml-py 12+ asks for the _v3 process queries, which a 470 driver lacks; pynvml then
    raises NVMLLibraryMismatchError, not an NVMLError. The profiler's busy check and the agent
    catch GpuError: anything else would stop them."""
    b = _open(NvmlStandIn(Recording.load("v100-node")))
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


# -- the stand-in keeps to the real library ----------------------------------------------------


def _names_the_backend_uses() -> set[str]:
    """Every pynvml name gpu/nvml.py reaches: attributes (nv.nvmlX) and hasattr strings."""
    tree = ast.parse(Path(nvml_backend.__file__).read_text())
    names = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)
             and (n.attr.startswith("nvml") or n.attr.startswith("NVML"))}
    names |= {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
              and re.fullmatch(r"nvml[A-Z]\w+|NVML\w+", n.value)}
    return names


def test_the_standin_offers_everything_the_backend_uses() -> None:
    used = _names_the_backend_uses()
    assert {"nvmlInit", "nvmlDeviceGetTotalEccErrors", "NVMLError"} <= used
    assert used <= set(vars(NvmlStandIn(Recording.load("h100-node")).module()))


def test_the_backends_nvml_codes_are_nvmls() -> None:
    """gpu/nvml.py spells NVML's ABI numbers itself (pynvml is optional); they must be NVML's."""
    pairs = {
        "_NOT_SUPPORTED": "NVML_ERROR_NOT_SUPPORTED", "_NO_PERMISSION": "NVML_ERROR_NO_PERMISSION",
        "_DRIVER_NOT_LOADED": "NVML_ERROR_DRIVER_NOT_LOADED", "_LIBRARY_NOT_FOUND": "NVML_ERROR_LIBRARY_NOT_FOUND",
        "_FUNCTION_NOT_FOUND": "NVML_ERROR_FUNCTION_NOT_FOUND", "_GPU_IS_LOST": "NVML_ERROR_GPU_IS_LOST",
        "_CLOCK_SM": "NVML_CLOCK_SM", "_CLOCK_MEM": "NVML_CLOCK_MEM", "_TEMPERATURE_GPU": "NVML_TEMPERATURE_GPU",
        "_ECC_CORRECTED": "NVML_MEMORY_ERROR_TYPE_CORRECTED", "_ECC_UNCORRECTED": "NVML_MEMORY_ERROR_TYPE_UNCORRECTED",
        "_ECC_AGGREGATE": "NVML_AGGREGATE_ECC",
        "_RETIRE_SBE": "NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS",
        "_RETIRE_DBE": "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR",
    }
    for ours, nvml_name in pairs.items():
        assert getattr(nvml_backend, ours) == getattr(nv, nvml_name), ours
        if pynvml is not None:
            assert getattr(nv, nvml_name) == getattr(pynvml, nvml_name), nvml_name


@pytest.mark.skipif(pynvml is None, reason="nvidia-ml-py is not installed")
def test_the_standin_matches_the_real_pynvml() -> None:
    """Same constants, error texts and argument counts as the installed nvidia-ml-py."""
    mod = NvmlStandIn(Recording.load("h100-node")).module()
    for name, value in vars(mod).items():
        if name.startswith(("NVML_", "nvmlClocks")):
            assert getattr(pynvml, name) == value, name
    for code, text in nv.ERROR_TEXT.items():
        assert str(pynvml.NVMLError(code)) == text == str(nv.NVMLError(code))
        assert pynvml.NVMLError(code).value == code
    assert not issubclass(pynvml.NVMLLibraryMismatchError, pynvml.NVMLError)

    def required(fn: Any) -> int:
        return sum(1 for p in inspect.signature(fn).parameters.values() if p.default is inspect.Parameter.empty)

    for name in nv.FUNCTIONS:
        assert required(getattr(mod, name)) == required(getattr(pynvml, name)), name
    assert _names_the_backend_uses() <= set(vars(pynvml))
