"""Simulator inputs: trace parsers (Sia-Philly, sacct), synthetic traces, artifact
variability (draw and binning), classification-based variability and the cluster."""

from __future__ import annotations

import random
import statistics
from collections import Counter
from pathlib import Path

import pytest

from pal_slurm.errors import InputError
from pal_slurm.simulate.synthetic import SIA_PHILLY_MODEL_GPUS, generate
from pal_slurm.simulate.sacct_trace import count_hosts, read_sacct, tres_gpus
from pal_slurm.simulate.trace_files import read_trace_file
from pal_slurm.simulate.traces import MODEL_CLASS, MODEL_ITER_TIME_S, TraceJob, read_philly
from pal_slurm.placement.variability import (
    ClassifiedGpu,
    GpuVariability,
    Measured,
    cluster_from_variability,
    from_classification,
)
from pal_slurm.simulate.artifact_draw import artifact_slowdowns, draw_artifact, load_artifact_profiles

DATA = Path(__file__).resolve().parents[1] / "data" / "traces"
HEADER = "job_id,num_gpus,submit_time,duration,model\n"


def philly(*rows: str, header: str = HEADER, **kw):
    return read_philly([header, *(r + "\n" for r in rows)], source="t.csv", **kw)


# --------------------------------------------------------------------------- Sia-Philly


def test_philly_fixture_keeps_file_order_and_artifact_tables() -> None:
    trace = read_trace_file(DATA / "philly-small.csv")
    assert trace.name == "philly-small" and trace.skipped == ()
    assert [j.job_id for j in trace.jobs] == [str(i) for i in range(8)]
    first, second = trace.jobs[0], trace.jobs[1]
    assert (first.num_gpus, first.submit_time, first.work, first.model) == (1, 98.0, 1481.0, "vgg19")
    assert (first.job_class, first.work_unit, first.line) == ("C", "iterations", 2)
    assert first.iter_time_s == 0.300610341
    assert first.nominal_runtime_s == pytest.approx(1481 * 0.300610341)
    assert (second.model, second.job_class, second.num_gpus) == ("DCGAN", "B", 12)
    assert {j.model: j.job_class for j in trace.jobs} == {m: MODEL_CLASS[m] for m in {j.model for j in trace.jobs}}
    assert trace.jobs[-1].line == 9 and trace.jobs[-1].source.endswith("philly-small.csv")


def test_philly_tables_match_the_artifact() -> None:
    assert MODEL_CLASS == {"resnet50": "A", "BERT": "B", "GPT2": "B", "DCGAN": "B", "vgg19": "C", "PointNet": "D"}
    assert MODEL_ITER_TIME_S["resnet50"] == 0.17540429367763434
    assert MODEL_ITER_TIME_S["GPT2"] == 3.5714


def test_philly_columns_in_any_order_with_extras() -> None:
    trace = philly("x,PointNet,4,7,10.5,1", header="batch,model,num_gpus,job_id,submit_time,duration\n")
    (job,) = trace.jobs
    assert (job.job_id, job.num_gpus, job.submit_time, job.work, job.job_class) == ("7", 4, 10.5, 1.0, "D")


@pytest.mark.parametrize(("row", "reason"), [
    ("0,x,1,10,vgg19", "num_gpus 'x' is not a number"),
    ("0,1.5,1,10,vgg19", "num_gpus '1.5' is not a whole number"),
    ("0,0,1,10,vgg19", "num_gpus must be at least 1"),
    ("0,-2,1,10,vgg19", "num_gpus must be at least 1"),
    ("0,1,-5,10,vgg19", "submit_time must not be negative"),
    ("0,1,abc,10,vgg19", "submit_time 'abc' is not a number"),
    ("0,1,1,0,vgg19", "duration must be positive"),
    ("0,1,1,-3,vgg19", "duration must be positive"),
    ("0,1,1,nan,vgg19", "duration 'nan' is not a finite number"),
    ("0,1,1,10,ResNet50", "unknown model 'ResNet50' (known, case-sensitive: BERT, DCGAN, GPT2, PointNet, resnet50, vgg19)"),
    ("0,1,1,10", "row has 4 fields, the header has 5"),
    (",1,1,10,vgg19", "empty job_id"),
    ("0,12,1,10,DCGAN", "job needs 12 GPUs, more than the cluster's 8"),
])
def test_philly_malformed_rows_name_file_line_and_reason(row: str, reason: str) -> None:
    with pytest.raises(InputError) as e:
        philly("5,1,0,10,vgg19", row, max_gpus=8)
    assert (e.value.source, e.value.line) == ("t.csv", 3)
    assert str(e.value).startswith(f"t.csv:3: {reason}")


