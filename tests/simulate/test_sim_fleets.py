"""Fleet-shaped variability models (per-GPU medians, parametric) and the drain baseline."""

from __future__ import annotations

import csv
import json
import random
import statistics
from pathlib import Path

import pytest
from click.testing import CliRunner

from pal_slurm.cli.main import cli
from pal_slurm.errors import InputError
from pal_slurm.placement.model import Cluster
from pal_slurm.simulate.artifact_draw import artifact_slowdowns, load_artifact_profiles
from pal_slurm.simulate.drain import DRAIN_PERFVAR, Drained, check_drain_fits, drained
from pal_slurm.simulate.fleets import (
    PRESETS,
    SPREAD_RATIO,
    ParametricVariability,
    PerGpuVariability,
    parametric_from_spec,
)
from pal_slurm.simulate.runner import ArtifactVariability, FixedVariability, SimulationSpec, run_simulations
from pal_slurm.simulate.traces import Trace, TraceJob

PROFILES = Path(__file__).resolve().parents[1] / "data" / "traces" / "variability"


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def _expected_medians(path: Path) -> dict[str, float]:
    """Written apart from the code under test: per uuid the median perf, over the median of those."""
    runs: dict[str, list[float]] = {}
    for r in _rows(path):
        runs.setdefault(r["uuid"], []).append(float(r["perf"]))
    med = {u: statistics.median(v) for u, v in runs.items()}
    ref = statistics.median(med.values())
    return {u: m / ref for u, m in med.items()}


def _write_profiles(d: Path, resnet: dict[str, list[float]], bert: dict[str, list[float]],
                    pagerank: dict[str, list[float]]) -> Path:
    d.mkdir()
    for name, runs in (("resnet", resnet), ("bert", bert), ("pagerank", pagerank)):
        lines = ["uuid,perf"] + [f"{u},{x}" for u, xs in runs.items() for x in xs]
        (d / f"{name}-site-agg.csv").write_text("\n".join(lines) + "\n")
    return d


# --- per-GPU model ---------------------------------------------------------------------------


def test_per_gpu_values_are_each_identitys_median_run(tmp_path: Path) -> None:
    # GPUs measured several times each, one with a slow warm-up run the per-run draw would keep
    resnet = {"g0": [10.0, 10.2, 30.0], "g1": [11.0, 11.0, 11.4, 11.2], "g2": [9.0, 9.4, 9.2], "g3": [12.0, 12.2]}
    bert = {"g0": [5.0, 5.1, 5.3], "g1": [4.0, 4.2, 4.4], "g2": [6.0, 6.0, 6.6], "g3": [5.5, 5.5, 5.7]}
    pagerank = {"g0": [2.0, 2.2], "g1": [2.4, 2.6], "g2": [1.0, 3.0], "g3": [2.1, 2.1]}
    d = _write_profiles(tmp_path / "p", resnet, bert, pagerank)
    model = PerGpuVariability(load_artifact_profiles(d), 1, 4)
    cluster = model.cluster(random.Random(7))
    expected = {c: _expected_medians(d / f"{f}-site-agg.csv")
                for c, f in (("A", "resnet"), ("B", "bert"), ("C", "bert"), ("D", "pagerank"))}
    uuids = [g.uuid for g in cluster.gpus]
    assert sorted(uuids) == ["g0", "g1", "g2", "g3"]  # four slots, four distinct real GPUs
    for slot, u in enumerate(uuids):
        for c in "ABCD":  # the same identity gives every class its value: the files share uuids
            assert cluster.perfvar[c][slot] == pytest.approx(expected[c][u], rel=1e-12)
    # g0's warm-up run (30.0) does not make it slow: its median is 10.2, below g1's 11.1
    assert cluster.perfvar["A"][uuids.index("g0")] < cluster.perfvar["A"][uuids.index("g1")]
    assert list(cluster.slowdown["A"]) == artifact_slowdowns(cluster.perfvar["A"])


def test_per_gpu_on_longhorn_uses_real_medians_and_is_reproducible() -> None:
    profiles = load_artifact_profiles(PROFILES)
    model = PerGpuVariability(profiles, 2, 2)
    a = model.cluster(random.Random(3))
    assert a == model.cluster(random.Random(3))
    others = {tuple(model.cluster(random.Random(s)).perfvar["A"]) for s in range(10)}
    assert len(others) > 1  # the seed matters
    expected = _expected_medians(PROFILES / "resnet-longhorn-agg.csv")
    for slot, g in enumerate(a.gpus):
        assert a.perfvar["A"][slot] == pytest.approx(expected[g.uuid], rel=1e-12)
    bert = _expected_medians(PROFILES / "bert-longhorn-agg.csv")
    assert all(any(abs(x - v) < 1e-12 for v in bert.values()) for x in a.perfvar["B"])
    assert a.perfvar["B"] == a.perfvar["C"]  # one file, one real GPU for both BERT classes


