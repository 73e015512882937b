"""The NVML backend (gpu/nvml.py) on a stand-in for the NVML library: every path, without a GPU.

`tests/support/nvml_standin.py` plays nvidia-ml-py's `pynvml` module, answering from recordings of an
H100 and a V100 node (tests/data/nvml) and raising NVML's errors where a test injects them;
`NvmlBackend` is given it as its `nvml` module, so the backend's own code runs as on a GPU
node. Expectations are computed from the recordings by the rules the backend keeps (bytes to
MiB, milliwatts to watts, lifetime ECC counts, pages retired for either cause, the enforced
power limit first, the device minor number as NVML tells it), so a change in how the backend
reads NVML fails here. NVML errors, processes and the callers that take the library:
test_gpu_nvml_errors.py; the stand-in held to the real pynvml: test_nvml_standin.py.
"""

from __future__ import annotations

import dataclasses
import re
import time
from typing import Any

import pytest

from tests.support import nvml_api as nv
from tests.support.nvml_api import MIB
from tests.support.nvml_standin import NODES, NvmlStandIn, Recording, backend_on
from pal_slurm.gpu.interface import GpuInventory, GpuSample, scan_inventory
from pal_slurm.profiler.telemetry import reason_names


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
    b = backend_on(standin)
    for index in range(len(standin.recording.gpus)):
        assert b.inventory(index) == _expected_inventory(standin.recording, index)
    assert b.visible_device(1) == standin.recording.gpus[1]["uuid"]  # what CUDA_VISIBLE_DEVICES gets
    b.close()
    assert standin.initialised == 0


def test_inside_a_slurm_job_the_slot_is_the_minor_number() -> None:
    """NVML renumbers the GPUs a job's cgroup shows from 0; gres.conf's slot is /dev/nvidiaN."""
    st = NvmlStandIn(Recording.load("v100-node"))
    scan = scan_inventory(backend_on(st))
    assert [(g.nvml_index, g.minor_number) for g in scan.gpus] == [(0, 2), (1, 3)]
    assert [g.gpu_info().minor_number for g in scan.gpus] == [2, 3]


def test_ecc_and_retired_pages_are_the_lifetime_counts() -> None:
    st = NvmlStandIn(Recording.load("v100-node"))
    bad = backend_on(st).inventory(1)
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
    h100 = backend_on(NvmlStandIn(Recording.load("h100-node"))).inventory(0)
    v100 = backend_on(NvmlStandIn(Recording.load("v100-node"))).inventory(0)
    assert h100.retired_pages is None and v100.retired_pages == 0


def test_the_enforced_power_limit_comes_first() -> None:
    st = NvmlStandIn(Recording.load("h100-node"))
    rec = st.recording.gpus[1]
    assert backend_on(st).inventory(1).power_limit_w == rec["enforced_power_limit_mw"] / 1000
    fallback = NvmlStandIn(Recording.load("h100-node")).fail("nvmlDeviceGetEnforcedPowerLimit",
                                                           nv.NVML_ERROR_NOT_SUPPORTED)
    assert backend_on(fallback).inventory(1).power_limit_w == rec["power_management_limit_mw"] / 1000
    old_library = NvmlStandIn(Recording.load("h100-node"), module_lacks={"nvmlDeviceGetEnforcedPowerLimit"})
    assert backend_on(old_library).inventory(1).power_limit_w == rec["power_management_limit_mw"] / 1000


def test_bytes_and_str_libraries_give_the_same_inventory() -> None:
    """nvidia-ml-py before 11.515 returns bytes: every text field must still come out as text."""
    for node in NODES:
        as_str = scan_inventory(backend_on(NvmlStandIn(Recording.load(node), strings="str")))
        as_bytes = scan_inventory(backend_on(NvmlStandIn(Recording.load(node), strings="bytes")))
        assert as_bytes == as_str
        for g in as_bytes.gpus:
            for value in (g.uuid, g.name, g.pci_bus_id, g.serial, g.driver_version, g.vbios_version):
                assert isinstance(value, str) and not value.startswith("b'")


# -- telemetry and throttle reasons -----------------------------------------------------------


def test_sample_reads_the_telemetry(standin: NvmlStandIn) -> None:
    b = backend_on(standin)
    for index, g in enumerate(standin.recording.gpus):
        before = time.time()
        s = b.sample(index)
        assert before <= s.timestamp <= time.time()
        assert s == _expected_sample(g, s.timestamp)


def test_every_sample_is_read_fresh() -> None:
    st = NvmlStandIn(Recording.load("h100-node"))
    b = backend_on(st)
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
    s = backend_on(st).sample(1)
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
    mask = backend_on(standin).sample(1).throttle_reasons
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
    b = backend_on(st)
    masks = [b.sample(i % 2).throttle_reasons for i in range(4)]
    assert masks == [g["clocks_event_reasons"] for g in st.recording.gpus] * 2
    assert st.count("nvmlDeviceGetCurrentClocksEventReasons") == 1
    assert st.count("nvmlDeviceGetCurrentClocksThrottleReasons") == 4


def test_an_older_library_without_the_event_call_uses_the_throttle_call() -> None:
    st = NvmlStandIn(Recording.load("h100-node"), module_lacks={"nvmlDeviceGetCurrentClocksEventReasons"})
    assert backend_on(st).sample(1).throttle_reasons == st.recording.gpus[1]["clocks_event_reasons"]
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
    full = getattr(backend_on(NvmlStandIn(Recording.load(node))), read)(1)
    st = NvmlStandIn(Recording.load(node)).fail(query, code, gpu=1)
    b = backend_on(st)
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
    assert backend_on(st).inventory(0).power_limit_w is None


def test_a_board_that_answers_nothing_optional_still_inventories() -> None:
    """A board (or vGPU) that supports none of the optional queries: its identity, and None."""
    optional = ("pci", "minor_number", "serial", "vbios_version", "memory", "power_management_limit_mw",
                "enforced_power_limit_mw", "ecc_errors", "retired_pages")
    st = NvmlStandIn(Recording.load("h100-node")).update(0, **dict.fromkeys(optional))
    g = backend_on(st).inventory(0)
    assert (g.uuid, g.name) == (st.recording.gpus[0]["uuid"], st.recording.gpus[0]["name"])
    assert g.driver_version == st.recording.driver_version
    assert all(getattr(g, f) is None for f in ("pci_bus_id", "minor_number", "serial", "vbios_version", "memory_mib",
                                               "power_limit_w", "ecc_corrected", "ecc_uncorrected", "retired_pages"))


def test_a_blank_serial_is_none() -> None:
    st = NvmlStandIn(Recording.load("h100-node"), strings="bytes").update(0, serial="   ")
    assert backend_on(st).inventory(0).serial is None


@pytest.mark.parametrize("code", [nv.NVML_ERROR_NOT_SUPPORTED, nv.NVML_ERROR_UNKNOWN])
def test_driver_and_cuda_versions_never_stop_the_backend(code: int) -> None:
    st = NvmlStandIn(Recording.load("h100-node"))
    st.fail("nvmlSystemGetDriverVersion", code).fail("nvmlSystemGetCudaDriverVersion", code)
    g = backend_on(st).inventory(0)
    assert g.driver_version is None and g.cuda_version is None and g.uuid == st.recording.gpus[0]["uuid"]