def test_philly_missing_column_is_line_1() -> None:
    with pytest.raises(InputError, match=r"^t\.csv:1: missing column\(s\) duration") as e:
        philly("0,1,1,vgg19", header="job_id,num_gpus,submit_time,model\n")
    assert e.value.line == 1
    with pytest.raises(InputError, match=r"^t\.csv:1: missing column"):
        read_philly([], source="t.csv")


def test_philly_duplicate_job_id() -> None:
    with pytest.raises(InputError, match=r"t\.csv:3: duplicate job_id '1' \(first on line 2\)"):
        philly("1,1,0,10,vgg19", "1,1,5,10,vgg19")


def test_philly_skip_invalid_records_line_and_reason() -> None:
    trace = philly("0,1,0,10,vgg19", "1,0,1,10,vgg19", "", "2,1,2,10,Nope", "3,4,3,10,resnet50",
                   "4,16,4,10,BERT", skip_invalid=True, max_gpus=8)
    assert [j.job_id for j in trace.jobs] == ["0", "3"]
    assert [line for line, _ in trace.skipped] == [3, 5, 7]
    assert "num_gpus must be at least 1" in trace.skipped[0][1]
    assert trace.skipped[1][1].startswith("unknown model 'Nope'")
    assert "more than the cluster's 8" in trace.skipped[2][1]


def test_philly_blank_lines_and_crlf() -> None:
    trace = read_philly(["job_id,num_gpus,submit_time,duration,model\r\n", "\r\n", "0, 2 ,3,4.0,BERT\r\n"],
                        source="w.csv")
    (job,) = trace.jobs
    assert (job.num_gpus, job.line, job.model) == (2, 3, "BERT")


def test_trace_job_rejects_unknown_work_unit() -> None:
    with pytest.raises(ValueError, match="work_unit"):
        TraceJob(job_id="1", num_gpus=1, submit_time=0.0, work=1.0, work_unit="epochs", model="", job_class="A",
                 iter_time_s=1.0, line=0, source="x")


def test_seconds_job_runtime_is_its_work() -> None:
    job = TraceJob(job_id="1", num_gpus=1, submit_time=0.0, work=90.0, work_unit="seconds", model="",
                   job_class="A", iter_time_s=1.0, line=0, source="x")
    assert job.nominal_runtime_s == 90.0


# --------------------------------------------------------------------------- sacct


def test_sacct_fixture() -> None:
    trace = read_trace_file(DATA / "sacct-small.txt")
    by_id = {j.job_id: j for j in trace.jobs}
    # sorted by submit time, file order among equal times; steps dropped silently
    assert [j.job_id for j in trace.jobs] == ["1008", "1001", "1003", "1004_1", "1004_2"]
    assert [j.submit_time for j in trace.jobs] == [0.0, 120.0, 270.0, 420.0, 420.0]
    j = by_id["1001"]
    assert (j.num_gpus, j.work, j.work_unit, j.iter_time_s, j.job_class, j.line) == (2, 3600.0, "seconds", 1.0, "A", 2)
    assert j.nominal_runtime_s == 3600.0 and j.name == "resnet-pal:class=A" and j.gpus_per_node is None
    j = by_id["1003"]
    assert (j.num_gpus, j.job_class, j.gpus_per_node, j.work) == (8, "B", 4, 7200.0)
    assert by_id["1004_1"].num_gpus == 1 and by_id["1004_1"].job_class == "A"  # typed TRES only
    assert by_id["1004_2"].work == 60.0
    assert by_id["1008"].num_gpus == 2  # a100=1 + h100=1, no untyped total
    assert trace.skipped == (
        (6, "no GPUs"),
        (13, "never started (Start None)"),
        (14, "never started (Start Unknown)"),
        (15, "still running (End Unknown)"),
    )