def test_per_gpu_files_with_different_gpus_draw_the_missing_class_independently(tmp_path: Path) -> None:
    resnet = {"r0": [1.0, 1.0], "r1": [2.0, 2.0]}
    bert = {"r0": [3.0], "b9": [6.0]}  # r1 was never measured with BERT
    pagerank = {"p0": [1.0], "p1": [1.5]}  # other names altogether
    model = PerGpuVariability(load_artifact_profiles(_write_profiles(tmp_path / "p", resnet, bert, pagerank)), 1, 2)
    for seed in range(5):
        c = model.cluster(random.Random(seed))
        slot_r0 = [g.uuid for g in c.gpus].index("r0")
        assert c.perfvar["B"][slot_r0] == pytest.approx(3.0 / 4.5)  # r0's own BERT median
        assert c.perfvar["B"][1 - slot_r0] == pytest.approx(6.0 / 4.5)  # b9: the BERT GPU not in the fleet
        assert sorted(c.perfvar["D"]) == pytest.approx([1.0 / 1.25, 1.5 / 1.25])


def test_per_gpu_needs_an_identity_column(tmp_path: Path) -> None:
    d = tmp_path / "p"
    d.mkdir()
    for name in ("resnet", "bert", "pagerank"):
        (d / f"{name}-x.csv").write_text("perf\n1.0\n2.0\n")
    with pytest.raises(InputError, match="no 'uuid' column"):
        PerGpuVariability(load_artifact_profiles(d), 1, 2)


def test_a_fleet_larger_than_the_file_reuses_each_gpu_evenly() -> None:
    model = PerGpuVariability(load_artifact_profiles(PROFILES), 8, 4)
    ids = [g.uuid for g in model.cluster(random.Random(1)).gpus]
    distinct = len(set(ids))
    counts = {ids.count(u) for u in set(ids)}
    assert max(counts) - min(counts) <= 1 and distinct < 32


# --- parametric model -------------------------------------------------------------------------


def _pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[int(q * (len(s) - 1))]


def test_parametric_spread_and_outliers_on_a_large_fleet() -> None:
    v = ParametricVariability(1024, 4, {"A": 0.2, "B": 0.1, "D": 0.02}, outlier_fraction=0.02,
                              outlier_factor=1.5, seed=5)
    c = v.cluster(random.Random(0))
    a = list(c.perfvar["A"])
    outliers = [g for g, x in enumerate(a) if x == 1.5]
    assert len(outliers) == round(0.02 * 4096)
    ordinary = [x for x in a if x != 1.5]
    assert max(ordinary) - min(ordinary) == pytest.approx(0.2, abs=0.002)
    assert _pct(ordinary, 0.95) - _pct(ordinary, 0.05) == pytest.approx(0.18, abs=0.01)
    assert statistics.median(ordinary) == pytest.approx(1.0, abs=0.01)
    # outliers are outliers for every compute class, not for D; a slow GPU is slow for every class
    assert all(c.perfvar["B"][g] == 1.5 and c.perfvar["C"][g] == 1.5 for g in outliers)
    assert max(c.perfvar["D"]) < 1.011
    ranked = sorted((g for g in range(4096) if g not in set(outliers)), key=lambda g: a[g])
    assert ranked == sorted(ranked, key=lambda g: c.perfvar["B"][g]) == sorted(ranked, key=lambda g: c.perfvar["D"][g])
    assert set(c.perfvar["C"]) == {1.0} | {1.5}  # C had no spread: only the outliers differ
    assert list(c.slowdown["A"]) == artifact_slowdowns(a)


def test_parametric_is_seeded_and_ignores_the_run_rng() -> None:
    def fleet(seed: int) -> Cluster:
        return parametric_from_spec("wide", 16, 4, seed).cluster(random.Random(seed * 7 + 1))

    assert fleet(1) == fleet(1)
    assert fleet(1).perfvar != fleet(2).perfvar
    v = parametric_from_spec("narrow", 4, 4, 3)
    assert v.cluster(random.Random(0)) is v.cluster(random.Random(99))


