"""A site's own fleet, end to end without Slurm: the shipped profiler feeds placement with the
default configuration, and nothing an admin runs succeeds on nothing."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import func, select

from conftest import DATA
from pal_slurm.classification.actions import DRAIN, PLACEMENT, REPROFILE, ActionPolicy, Finding, grade_gpu
from pal_slurm.cli.main import cli
from pal_slurm.db.engine import make_engine, session_scope
from pal_slurm.db.models import ClassificationRun
from pal_slurm.db.variability_store import load_variability
from pal_slurm.placement.decide import decide
from pal_slurm.placement.model import JobRequest, PlacementContext, Snapshot
from pal_slurm.placement.policies import get_policy
from pal_slurm.placement.variability import cluster_from_gpus

ENV = {"PAL_CONFIG": "", "PAL_DB_URL": ""}


def pal(url: str, *args: str, code: int = 0):
    res = CliRunner().invoke(cli, ["--db", url, *args], env=ENV)
    assert res.exit_code == code, f"exit {res.exit_code}: {res.output}"
    assert "Traceback" not in res.output
    return res


def profiled(tmp_path: Path, benchmarks: str | None = None) -> str:
    url = f"sqlite:///{tmp_path / 'site.db'}"
    pal(url, "db", "upgrade")
    pal(url, "profile", "run", "--backend", "sim", "--passes", "3", "--output", str(tmp_path / "fleet.jsonl"),
        "--sim-start", "2026-01-05T08:00:00",  # the same profile whenever the test runs
        *(["--benchmarks", benchmarks] if benchmarks else []))
    return url


def runs_stored(url: str) -> int:
    engine = make_engine(url)
    try:
        with session_scope(engine) as s:
            return int(s.scalar(select(func.count()).select_from(ClassificationRun)) or 0)
    finally:
        engine.dispose()


def test_the_shipped_profiler_feeds_every_class_and_placement_ranks_by_it(tmp_path: Path) -> None:
    """`pal profile run` then `pal classify`, default configuration: every job class gets every GPU,
    and the placer's decision step keeps a class-A job off the slowest GPU first fit would give it
    while a class-D job takes first fit."""
    url = profiled(tmp_path)
    out = json.loads(pal(url, "classify", "--format", "json").stdout)
    assert {c["job_class"]: (c["benchmark"], c["classified"]) for c in out["job_classes"]} == {
        "A": ("train-resnet50", 64), "B": ("train-bert", 64), "C": ("train-bert", 64), "D": ("stream", 64)}
    assert out["partial"] is False
    rows = json.loads(pal(url, "gpus", "--format", "json").stdout)
    assert len(rows) == 64 and all(r["classes"][c]["slowdown"] is not None for r in rows for c in "ABCD")

    engine = make_engine(url)
    try:
        with session_scope(engine) as s:
            stored = load_variability(s, ["A", "B", "C", "D"], at_slots_only=True)
    finally:
        engine.dispose()
    cluster = cluster_from_gpus(stored.gpus)
    sf_a, sf_d = cluster.sf("A"), cluster.sf("D")
    # a GPU defective for compute-bound training (the simulated fleet plants two) that memory-bound
    # work hardly notices: first fit's GPU below, with a fast one after it
    slow = max((g for g in range(cluster.size - 1) if sf_d[g] < 1.03), key=lambda g: sf_a[g])
    assert sf_a[slow] > 1.2, [round(sf_a[g], 3) for g in range(cluster.size)]
    fast = min(range(slow + 1, cluster.size), key=lambda g: sf_a[g])
    assert sf_d[slow] < 1.03 * sf_d[fast]  # within the noise for class D
    snap = Snapshot(cluster=cluster, free=frozenset({slow, fast}), running={}, now=0.0, expected_end={},
                    known_releases=())
    policy = get_policy("pal-guard")

    def chosen(job_class: str) -> tuple[int, ...]:
        req = JobRequest(id="1", gpus=1, job_class=job_class, submit_time=0.0, gpus_per_node=1, remaining_s=3600.0)
        return decide(policy, None, snap, [req], PlacementContext()).as_dict()["1"]

    assert chosen("A") == (fast,)  # by its slowdown factor
    assert chosen("D") == (slow,)  # stream sees no difference: Slurm's first fit kept


def test_a_class_nothing_measured_is_refused_and_nothing_is_stored(tmp_path: Path) -> None:
    url = profiled(tmp_path, "gemm,stream")
    res = pal(url, "classify", code=1)
    line = res.output.strip()
    assert "\n" not in line and line.startswith("pal: error: nothing stored")
    for part in ("A, B, C", "'train-resnet50'", "'train-bert'", "gemm-fp16 (64 GPUs", "--allow-partial",
                 "pal profile run --benchmarks"):
        assert part in line, part
    assert runs_stored(url) == 0
    partial = pal(url, "classify", "--allow-partial", "--format", "json")
    assert json.loads(partial.stdout)["partial"] is True and runs_stored(url) == 1
    assert "job class A (train-resnet50): no GPU: placed by nothing (stored anyway: --allow-partial)" in partial.stderr


def test_a_classification_of_nothing_is_refused(tmp_path: Path) -> None:
    url = profiled(tmp_path, "stream")
    res = pal(url, "classify", "--min-runs", "99999", code=1)
    assert "no GPU is classified" in res.output and runs_stored(url) == 0


def test_a_gpu_slow_on_gemm_is_drained_by_default() -> None:
    """The default compute benchmarks are the profiler's: a GPU 44.6 % slow on gemm-fp16 is drained."""
    action = grade_gpu("GPU-1", "gpu007", "V100", [Finding("gemm-fp16", 1.446, datetime.now(UTC))],
                       job_classes={"A": "train-resnet50", "D": "stream"}, policy=ActionPolicy(),
                       now=datetime.now(UTC))
    assert action.action == DRAIN and "1.446 on gemm-fp16" in action.reason