def test_sacct_header_variants_and_reqtres_fallback() -> None:
    lines = [
        "JobID|Start|End|Submit|ReqTRES|\n",  # sacct -p: trailing '|'
        "7|2026-01-01T00:01:00|2026-01-01T00:02:00|2026-01-01T00:00:00|cpu=1,gres/gpu=3,node=1|\n",
    ]
    (job,) = read_sacct(lines, source="s").jobs
    assert (job.num_gpus, job.work, job.submit_time, job.job_class, job.name) == (3, 60.0, 0.0, "A", "")
    with pytest.raises(InputError, match=r"^s:1: missing column\(s\) End, AllocTRES or ReqTRES"):
        read_sacct(["JobID|Submit|Start\n"], source="s")


@pytest.mark.parametrize(("row", "reason"), [
    ("9|x pal:class=Z|2026-01-01T00:00:00|2026-01-01T00:00:00|2026-01-01T00:01:00|gres/gpu=1",
     "unknown class 'Z' in job name"),
    ("9|x|yesterday|2026-01-01T00:00:00|2026-01-01T00:01:00|gres/gpu=1", "Submit 'yesterday' is not a timestamp"),
    ("9|x|2026-01-01T00:00:00|2026-01-01T00:02:00|2026-01-01T00:01:00|gres/gpu=1", "End 2026-01-01T00:01:00 is before"),
    ("9|x|2026-01-01T00:00:00|2026-01-01T00:00:00|2026-01-01T00:01:00|gres/gpu=9", "job needs 9 GPUs"),
    ("9|x|a|b|gres/gpu=1", "row has 5 fields, the header has 6"),
])
def test_sacct_invalid_rows(row: str, reason: str) -> None:
    lines = ["JobID|JobName|Submit|Start|End|AllocTRES\n", row + "\n"]
    with pytest.raises(InputError, match=rf"^s:2: {reason}"):
        read_sacct(lines, source="s", max_gpus=8)
    assert read_sacct(lines, source="s", max_gpus=8, skip_invalid=True).skipped[0][0] == 2


def test_sacct_default_class_and_zero_runtime() -> None:
    lines = ["JobID|JobName|Submit|Start|End|AllocTRES\n",
             "1|a|2026-01-01T00:00:00|2026-01-01T00:00:00|2026-01-01T00:00:00|gres/gpu=1\n",
             "2|b|2026-01-01T00:00:00|2026-01-01T00:00:00|2026-01-01T00:00:09|gres/gpu=1\n"]
    trace = read_sacct(lines, source="s", default_class="C")
    assert [(j.job_id, j.job_class) for j in trace.jobs] == [("2", "C")]
    assert trace.skipped == ((2, "ran 0 s"),)
    with pytest.raises(InputError, match="default class"):
        read_sacct(lines, source="s", default_class="X")


@pytest.mark.parametrize(("tres", "gpus"), [
    ("billing=8,cpu=8,gres/gpu:a100=2,gres/gpu=2,mem=32G,node=1", 2),
    ("cpu=4,gres/gpu:a100=1,gres/gpu:h100=2", 3),
    ("cpu=4,mem=1G", 0),
    ("", 0),
    ("gres/gpumem=40G,gres/gpu=4", 4),
])
def test_tres_gpus(tres: str, gpus: int) -> None:
    assert tres_gpus(tres) == gpus


@pytest.mark.parametrize(("nodelist", "n"), [
    ("gpu01", 1), ("gpu[01-03,07]", 4), ("a[1-2]-ib[0-1],login1", 5), ("None assigned", 0), ("", 0),
])
def test_count_hosts(nodelist: str, n: int) -> None:
    assert count_hosts(nodelist) == n