def test_uniform_preset_is_exactly_one() -> None:
    c = parametric_from_spec("uniform", 64, 4, 42).cluster(random.Random(0))
    for cls in "ABCD":
        assert set(c.perfvar[cls]) == {1.0} and set(c.slowdown[cls]) == {1.0}


def test_narrow_and_wide_presets() -> None:
    narrow = parametric_from_spec("narrow", 256, 4, 1).fleet
    a = narrow.perfvar["A"]
    assert 0.075 < max(a) - min(a) <= 0.08 and max(a) < 1.05
    wide = parametric_from_spec("wide", 1024, 4, 1).fleet
    assert sum(x == 1.5 for x in wide.perfvar["A"]) == 41  # 1 % of 4096
    ordinary = [x for x in wide.perfvar["A"] if x != 1.5]
    assert 0.245 < max(ordinary) - min(ordinary) <= 0.25


def test_wide_2x_has_exactly_one_2x_gpu_for_every_compute_class() -> None:
    c = parametric_from_spec("wide-2x", 256, 4, 9).fleet
    twos = {cls: [g for g, x in enumerate(c.perfvar[cls]) if x == 2.0] for cls in "ABCD"}
    assert len(twos["A"]) == 1 and twos["A"] == twos["B"] == twos["C"] and twos["D"] == []
    assert sum(x == 1.5 for x in c.perfvar["A"]) == round(0.01 * 1024)


def test_compact_syntax_sets_each_parameter() -> None:
    v = parametric_from_spec("spread=0.3,outliers=0.05,outlier-factor=1.8,seed=4", 10, 2, 42)
    assert v.spread["A"] == pytest.approx(0.3) and v.spread["D"] == pytest.approx(0.03)
    assert (v.outlier_fraction, v.outlier_factor, v.seed, v.outlier_count) == (0.05, 1.8, 4, 1)
    w = parametric_from_spec("wide,seed=8,outliers=0", 10, 2, 42)
    assert (w.seed, w.outlier_fraction, w.outlier_factor, w.spread["A"]) == (8, 0.0, 1.5, 0.25)
    assert parametric_from_spec("spread=0.1", 4, 4, 42).outlier_fraction == 0.0


@pytest.mark.parametrize("spec, words", [
    ("spread=-0.1", "spread for class A must be >= 0"),
    ("outlier-factor=0.9", "outlier factor must be >= 1"),
    ("outliers=1.5", "outlier fraction must be in [0, 1]"),
    ("outliers=-0.01", "outlier fraction must be in [0, 1]"),
    ("huge", "unknown preset 'huge'"),
    ("spread=0.1,colour=red", "'colour=red': unknown parameter"),
    ("wide,outliers", "'outliers' needs a value"),
    ("outliers", "'outliers' needs a value"),
    ("spread=wide", "spread='wide' is not a number"),
    ("seed=1.5", "seed='1.5' is not a whole number"),
    ("spread=0.1,spread=0.2", "spread given twice"),
    ("", "expected a preset"),
])
def test_bad_parametric_input_names_the_parameter(spec: str, words: str) -> None:
    with pytest.raises(InputError) as e:
        parametric_from_spec(spec, 4, 4, 42)
    assert words in str(e.value)


def test_bad_parameters_refused_by_the_constructor() -> None:
    with pytest.raises(InputError, match="spread for class B"):
        ParametricVariability(2, 2, {"A": 0.1, "B": -1.0})
    with pytest.raises(InputError, match="unknown class"):
        ParametricVariability(2, 2, {"E": 0.1})
    with pytest.raises(InputError, match="nodes must be"):
        ParametricVariability(0, 2, {})
    assert set(PRESETS) == {"uniform", "narrow", "wide", "wide-2x"}


# --- drain baseline ---------------------------------------------------------------------------