def test_an_unmeasured_class_is_not_said_to_be_insensitive() -> None:
    now = datetime.now(UTC)
    classes = {"A": "train-resnet50", "B": "train-bert", "C": "train-bert", "D": "stream"}
    found = [Finding("train-resnet50", 1.15, now)]
    some = grade_gpu("GPU-1", "gpu007", "V100", found, job_classes=classes, policy=ActionPolicy(), now=now,
                     measured=frozenset({"train-resnet50", "stream"}))
    assert some.action == PLACEMENT and some.classes_landing == ("D",)
    assert "land there (D)" in some.reason and "B, C unmeasured on it" in some.reason
    none = grade_gpu("GPU-1", "gpu007", "V100", [Finding("gemm-fp16", 1.15, now)], job_classes=classes,
                     policy=ActionPolicy(), now=now, measured=frozenset({"gemm-fp16"}))
    assert none.action == REPROFILE and "no job class is measured on it" in none.reason


def test_the_artifacts_names_are_an_import_mapping(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    pal(url, "db", "upgrade")
    csv = DATA / "artifact-csv" / "resnet-longhorn-agg.csv"
    res = pal(url, "profile", "import", "--input-format", "pal-artifact", "--benchmark", "resnet50", "--model", "V100",
              str(csv))
    assert "benchmark_set = \"pal-artifact\"" in res.stderr
    cfg = tmp_path / "pal.toml"
    cfg.write_text('[classification]\nbenchmark_set = "pal-artifact"\n')
    again = CliRunner().invoke(cli, ["--config", str(cfg), "--db", url, "profile", "import", "--input-format",
                                     "pal-artifact", "--benchmark", "resnet50", "--model", "V100", str(csv)], env=ENV)
    assert again.exit_code == 0 and "used by no job class" not in again.stderr


def test_the_demo_walks_the_site_path_and_fills_the_rollout_reports(tmp_path: Path) -> None:
    t0 = time.monotonic()
    res = CliRunner().invoke(cli, ["demo", "--dir", str(tmp_path / "d")], env=ENV)
    took = time.monotonic() - t0
    assert res.exit_code == 0, res.output
    assert took < 60, f"pal demo took {took:.1f} s"
    assert "shipped profiler" in res.output and "6/6 a simulated week in observe mode" in res.output
    url = f"sqlite:///{(tmp_path / 'd' / 'pal-demo.db').resolve()}"
    placements = json.loads(pal(url, "placements", "--format", "json").stdout)
    assert placements and all(p["outcome"] == "observe" and p["gpus"] for p in placements)
    savings = json.loads(pal(url, "report", "savings", "--since", "30d", "--format", "json").stdout)
    assert savings["jobs"] > 100 and savings["accounted_jobs"] == savings["jobs"]
    assert savings["lost_gpu_hours"] > 0 and savings["observe_compared_jobs"] > 100 and savings["gpus"]
    fairness = json.loads(pal(url, "report", "fairness", "--format", "json").stdout)
    assert fairness["fleet"]["jobs"] > 100 and fairness["fleet"]["gpu_hours"] > 0
    assert {r["name"] for r in fairness["rows"] if r["kind"] == "account"} == {"vision", "nlp", "graphs"}


@pytest.mark.parametrize("key", ["job_classes", "compute_benchmarks"])
def test_config_show_lists_the_sets_defaults(key: str) -> None:
    res = CliRunner().invoke(cli, ["config", "show", "--format", "json"], env=ENV)
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    if key == "job_classes":
        assert data["job_classes"]["A"]["benchmark"] == "train-resnet50"
        assert data["classification"]["benchmark_set"] == "profiler"
    else:
        assert data["report"]["compute_benchmarks"][0] == "gemm-fp16"


def test_the_demo_in_json_is_one_document_on_stdout(tmp_path: Path) -> None:
    res = CliRunner().invoke(cli, ["demo", "--dir", str(tmp_path / "d"), "--nodes", "4", "--format", "json"], env=ENV)
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["observe_week"]["jobs"] > 0 and data["observe_week"]["observed"] > 0
    assert "6/6" in res.stderr and "6/6" not in res.stdout


def test_sim_start_gives_a_reproducible_profile_and_needs_the_sim_backend(tmp_path: Path) -> None:
    one, two = tmp_path / "a", tmp_path / "b"
    one.mkdir()
    two.mkdir()
    scores = []
    for d in (one, two):
        url = profiled(d, "stream")
        engine = make_engine(url)
        with engine.connect() as conn:
            from sqlalchemy import text

            scores.append(conn.execute(text("SELECT score FROM profile_runs ORDER BY score")).scalars().all())
        engine.dispose()
    assert scores[0] == scores[1] and len(scores[0]) == 64 * 3
    res = CliRunner().invoke(cli, ["profile", "run", "--backend", "nvml", "--sim-start", "2026-01-05"], env=ENV)
    assert res.exit_code == 2 and "--sim-start applies to --backend sim only" in res.output