def test_trace_file_errors(tmp_path: Path) -> None:
    weird = tmp_path / "weird.txt"
    weird.write_text("a;b;c\n1;2;3\n")
    with pytest.raises(InputError, match="cannot tell the trace format"):
        read_trace_file(weird)
    with pytest.raises(InputError, match="cannot read the trace"):
        read_trace_file(tmp_path / "missing.csv")
    trace = read_trace_file(DATA / "philly-small.csv", format="philly", max_gpus=12, skip_invalid=True)
    assert len(trace.jobs) == 7 and trace.skipped[0][0] == 9  # the 16-GPU PointNet job


# --------------------------------------------------------------------------- synthetic


def test_synthetic_is_deterministic_per_seed() -> None:
    a, b, c = generate(500, seed=7), generate(500, seed=7), generate(500, seed=8)
    assert a == b and a != c
    assert [j.job_id for j in a.jobs] == [str(i) for i in range(500)]


def test_synthetic_distribution_is_philly_like() -> None:
    trace = generate(20_000, seed=3, mean_interarrival_s=30.0)
    jobs = trace.jobs
    submits = [j.submit_time for j in jobs]
    assert submits == sorted(submits) and submits[0] > 0
    assert submits[-1] / len(jobs) == pytest.approx(30.0, rel=0.05)
    sizes = Counter(j.num_gpus for j in jobs)
    assert sizes[1] / len(jobs) == pytest.approx(401 / 960, abs=0.02)
    assert set(sizes) == {g for _, g in SIA_PHILLY_MODEL_GPUS}
    models = Counter(j.model for j in jobs)
    assert models["vgg19"] / len(jobs) == pytest.approx(401 / 960, abs=0.02)
    assert all(j.job_class == MODEL_CLASS[j.model] and j.iter_time_s == MODEL_ITER_TIME_S[j.model] for j in jobs)
    assert all(j.model == "vgg19" for j in jobs if j.num_gpus == 1)
    work = [j.work for j in jobs]
    assert all(w >= 60 and w == int(w) for w in work)
    assert 900 < statistics.median(work) < 2000  # the traces' median is 1404 iterations
    assert max(work) > 100 * statistics.median(work)  # heavy tail (resnet50)


def test_synthetic_max_gpus_and_mixes() -> None:
    small = generate(2_000, seed=1, max_gpus=8)
    assert max(j.num_gpus for j in small.jobs) <= 8 and any(j.num_gpus == 8 for j in small.jobs)
    mixed = generate(2_000, seed=1, gpu_mix={1: 1.0, 2: 1.0}, model_mix={"BERT": 1.0})
    assert {j.num_gpus for j in mixed.jobs} == {1, 2} and {j.model for j in mixed.jobs} == {"BERT"}
    with pytest.raises(InputError, match="unknown model"):
        generate(1, seed=1, model_mix={"bert": 1.0})
    with pytest.raises(InputError, match="no job size"):
        generate(1, seed=1, model_mix={"BERT": 1.0}, max_gpus=4)
    assert generate(0, seed=1).jobs == ()


def test_synthetic_100k_jobs_are_all_generated() -> None:
    # speed is measured in bench/sim_speed.py, not asserted here (machines are noisy)
    trace = generate(100_000, seed=1)
    assert len(trace.jobs) == 100_000 and len({j.job_id for j in trace.jobs}) == 100_000


# --------------------------------------------------------------------------- artifact variability


def test_fixture_profiles_normalise_by_median_of_all_rows() -> None:
    prof = load_artifact_profiles(DATA / "variability")
    assert set(prof.rows) == {"A", "B", "C", "D"} and prof.rows["B"] == prof.rows["C"]
    assert all(len(v) == 10 for v in prof.rows.values())
    assert prof.files["A"].endswith("resnet-longhorn-agg.csv")
    # resnet fixture: first perf 419.4316536, median of the 10 rows (333.8..., 335.7...)/2
    assert prof.medians["A"] == pytest.approx((335.7184404 + 332.9641086) / 2)
    assert prof.rows["A"][0] == pytest.approx(419.4316536 / prof.medians["A"])
    assert statistics.median(prof.rows["D"]) == pytest.approx(1.0)


