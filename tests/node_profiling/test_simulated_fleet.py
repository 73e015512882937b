"""The simulated fleet: reproducible, valid records, and physics that could be wrong.

The physics checks reproduce what real fleets show (the Longhorn V100s of the PAL artifact,
pal_slurm.gpu.simulated_fleet says more): SGEMM time follows the SM clock, compute-bound work varies more than memory-bound work, power-capped
runs sit at the cap and say so, planted defects are slow and visible in the telemetry.
"""

from __future__ import annotations

import random
import re
from collections import defaultdict
from datetime import UTC, datetime, timedelta, timezone

import numpy as np
import pytest

from pal_slurm.errors import InputError
from pal_slurm.gpu import sim_physics, simulated_fleet
from pal_slurm.ingest.records import ProfileRecord
from pal_slurm.gpu.sim_physics import (
    CLOCKS_EVENT_GPU_IDLE,
    CLOCKS_EVENT_HW_SLOWDOWN,
    CLOCKS_EVENT_SW_POWER_CAP,
    CLOCKS_EVENT_SW_THERMAL_SLOWDOWN,
)
from pal_slurm.gpu.sim_specs import H100, V100
from pal_slurm.gpu.sim_traits import DEFECTS
from pal_slurm.gpu.simulated_fleet import SimFleet, make_fleet