def _cluster(a: list[float], b: list[float] | None = None, d: list[float] | None = None, gpn: int = 2) -> Cluster:
    n = len(a)
    b = b or [1.0] * n
    d = d or [1.0] * n
    pv = {"A": a, "B": b, "C": b, "D": d}
    return Cluster.uniform(n // gpn, gpn, perfvar=pv, slowdown={c: [round(x, 1) for x in v] for c, v in pv.items()})


def test_drain_removes_exactly_the_nodes_of_gpus_at_or_above_the_threshold() -> None:
    #            n0          n1          n2          n3           n4
    a = [1.0, 1.0, 1.3, 1.0, 1.0, 1.0, 1.0, 1.29, 1.0, 1.0]
    b = [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.45]
    d = [1.0, 9.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]  # D is memory-bound: never drains
    c = _cluster(a, b, d)
    left, names = drained(c)
    assert DRAIN_PERFVAR == 1.3
    assert names == ["n1", "n4"]
    assert left.node_names == ("n0", "n2", "n3")
    assert [g.id for g in left.gpus] == list(range(6))
    assert [g.node for g in left.gpus] == [0, 0, 1, 1, 2, 2]
    assert left.perfvar["A"] == (1.0, 1.0, 1.0, 1.0, 1.0, 1.29)
    assert left.perfvar["D"] == (1.0, 9.0, 1.0, 1.0, 1.0, 1.0)
    assert left.slowdown["A"] == (1.0, 1.0, 1.0, 1.0, 1.0, 1.3)
    assert left.node_gpus == ((0, 1), (2, 3), (4, 5))
    assert drained(c, threshold=1.2)[1] == ["n1", "n3", "n4"]
    assert drained(_cluster([1.0] * 4))[1] == []


def _job(jid: str, gpus: int, gpn: int | None = None) -> TraceJob:
    return TraceJob(job_id=jid, num_gpus=gpus, submit_time=0.0, work=10.0, work_unit="seconds", model="m",
                    job_class="A", iter_time_s=1.0, line=1, source="t", gpus_per_node=gpn)


def test_drain_check_names_the_job_its_gpus_and_the_gpus_left() -> None:
    left, names = drained(_cluster([1.0, 1.0, 2.0, 1.0, 1.0, 1.0, 1.0, 1.0]))
    trace = Trace("w1", (_job("small", 2), _job("big7", 7), _job("six", 6)))
    check_drain_fits(Trace("ok", (_job("a", 6), _job("b", 4, gpn=2))), left, names)
    with pytest.raises(InputError) as e:
        check_drain_fits(trace, left, names)
    assert str(e.value) == "w1: job big7 needs 7 GPUs, 6 GPUs are left after draining 1 node(s) (n1)"
    with pytest.raises(InputError, match=r"job wide needs 4 GPUs as 1 node\(s\) x 4; 0 node\(s\) with 4 GPUs"):
        check_drain_fits(Trace("w2", (_job("wide", 4, gpn=4),)), left, names)


def test_drained_wraps_any_model_and_sees_the_same_fleet() -> None:
    inner = parametric_from_spec("wide-2x", 16, 4, 42)
    model = Drained(inner)
    full = inner.cluster(random.Random(0))
    slow_node = full.node_of[full.perfvar["A"].index(2.0)]
    names = model.drained_nodes(random.Random(0))
    assert full.node_names[slow_node] in names
    after = model.cluster(random.Random(0))
    assert max(max(after.perfvar[c]) for c in "ABC") < 1.3 and after.size == full.size - 4 * len(names)
    # the artifact's per-run draw advances the run's rng identically inside Drained
    art = ArtifactVariability(load_artifact_profiles(PROFILES), 4, 4)
    r1, r2 = random.Random(42), random.Random(42)
    art.cluster(r1)
    Drained(art).cluster(r2)
    assert r1.random() == r2.random()


def test_a_drained_run_is_an_ordinary_simulation_run() -> None:
    full = _cluster([1.0, 1.0, 1.0, 1.0, 2.0, 1.0, 1.0, 1.0])
    trace = Trace("t", tuple(_job(str(i), 2) for i in range(6)))
    spec = SimulationSpec(traces=(trace,), policies=("slurm-backfill",), variability=Drained(FixedVariability(full)),
                          mode="event")
    report = run_simulations(spec)
    assert [r.cluster_gpus for r in report.results] == [6]
    assert all(r.metrics.as_dict()["jobs"] == 6 for r in report.results)


# --- CLI ------------------------------------------------------------------------------------


def _trace(tmp_path: Path, rows: list[str]) -> Path:
    p = tmp_path / "trace.csv"
    p.write_text("job_id,num_gpus,submit_time,duration,model\n" + "\n".join(rows) + "\n")
    return p


def _sim(*args: str):
    return CliRunner().invoke(cli, ["simulate", *args])


def _api_jct(trace_path: Path, variability: object) -> dict[str, float]:
    from pal_slurm.simulate.trace_files import read_trace_file

    spec = SimulationSpec(traces=(read_trace_file(trace_path, max_gpus=8),), policies=("pal",),
                          variability=variability, mode="event")  # type: ignore[arg-type]
    return {r.policy: r.metrics.avg_jct_s for r in run_simulations(spec).results}


def test_cli_parametric_and_per_gpu_models_are_the_ones_simulated(tmp_path: Path) -> None:
    trace = _trace(tmp_path, [f"{i},{1 + i % 4},{i * 30},{200 + 10 * i},resnet50" for i in range(8)])
    cases = [
        (["--variability", "parametric:spread=0.2,outliers=0.25,outlier-factor=1.5,seed=3"],
         ParametricVariability(2, 4, {c: 0.2 * r for c, r in SPREAD_RATIO.items()}, 0.25, 1.5, seed=3)),
        (["--variability", "parametric:wide-2x"], parametric_from_spec("wide-2x", 2, 4, 42)),
        (["--variability", str(PROFILES), "--variability-model", "per-gpu"],
         PerGpuVariability(load_artifact_profiles(PROFILES), 2, 4)),
        (["--variability", str(PROFILES)], ArtifactVariability(load_artifact_profiles(PROFILES), 2, 4)),
    ]
    seen = []
    for args, model in cases:
        res = _sim("--trace", str(trace), *args, "--cluster", "2x4", "--mode", "event", "--policy", "pal", "--json")
        assert res.exit_code == 0, res.output
        got = {r["policy"]: r["avg_jct_s"] for r in json.loads(res.stdout)["runs"]}
        assert got == pytest.approx(_api_jct(trace, model)), args
        seen.append(got["slurm-backfill"])
    assert len(set(seen)) > 1  # the models do give different fleets


def test_cli_drain_baseline_adds_a_row_and_valid_json(tmp_path: Path) -> None:
    trace = _trace(tmp_path, [f"{i},{1 + i % 4},{i * 30},{200 + 10 * i},resnet50" for i in range(8)])
    res = _sim("--trace", str(trace), "--variability", "parametric:wide-2x", "--cluster", "4x4", "--mode", "event",
               "--policy", "pal", "--drain-baseline", "--json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    runs = {r["policy"]: r for r in data["runs"]}
    assert set(runs) == {"pal", "slurm-backfill", "slurm-backfill+drain"}
    info = data["drain_baseline"]
    # wide-2x on 16 GPUs: no 1.5x outlier (1 % of 16 rounds to 0) and one 2x straggler, so one node drains
    fleet = parametric_from_spec("wide-2x", 4, 4, 42).fleet
    expected = drained(fleet)[1]
    assert info == {"policy": "slurm-backfill+drain", "threshold": 1.3, "drained_nodes": expected,
                    "gpus_left": 16 - 4 * len(expected)} and len(expected) == 1
    assert "slurm-backfill+drain" in data["summary"]
    table = _sim("--trace", str(trace), "--variability", "parametric:wide-2x", "--cluster", "4x4", "--mode", "event",
                 "--policy", "pal", "--drain-baseline")
    assert table.exit_code == 0 and f"12 of 16 GPUs left after draining 1 node(s)" in table.output
    assert f": {expected[0]}" in table.output


def test_cli_drain_baseline_refuses_a_trace_that_no_longer_fits(tmp_path: Path) -> None:
    trace = _trace(tmp_path, ["0,1,0,100,resnet50", "j7,8,10,100,BERT"])
    res = _sim("--trace", str(trace), "--variability", "parametric:wide-2x", "--cluster", "2x4", "--drain-baseline")
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert "--drain-baseline" in res.output and "job j7 needs 8 GPUs, 4 GPUs are left" in res.output


@pytest.mark.parametrize("args, words", [
    (["--variability", "parametric:spread=-0.1"], ["--variability", "spread for class A must be >= 0"]),
    (["--variability", "parametric:outlier-factor=0.5"], ["--variability", "outlier factor must be >= 1"]),
    (["--variability", "parametric:outliers=2"], ["--variability", "outlier fraction must be in [0, 1]"]),
    (["--variability", "parametric:huge"], ["--variability", "unknown preset 'huge'", "wide-2x"]),
    (["--variability", "parametric:spread"], ["--variability", "'spread' needs a value: spread=VALUE"]),
    (["--variability", "parametric:wide", "--variability-model", "per-gpu"], ["--variability-model", "'per-gpu'"]),
    (["--variability", "db", "--variability-model", "per-run"], ["--variability-model"]),
    (["--variability", str(PROFILES), "--variability-model", "median"], ["--variability-model", "'median'"]),
    (["--variability", "parametric:wide", "--classification", "3"], ["--classification"]),
])
def test_cli_bad_variability_input_exits_2_naming_the_option(tmp_path: Path, args: list[str], words: list[str]) -> None:
    res = _sim("--trace", str(_trace(tmp_path, ["0,1,0,100,resnet50"])), *args)
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    for w in words:
        assert w in res.output