def test_artifact_draw_is_deterministic_and_draws_rows_in_class_order() -> None:
    prof = load_artifact_profiles(DATA / "variability")
    rng1, rng2 = random.Random(42), random.Random(42)
    a, b = draw_artifact(prof, 8, rng1), draw_artifact(prof, 8, rng2)
    assert a == b and rng1.getstate() == rng2.getstate()
    # exactly the artifact's call pattern: per GPU, one choice per class A, B, C, D
    ref = random.Random(42)
    expected = [{c: ref.choice(list(prof.rows[c])) for c in "ABCD"} for _ in range(8)]
    assert [g.perfvar for g in a] == expected and rng1.random() == ref.random()
    assert all(g.perfvar[c] in prof.rows[c] for g in a for c in "ABCD")
    assert all(set(g.slowdown) == {"A", "B", "C", "D"} for g in a)


def test_missing_profile_file_is_named(tmp_path: Path) -> None:
    for name in ("resnet-longhorn-agg.csv", "bert-longhorn-agg.csv"):
        (tmp_path / name).write_text((DATA / "variability" / name).read_text())
    with pytest.raises(InputError, match=r"no pagerank\*\.csv profile"):
        load_artifact_profiles(tmp_path)
    (tmp_path / "pagerank-longhorn-agg.csv").write_text("uuid,perf\ng0,1.0\ng1,oops\n")
    with pytest.raises(InputError, match=r"pagerank-longhorn-agg\.csv:3: perf 'oops' is not a number"):
        load_artifact_profiles(tmp_path)
    (tmp_path / "pagerank-longhorn-agg.csv").write_text("uuid,time\ng0,1.0\n")
    with pytest.raises(InputError, match=r"pagerank-longhorn-agg\.csv:1: no 'perf' column"):
        load_artifact_profiles(tmp_path)


def test_artifact_slowdowns_outlier_gets_its_own_cluster() -> None:
    values = [1.0] * 10 + [1.1] * 10 + [3.0]  # 3.0 > mean + 3 sample-std -> K = 3
    sf = artifact_slowdowns(values)
    assert sf[0] == pytest.approx(1.0 / 1.1) and sf[10] == 1.0 and sf[-1] == pytest.approx(3.0 / 1.1)


def test_artifact_slowdowns_two_clusters_have_no_sf_of_one() -> None:
    sf = artifact_slowdowns([1.0, 1.2, 1.0, 1.2])  # K = 2, median centroid 1.1
    assert sf == pytest.approx([1.0 / 1.1, 1.2 / 1.1, 1.0 / 1.1, 1.2 / 1.1])


def test_artifact_slowdowns_degenerate_inputs() -> None:
    assert artifact_slowdowns([]) == [] and artifact_slowdowns([1.3]) == [1.0]
    assert artifact_slowdowns([1.1, 1.1, 1.1]) == [1.0, 1.0, 1.0]