UUID_RE = re.compile(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def spearman(x: list[float], y: list[float]) -> float:
    """Spearman's rho with average ranks for ties (what scipy.stats.spearmanr computes).

    By hand because importing scipy.stats alone takes over a second.
    """

    def ranks(values: list[float]) -> np.ndarray:
        a = np.asarray(values, dtype=float)
        first = np.empty(len(a))
        first[a.argsort(kind="mergesort")] = np.arange(1, len(a) + 1)
        _, group = np.unique(a, return_inverse=True)
        return (np.bincount(group, first) / np.bincount(group))[group]

    return float(np.corrcoef(ranks(x), ranks(y))[0, 1])


def per_gpu(records: list[ProfileRecord]) -> dict[str, dict[str, list[ProfileRecord]]]:
    out: dict[str, dict[str, list[ProfileRecord]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        out[r.benchmark][r.gpu.uuid].append(r)
    return out


def median_perfvar(runs: dict[str, list[ProfileRecord]]) -> dict[str, float]:
    """PerfVar as the classifier computes it: per-GPU median over the fleet's median."""
    med = {u: float(np.median([r.score for r in rs])) for u, rs in runs.items()}
    fleet = float(np.median(list(med.values())))
    return {u: v / fleet for u, v in med.items()}


def iqr(values: list[float]) -> float:
    q75, q25 = np.percentile(values, [75, 25])
    return float(q75 - q25)


@pytest.fixture(scope="module")
def fleet() -> SimFleet:
    return make_fleet(nodes=16, gpus_per_node=4, seed=0)


@pytest.fixture(scope="module")
def records(fleet: SimFleet) -> list[ProfileRecord]:
    return fleet.profile_records()


@pytest.fixture(scope="module")
def defect_fleet() -> SimFleet:
    """Many defects (10 of 64), so that each kind is represented."""
    return make_fleet(nodes=16, gpus_per_node=4, seed=7, bad_fraction=0.15)


# --- reproducibility -------------------------------------------------------------------


def test_same_seed_gives_identical_records(records: list[ProfileRecord]) -> None:
    again = make_fleet(nodes=16, gpus_per_node=4, seed=0).profile_records()
    assert again == records
    assert repr(again) == repr(records)  # byte-identical, floats included


def test_different_seed_gives_a_different_fleet(fleet: SimFleet, records: list[ProfileRecord]) -> None:
    other = make_fleet(nodes=16, gpus_per_node=4, seed=1)
    assert {g.uuid for g in other.gpus}.isdisjoint({g.uuid for g in fleet.gpus})
    assert [g.vf_power_factor for g in other.gpus] != [g.vf_power_factor for g in fleet.gpus]
    assert [r.score for r in other.profile_records()] != [r.score for r in records]


def test_campaign_seed_changes_only_the_noise(fleet: SimFleet, records: list[ProfileRecord]) -> None:
    other = fleet.profile_records(seed=99)
    assert [r.gpu for r in other] == [r.gpu for r in records]
    assert [r.score for r in other] != [r.score for r in records]
    assert {r.run_key for r in other}.isdisjoint({r.run_key for r in records})


def test_bad_fraction_does_not_reshuffle_healthy_gpus(fleet: SimFleet) -> None:
    clean = make_fleet(nodes=16, gpus_per_node=4, seed=0, bad_fraction=0.0)
    assert not clean.bad_gpus
    assert [g.uuid for g in clean.gpus] == [g.uuid for g in fleet.gpus]
    for a, b in zip(clean.gpus, fleet.gpus):
        if not b.is_bad:
            assert a.vf_power_factor == b.vf_power_factor
            assert a.thermal_resistance_c_per_w == b.thermal_resistance_c_per_w


def test_no_global_random_state_is_touched() -> None:
    random.seed(5)
    np.random.seed(5)
    py_state, np_state = random.getstate(), np.random.get_state()
    make_fleet(nodes=2, seed=3).profile_records(runs_per_gpu=2)
    assert random.getstate() == py_state
    after = np.random.get_state()
    assert after[0] == np_state[0] and np.array_equal(after[1], np_state[1]) and after[2:] == np_state[2:]


# --- records ---------------------------------------------------------------------------


def test_records_are_valid_profile_records(fleet: SimFleet, records: list[ProfileRecord]) -> None:
    assert len(records) == 64 * 4 * 5
    assert len({r.run_key for r in records}) == len(records)
    assert all(re.fullmatch(r"[0-9a-f]{64}", r.run_key) for r in records)
    assert [r.line for r in records] == list(range(1, len(records) + 1))
    for r in records:
        assert r.started_at.tzinfo is not None and r.started_at.utcoffset() == timedelta(0)
        assert r.score > 0 and np.isfinite(r.score)
        assert (r.unit, r.lower_is_better, r.source, r.source_file) == ("ms", True, "pal-sim", "<sim>")
        assert r.repeats and r.repeats > 0 and r.spread is not None and 0 <= r.spread < 0.1
        assert r.duration_s and r.duration_s > r.repeats * r.score / 1000
        assert (r.driver_version, r.cuda_version) == ("550.54.15", "12.4")
        assert r.mem_clock_mhz == V100.mem_clock_mhz
        assert r.gpu.model == V100.name and r.gpu.memory_mib == V100.memory_mib


def test_runs_of_one_gpu_do_not_overlap(records: list[ProfileRecord]) -> None:
    by_gpu: dict[str, list[ProfileRecord]] = defaultdict(list)
    for r in records:
        by_gpu[r.gpu.uuid].append(r)
    for runs in by_gpu.values():
        runs.sort(key=lambda r: r.started_at)
        for a, b in zip(runs, runs[1:]):
            assert b.started_at >= a.started_at + timedelta(seconds=a.duration_s)
    assert min(r.started_at for r in records) >= simulated_fleet.DEFAULT_START


def test_gpu_identities_look_like_nvml(fleet: SimFleet) -> None:
    assert fleet.nodes[0] == "gpu001" and fleet.nodes[-1] == "gpu016"
    assert len({g.uuid for g in fleet.gpus}) == 64 and all(UUID_RE.match(g.uuid) for g in fleet.gpus)
    assert len({g.serial for g in fleet.gpus}) == 64 and all(re.fullmatch(r"\d{13}", g.serial) for g in fleet.gpus)
    for g in fleet.gpus:
        assert g.nvml_index == g.minor_number == g.slot == g.info.nvml_index == g.info.minor_number
        assert re.fullmatch(r"[0-9A-F]{8}:[0-9A-F]{2}:00\.0", g.pci_bus_id)
        assert fleet.gpu(g.uuid) is g
    assert len({(g.node, g.pci_bus_id) for g in fleet.gpus}) == 64
    wide = make_fleet(nodes=1200, gpus_per_node=1, seed=0, node_prefix="n")
    assert wide.nodes[0] == "n0001" and wide.nodes[-1] == "n1200"


# --- physics ---------------------------------------------------------------------------


def test_sgemm_time_follows_sm_clock(fleet: SimFleet, records: list[ProfileRecord]) -> None:
    runs = per_gpu(records)["sgemm"]
    score = [float(np.median([r.score for r in rs])) for rs in runs.values()]
    clock = [float(np.median([r.sm_clock_mhz for r in rs])) for rs in runs.values()]
    assert spearman(score, clock) < -0.9
    healthy_clocks = [c for c, u in zip(clock, runs) if not fleet.gpu(u).is_bad]
    assert 1245 <= min(healthy_clocks) and max(healthy_clocks) <= 1460  # Longhorn: 1245-1440 near 300 W
    assert max(healthy_clocks) - min(healthy_clocks) >= 45  # a real spread, not a constant


def test_compute_bound_benchmarks_vary_more(records: list[ProfileRecord]) -> None:
    spread = {b: iqr(list(median_perfvar(runs).values())) for b, runs in per_gpu(records).items()}
    assert min(spread["sgemm"], spread["resnet50"]) > spread["bert"] > spread["pagerank"]
    healthy_sgemm = sorted(median_perfvar(per_gpu(records)["sgemm"]).values())[:-2]
    assert 0.93 < healthy_sgemm[0] < 0.98 and 1.02 < healthy_sgemm[-1] < 1.2  # Longhorn: 0.952-1.06 (+outliers)


def test_measured_perfvar_recovers_the_truth(fleet: SimFleet, records: list[ProfileRecord]) -> None:
    for bench, runs in per_gpu(records).items():
        measured = median_perfvar(runs)
        for uuid, value in measured.items():
            gpu = fleet.gpu(uuid)
            # A failed cooler makes a GPU sensitive to the inlet air, which drifts over the day.
            tolerance = 0.04 if gpu.is_bad else 0.02
            assert abs(value - gpu.true_perfvar(bench)) < tolerance, (bench, uuid)


def test_planted_bad_gpus_are_slow(fleet: SimFleet, records: list[ProfileRecord]) -> None:
    assert len(fleet.bad_gpus) == round(0.03 * 64)
    sgemm = median_perfvar(per_gpu(records)["sgemm"])
    for g in fleet.gpus:
        if g.is_bad:
            assert sgemm[g.uuid] >= 1.25 and g.true_perfvar("sgemm") >= 1.25
            assert g.true_tier("sgemm") == 2
        else:
            assert sgemm[g.uuid] < 1.15 and g.true_tier("sgemm") < 2
    assert set(fleet.true_bins("sgemm").values()) <= {0, 1, 2}


def test_defects_are_slow_and_visible_in_telemetry(defect_fleet: SimFleet) -> None:
    records = defect_fleet.profile_records(runs_per_gpu=3)
    runs = per_gpu(records)
    sgemm = median_perfvar(runs["sgemm"])
    bad = defect_fleet.bad_gpus
    assert len(bad) == 10 and {g.defect for g in bad} == set(DEFECTS)
    for g in bad:
        assert sgemm[g.uuid] >= 1.25
        # Memory-bound work barely notices any defect: that is why class D tolerates them.
        assert g.true_perfvar("pagerank") < 1.1 < g.true_perfvar("resnet50")
        for r in runs["sgemm"][g.uuid]:
            if g.defect == "low_power_limit":
                assert r.throttle_reasons & CLOCKS_EVENT_SW_POWER_CAP
                assert g.power_limit_w < 0.6 * V100.power_cap_w
                assert abs(r.power_w - g.power_limit_w) < 0.03 * g.power_limit_w
            elif g.defect == "cooling_failure":
                assert r.throttle_reasons & CLOCKS_EVENT_SW_THERMAL_SLOWDOWN
                assert r.temperature_c == V100.max_operating_temp_c
            else:
                assert r.throttle_reasons & CLOCKS_EVENT_HW_SLOWDOWN
                assert r.sm_clock_mhz == g.stuck_sm_clock_mhz


def test_power_capped_runs_sit_at_the_cap(fleet: SimFleet, records: list[ProfileRecord]) -> None:
    # Mostly-compute runs: their median power sample comes from the capped phase. (A
    # PageRank run on a derated GPU is capped in its short compute phases only, so NVML's
    # OR-ed reasons say "power cap" while its median power is that of the memory phase.)
    capped = [r for r in records if r.throttle_reasons & CLOCKS_EVENT_SW_POWER_CAP and r.benchmark != "pagerank"]
    assert len(capped) >= 3 * 60 * 5
    for r in capped:
        limit = fleet.gpu(r.gpu.uuid).power_limit_w
        assert abs(r.power_w - limit) < 0.03 * limit
    for r in records:
        if fleet.gpu(r.gpu.uuid).is_bad:
            continue
        if r.benchmark == "sgemm":  # dense GEMM always hits 300 W on a V100
            assert r.throttle_reasons == CLOCKS_EVENT_SW_POWER_CAP
        elif r.benchmark == "pagerank":  # memory-bound: full clock, far below the cap
            assert r.throttle_reasons == 0 and r.sm_clock_mhz == V100.max_sm_clock_mhz and r.power_w < 150
        assert r.temperature_c < V100.max_operating_temp_c


def test_h100_preset_is_calibrated() -> None:
    fl = make_fleet(nodes=4, gpus_per_node=8, model=H100, seed=2, bad_fraction=0.0)
    sgemm = [r for r in fl.profile_records(benchmarks=("sgemm",), runs_per_gpu=2)]
    clocks = [r.sm_clock_mhz for r in sgemm]
    assert H100.base_sm_clock_mhz < min(clocks) and max(clocks) < H100.max_sm_clock_mhz
    assert all(abs(r.power_w - 700) < 21 and r.throttle_reasons == CLOCKS_EVENT_SW_POWER_CAP for r in sgemm)
    assert all(r.gpu.model == "NVIDIA H100 80GB HBM3" for r in sgemm)
    assert len({g.pci_bus_id for g in fl.gpus}) == 8


# --- sampling hook and single runs -----------------------------------------------------


def test_sample_is_deterministic_and_physical(fleet: SimFleet) -> None:
    g = fleet.gpus[0]
    t = 1.77e9
    assert g.sample(0.7, t) == g.sample(0.7, t)
    idle = g.sample(0.0, t)
    assert idle["throttle_reasons"] == CLOCKS_EVENT_GPU_IDLE and idle["sm_clock_mhz"] == V100.idle_sm_clock_mhz
    assert idle["utilization"] == 0 and 15 < idle["power_w"] < 60
    loads = [g.sample(x, t) for x in (0.1, 0.3, 0.5, 0.7, 0.9, 1.0)]
    powers = [s["power_w"] for s in loads]
    assert powers == sorted(powers) and powers[-1] <= V100.power_cap_w
    assert [s["utilization"] for s in loads] == [10, 30, 50, 70, 90, 100]
    full = loads[-1]
    assert full["throttle_reasons"] == CLOCKS_EVENT_SW_POWER_CAP and full["sm_clock_mhz"] < V100.max_sm_clock_mhz
    assert loads[0]["throttle_reasons"] == 0 and loads[0]["sm_clock_mhz"] == V100.max_sm_clock_mhz
    # The machine room's daily cycle moves temperature (and with it leakage and clock) a little.
    assert g.sample(1.0, t) != g.sample(1.0, t + 43200) or g.sample(0.5, t) != g.sample(0.5, t + 43200)
    with pytest.raises(InputError):
        g.sample(1.5, t)


def test_run_benchmark_gives_one_record(fleet: SimFleet) -> None:
    g = fleet.gpus[5]
    at = datetime(2026, 2, 1, 12, 0, tzinfo=timezone(timedelta(hours=2)))
    rec = fleet.run_benchmark(g, "resnet50", at, np.random.default_rng(4), line=7)
    assert rec == fleet.run_benchmark(g, "resnet50", at, np.random.default_rng(4), line=7)
    assert rec.started_at == at and rec.started_at.tzinfo == UTC and rec.line == 7
    assert rec.gpu == g.info and rec.benchmark == "resnet50"
    assert abs(rec.score / (V100.base_ms("resnet50") * g.true_perfvar("resnet50")) - 1) < 0.1
    with pytest.raises(InputError):
        fleet.run_benchmark(g, "resnet50", datetime(2026, 2, 1), np.random.default_rng(4))
    with pytest.raises(InputError):
        fleet.run_benchmark(g, "linpack", at, np.random.default_rng(4))


def test_nvml_constants_have_nvml_values() -> None:
    assert (sim_physics.CLOCKS_EVENT_GPU_IDLE, sim_physics.CLOCKS_EVENT_APPLICATIONS_CLOCKS_SETTING,
            sim_physics.CLOCKS_EVENT_SW_POWER_CAP, sim_physics.CLOCKS_EVENT_HW_SLOWDOWN, sim_physics.CLOCKS_EVENT_SYNC_BOOST,
            sim_physics.CLOCKS_EVENT_SW_THERMAL_SLOWDOWN, sim_physics.CLOCKS_EVENT_HW_THERMAL_SLOWDOWN,
            sim_physics.CLOCKS_EVENT_HW_POWER_BRAKE_SLOWDOWN,
            sim_physics.CLOCKS_EVENT_DISPLAY_CLOCK_SETTING) == (0x1, 0x2, 0x4, 0x8, 0x10, 0x20, 0x40, 0x80, 0x100)


@pytest.mark.parametrize("kwargs", [{"nodes": 0}, {"gpus_per_node": 0}, {"gpus_per_node": 33}, {"bad_fraction": 1.5}])
def test_bad_arguments_are_input_errors(kwargs: dict[str, float]) -> None:
    with pytest.raises(InputError):
        make_fleet(**kwargs)


def test_bad_campaign_arguments_are_input_errors(fleet: SimFleet) -> None:
    with pytest.raises(InputError):
        fleet.profile_records(benchmarks=("sgemm", "nope"))
    with pytest.raises(InputError):
        fleet.profile_records(runs_per_gpu=0)
    with pytest.raises(InputError):
        fleet.profile_records(start=datetime(2026, 1, 1))