@pytest.mark.artifact
def test_artifact_draw_for_64_gpus_on_longhorn(artifact_dir: Path) -> None:
    prof = load_artifact_profiles(artifact_dir / "variability" / "longhorn")
    assert {c: len(v) for c, v in prof.rows.items()} == {"A": 1404, "B": 1096, "C": 1096, "D": 880}
    rng = random.Random(42)
    var = draw_artifact(prof, 64, rng)
    ranges = {"A": (0.91, 3.57), "B": (0.965, 1.30), "C": (0.965, 1.30), "D": (0.968, 1.005)}
    for c, (lo, hi) in ranges.items():
        assert all(lo <= g.perfvar[c] <= hi for g in var), c
    # the values the artifact computes (pandas + random.seed(42) + random.choice; checked)
    assert var[0].perfvar["A"] == pytest.approx(0.9533856925372175, abs=1e-15)
    assert var[0].perfvar["D"] == pytest.approx(0.9994002586028561, abs=1e-15)
    assert var[63].perfvar["C"] == pytest.approx(0.9684114614471304, abs=1e-15)
    # its binning (sklearn KMeans k-means++, random_state 1, n_init 10; checked): A has one outlier
    expected_sf = {"A": [0.91284149, 1.0, 2.594586886], "B": [0.98508872, 1.01491128],
                   "C": [0.987556053, 1.012443947], "D": [0.985472866, 1.014527134]}
    for c, levels in expected_sf.items():
        assert sorted({round(g.slowdown[c], 6) for g in var}) == [round(x, 6) for x in levels], c
    assert sum(1 for g in var if g.slowdown["A"] > 2) == 1
    assert rng.random() == 0.4813584179710395  # the global state the random policies continue from


# --------------------------------------------------------------------------- classification, cluster


def test_from_classification_fills_unprofiled_with_worst() -> None:
    gpus = [
        ClassifiedGpu("g0", "n1", "H100", None, {"A": Measured(0.98), "B": Measured(1.0, 1.02)}),
        ClassifiedGpu("g1", "n1", "H100", None, {"A": Measured(1.3), "B": Measured(None)}),
        ClassifiedGpu("g2", "n2", "H100", None, {}),
    ]
    var = from_classification(gpus, ["A", "B", "D"])
    assert [v.uuid for v in var] == ["g0", "g1", "g2"] and var[2].node == "n2"
    assert var[2].slowdown["A"] == 1.3 and var[1].slowdown["B"] == 1.0 and var[2].slowdown["B"] == 1.0
    assert var[0].perfvar["B"] == 1.02 and var[0].perfvar["A"] == 0.98
    assert all(v.slowdown["D"] == 1.0 for v in var)  # nobody profiled for D


def test_a_fast_outliers_perfvar_counts_as_its_factor() -> None:
    """A fast outlier (PerfVar far below the median) is a measurement to check, not a speed to
    chase: the model takes its slowdown factor as its pace; a slow one keeps its PerfVar."""
    gpus = [ClassifiedGpu("fast", "n1", "H100", 0, {"A": Measured(1.0, 0.6, fast=True)}),
            ClassifiedGpu("slow", "n1", "H100", 1, {"A": Measured(1.4, 1.45)})]
    fast, slow = from_classification(gpus, ["A"])
    assert (fast.perfvar["A"], fast.slowdown["A"]) == (1.0, 1.0)
    assert (slow.perfvar["A"], slow.slowdown["A"]) == (1.45, 1.4)


def test_cluster_from_variability_is_node_major() -> None:
    var = [GpuVariability(perfvar={"A": 1.0 + i / 100, "B": 1.0}, slowdown={"A": 1.0 + i / 10, "B": 1.0}, uuid=f"u{i}")
           for i in range(6)]
    cluster = cluster_from_variability(var, nodes=3, gpus_per_node=2)
    assert cluster.node_names == ("n0", "n1", "n2") and cluster.node_gpus == ((0, 1), (2, 3), (4, 5))
    assert cluster.gpus[3].uuid == "u3" and cluster.gpus[3].slot == 1
    assert cluster.slowdown["A"][5] == 1.5 and cluster.perfvar["A"][2] == 1.02
    named = [GpuVariability(perfvar={"A": 1.0}, slowdown={"A": 1.0}, node=f"gpu{i // 2}") for i in range(4)]
    assert cluster_from_variability(named, 2, 2).node_names == ("gpu0", "gpu1")
    with pytest.raises(ValueError, match="6 GPUs of variability for 2 x 2"):
        cluster_from_variability(var, 2, 2)
    mixed = named[:3] + [GpuVariability(perfvar={"A": 1.0}, slowdown={"A": 1.0}, node="gpu0")]
    with pytest.raises(ValueError, match="should share one node"):
        cluster_from_variability(mixed, 2, 2)
