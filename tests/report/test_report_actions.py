"""One story in every report, graded outlier actions, tables that fit 80 columns."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import create_engine, update

from tests.support.fleetgen import records
from pal_slurm.classification.actions import DRAIN, PLACEMENT, REPROFILE, ActionPolicy, Finding, drain_plan, grade_gpu, short_uuid
from pal_slurm.cli.main import cli
from pal_slurm.cli.report_cmd import show_report
from pal_slurm.db.classification_store import BinRow, ResultRow, StoredClassification
from pal_slurm.db.models import Gpu
from pal_slurm.ingest.jsonl import dump_jsonl
from pal_slurm.report.data import build_report, group_summary
from pal_slurm.report.page import render_html
from conftest import ARTIFACT_CONFIG

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
CLASSES = {"A": "resnet50", "B": "bert", "D": "pagerank"}
POLICY = ActionPolicy(compute_benchmarks=("resnet50", "bert", "sgemm"))  # the artifact's names, as the findings below


def grade(pv: float, bench: str = "resnet50", node: str | None = "gpu007", **kw):  # type: ignore[no-untyped-def]
    finding = Finding(bench, pv, kw.pop("last", NOW - timedelta(days=1)), kw.pop("spread", 0.01))
    return grade_gpu("GPU-0a1b2c3d-0000-1111-2222-333344445555", node, "V100", [finding], job_classes=CLASSES,
                     policy=kw.pop("policy", POLICY), now=NOW, **kw)


# ------------------------------------------------------------------ item 6: graded actions


def test_a_mildly_slow_gpu_is_left_to_placement_with_the_classes_that_still_land_there() -> None:
    a = grade(1.12, "bert")
    assert a.action == PLACEMENT
    assert a.classes_avoiding == ("B",) and a.classes_landing == ("A", "D")
    assert "1.120 on bert" in a.reason and "(A, D)" in a.reason


def test_a_severely_slow_gpu_on_a_compute_benchmark_is_drained_but_not_on_a_memory_one() -> None:
    assert grade(1.3).action == DRAIN and "PerfVar 1.300 on resnet50 (>= 1.3)" in grade(1.3).reason
    assert grade(1.29).action == PLACEMENT
    assert grade(2.8, "pagerank").action == PLACEMENT  # not a compute benchmark by default
    assert grade(1.2, policy=ActionPolicy(drain_perfvar=1.15, compute_benchmarks=POLICY.compute_benchmarks)).action == DRAIN  # configurable


@pytest.mark.parametrize("node", [None, "", "-", "unknown", "Unknown", " ? "])
def test_an_unknown_node_is_never_drained(node: str | None) -> None:
    a = grade(2.8, node=node, ecc_uncorrected=5)
    assert a.action == REPROFILE and "node unknown" in a.reason
    assert drain_plan([a]) == []


def test_stale_or_noisy_measurements_are_re_profiled_first() -> None:
    stale = grade(1.5, last=NOW - timedelta(days=45))
    assert stale.action == REPROFILE and "45 days ago" in stale.reason
    noisy = grade(1.5, spread=0.25)
    assert noisy.action == REPROFILE and "spread 25 %" in noisy.reason
    assert grade(1.5, spread=0.25, policy=ActionPolicy(noisy_spread=0.3, compute_benchmarks=POLICY.compute_benchmarks)).action == DRAIN


def test_hardware_errors_drain_and_an_impossibly_fast_gpu_is_a_measurement_error() -> None:
    assert grade(1.11, ecc_uncorrected=2).action == DRAIN
    assert "3 retired memory pages" in grade(1.11, retired_pages=3).reason
    assert grade(1.11, ecc_uncorrected=2, policy=ActionPolicy(drain_ecc_uncorrected=0, compute_benchmarks=POLICY.compute_benchmarks)).action == PLACEMENT
    fast = grade(0.4)
    assert fast.action == REPROFILE and "check the measurement" in fast.reason


@pytest.mark.parametrize("node", ["gpu[01-16]", "gpu01,gpu02", "gpu01 ", "gpu 01", "gpu01\n", "ALL", "all"])
def test_a_node_name_that_is_not_one_slurm_node_is_never_drained(node: str) -> None:
    """NodeName= takes a hostlist: a stored name like gpu[01-16] would drain sixteen nodes, and
    `ALL` every node."""
    a = grade(2.8, node=node, ecc_uncorrected=5)
    assert a.action == REPROFILE and "not one Slurm node name" in a.reason
    assert drain_plan([a]) == []


def test_hardware_evidence_outranks_a_fast_result_on_another_benchmark() -> None:
    findings = [Finding("resnet50", 2.5, NOW), Finding("pagerank", 0.5, NOW)]
    ecc = grade_gpu("GPU-0a1b2c3d-0000-1111-2222-333344445555", "gpu007", "V100", findings, job_classes=CLASSES,
                    policy=POLICY, now=NOW, ecc_uncorrected=5)
    assert ecc.action == DRAIN and "5 uncorrected ECC errors" in ecc.reason
    mixed = grade_gpu("GPU-0a1b2c3d-0000-1111-2222-333344445555", "gpu007", "V100", findings, job_classes=CLASSES,
                      policy=POLICY, now=NOW)
    assert mixed.action == DRAIN and "PerfVar 2.500 on resnet50" in mixed.reason  # slow on a compute benchmark


def test_drain_plan_is_one_line_per_node_for_the_severe_gpus_only() -> None:
    one = grade(1.5)
    two = grade_gpu("GPU-ffffffff-0000-1111-2222-333344445555", "gpu007", "V100", [Finding("sgemm", 1.4, NOW)],
                    job_classes=CLASSES, policy=POLICY, now=NOW)
    mild = grade_gpu("GPU-eeeeeeee-0000-1111-2222-333344445555", "gpu009", "V100", [Finding("bert", 1.1, NOW)],
                     job_classes=CLASSES, policy=POLICY, now=NOW)
    plan = drain_plan([one, two, mild])
    assert plan == [("gpu007", "pal: GPU 0a1b2c3d,ffffffff: PerfVar 1.500 on resnet50 (>= 1.3)")]


def test_short_uuids_only_shorten_nvml_uuids() -> None:
    assert short_uuid("GPU-2db055de-45a8-c391-10c1-92eb28fd3ac5") == "2db055de"
    assert short_uuid("c002-4-1") == "c002-4-1" and short_uuid("GPU-broken-00") == "GPU-broken-00"


# ------------------------------------------------------------------ item 5: one story everywhere


def _row(uuid: str, node: str | None, bench: str, pv: float, sf: float, outlier: bool = False) -> ResultRow:
    return ResultRow(uuid=uuid, node=node, model="V100", benchmark=bench, runs=5, median_score=100 * pv,
                     perfvar=pv, bin=1 if outlier else 0, slowdown=sf, outlier=outlier, profiled=True,
                     last_profiled=NOW - timedelta(days=1), run_spread=0.01)


def _stored() -> StoredClassification:
    """resnet50: 4 regular GPUs in one bin and a 1.12047 outlier (1.12047 -> 1.1205 -> 1.121 if rounded twice)."""
    pvs = [0.98449, 0.99, 1.0, 1.01]
    results = [_row(f"GPU-{i:08x}-0000-1111-2222-333344445555", f"gpu{i:03d}", "resnet50", pv, 1.0)
               for i, pv in enumerate(pvs)]
    results.append(_row("GPU-deadbeef-0000-1111-2222-333344445555", "gpu009", "resnet50", 1.12047, 1.12047, True))
    bins = (BinRow(0, 0.996, 1.0, 4, False, 0.98449, 1.01, model="V100", benchmark="resnet50"),
            BinRow(1, 1.12047, 1.12047, 1, True, 1.12047, 1.12047, model="V100", benchmark="resnet50"))
    return StoredClassification(version=3, created_at=NOW, params={}, results=tuple(results), bins=bins,
                                job_classes={"A": "resnet50"})


def test_demo_summary_terminal_json_and_html_tell_the_same_story(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    stored = _stored()
    data = build_report(stored, now=NOW)
    item = data["benchmarks"][0]
    # JSON: the stored values; one regular bin and one outlier
    assert item["perfvar"]["max"] == 1.12047 and item["regular_bins"] == 1 and len(item["outliers"]) == 1
    # demo summary
    assert group_summary(item) == "resnet50: 1 bin (1.000x4), 1 outlier"
    # terminal
    monkeypatch.setenv("COLUMNS", "80")
    show_report(json.loads(json.dumps(data)))
    term = capsys.readouterr().out
    line = next(ln for ln in term.splitlines() if ln.startswith("resnet50"))
    pv = item["perfvar"]
    # at 80 columns the PerfVar range stays, as one min-max cell, next to the p5-p95 one
    cells = line.split()
    assert "0.984-1.120" in cells and f"{pv['p5']:.3f}-{pv['p95']:.3f}" in cells and cells[-2:] == ["1.000x4", "1"]
    assert "1.121" not in term and "0.985" not in term  # min 0.98449 is not 0.985 (0.9845) anywhere
    # HTML: the same rounded numbers, the same bins, the same outlier count
    page = render_html(stored, data)
    cells = re.findall(r'<td class="num[^"]*">([^<]*)</td>', page)
    assert "1.120" in cells and "1.121" not in page and "0.984" in cells
    assert "1.000×4" in page and "1.120×1" not in page
    row = re.search(r"<td>resnet50</td>(.*?)</tr>", page).group(1)  # type: ignore[union-attr]
    assert re.findall(r'<td class="num[^"]*">([^<]*)</td>', row)[-1] == "1"
    # and the outlier's action is the same text in JSON, terminal and HTML
    rec = item["outlier_details"][0]["recommendation"]
    assert rec.startswith("placement handles it: PerfVar 1.120 on resnet50") and rec in page.replace("&#x27;", "'")
    assert "placement" in term and "deadbeef" in term


# ------------------------------------------------------------------ item 7: 80 columns


NODES = ["c002-node-004", "c117-node-012", "gpu-rack-b-n021", "login-like-name-99"]


@pytest.fixture(scope="module")
def fleet_db(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    tmp = tmp_path_factory.mktemp("fit")
    uuids = [f"GPU-{i:08x}-45a8-c391-10c1-92eb28fd3ac5" for i in range(16)]
    node_of = {u: NODES[i % 4] for i, u in enumerate(uuids)}
    factors = {u: 1.0 + 0.04 * (i % 3) for i, u in enumerate(uuids)}
    factors[uuids[5]] = 1.55  # severe
    factors[uuids[9]] = 1.35  # severe, but its runs are noisy (below)
    factors[uuids[12]] = 1.29  # mild, but the inventory reports uncorrected ECC errors (below)
    factors[uuids[6]] = 1.6  # severe, with one broken run (below): not "noisy"
    recs = []
    for bench in ("resnet50", "bert", "pagerank", "sgemm"):
        recs += records(factors, benchmark=bench, model="Tesla V100-SXM2-16GB", node_of=node_of, tag=bench)
    noise = iter([0.8, 1.0, 1.7, 1.2] * 4)
    recs = [replace(r, score=r.score * next(noise)) if r.gpu.uuid == uuids[9] else r for r in recs]
    # one resnet50 run 11x off the GPU's own median (within the import's 10x of the fleet's):
    # classification drops it as broken, and so must the spread the actions read
    broken = next(i for i, r in enumerate(recs) if r.gpu.uuid == uuids[6] and r.benchmark == "resnet50")
    recs[broken] = replace(recs[broken], score=recs[broken].score * 0.09)
    (tmp / "fleet.jsonl").write_text(dump_jsonl(recs))
    (tmp / "pal.toml").write_text("[classification]\nbenchmark_set = \"pal-artifact\"\n[report]\nstale_after_days = 100000\n")
    url = f"sqlite:///{tmp / 'pal.db'}"
    runner = CliRunner()
    for args in (["db", "upgrade"], ["profile", "import", str(tmp / "fleet.jsonl")], ["classify", "--allow-partial"]):
        res = runner.invoke(cli, ["--db", url, *args], env={"PAL_CONFIG": ARTIFACT_CONFIG})
        assert res.exit_code == 0, res.output
    engine = create_engine(url)
    with engine.begin() as conn:  # what `pal profile inventory` records
        conn.execute(update(Gpu).where(Gpu.uuid == uuids[12]).values(ecc_uncorrected=2, retired_pages=0))
    engine.dispose()
    return url, tmp / "pal.toml"


def _pal(db: tuple[str, Path], *args: str, columns: int | None = None, code: int = 0) -> str:
    # no Slurm commands here, even under `make test` (whose SLURM_CONF names the test cluster):
    # `gpus drain` then plans without Slurm's node list, and says so (a PATH without sinfo fails
    # at once; a missing SLURM_CONF would make sinfo retry for a minute)
    no_slurm = db[1].parent / "no-slurm-bin"
    no_slurm.mkdir(exist_ok=True)
    env = {"PAL_CONFIG": str(db[1]), "PATH": str(no_slurm)} | (
        {"COLUMNS": str(columns)} if columns else {})
    res = CliRunner().invoke(cli, ["--db", db[0], *args], env=env)
    assert res.exit_code == code, res.output
    return res.output


@pytest.mark.parametrize("width", [80, 120])
def test_report_and_gpus_fit_the_terminal_and_cut_nothing(fleet_db, width: int) -> None:  # type: ignore[no-untyped-def]
    data = json.loads(_pal(fleet_db, "report", "--format", "json"))
    gpus = json.loads(_pal(fleet_db, "gpus", "--format", "json"))
    for args in (["report"], ["gpus"], ["gpus", "--actions"]):
        out = _pal(fleet_db, *args, columns=width)
        too_long = [ln for ln in out.splitlines() if len(ln) > width]
        assert not too_long, f"{args}: {too_long[0]!r}"
        assert "…" not in out and "..." not in out
    report = _pal(fleet_db, "report", columns=width)
    for item in data["benchmarks"]:  # every number of the benchmark's row, whole
        line = next(ln for ln in report.splitlines() if ln.startswith(item["benchmark"] + " "))
        pv = item["perfvar"]  # the PerfVar range and spread stay at 80 columns, as min-max and p5-p95
        assert f" {pv['min']:.3f}-{pv['max']:.3f} " in f" {line} "
        assert f" {pv['p5']:.3f}-{pv['p95']:.3f} " in f" {line} "
    table = _pal(fleet_db, "gpus", columns=width)
    for g in gpus:  # node name and slot whole (the short id where the width allows), every slowdown factor whole
        line = next(ln for ln in table.splitlines() if ln.split()[:2] == [g["node"], str(g["slot"])])
        assert width < 100 or g["uuid"][4:12] in line
        for c in g["classes"].values():
            assert re.search(rf"(?<![\d.]){c['slowdown']:.3f}!?(?![\d.])", line), (c, line)
    assert set(NODES) <= set(table.split())


def test_wide_shows_everything(fleet_db) -> None:  # type: ignore[no-untyped-def]
    out = _pal(fleet_db, "gpus", "--wide", columns=80)
    assert "GPU-00000005-45a8-c391-10c1-92eb28fd3ac5" in out and "Tesla V100-SXM2-16GB" in out
    assert "A bin" in out and "…" not in out
    report = _pal(fleet_db, "report", "--wide", columns=80)
    assert "p5" in report and "unprofiled" in report and "…" not in report


def test_gpus_actions_and_the_drain_dry_run(fleet_db) -> None:  # type: ignore[no-untyped-def]
    acts = json.loads(_pal(fleet_db, "gpus", "--actions", "--format", "json"))
    by_id = {a["uuid"][4:12]: a for a in acts}
    assert by_id["00000005"]["action"] == "drain" and by_id["00000005"]["node"] == NODES[1]
    assert by_id["00000009"]["action"] == "re-profile" and "runs spread" in by_id["00000009"]["reason"]
    assert by_id["0000000c"]["action"] == "drain" and "2 uncorrected ECC errors" in by_id["0000000c"]["reason"]
    assert by_id["00000006"]["action"] == "drain" and "on resnet50 (>= 1.3)" in by_id["00000006"]["reason"]
    assert all(a["action"] in ("drain", "re-profile", "placement") and a["reason"] for a in acts)
    # --node and --model keep only those GPUs' actions
    on_node = json.loads(_pal(fleet_db, "gpus", "--actions", "--node", NODES[1], "--format", "json"))
    assert on_node == [a for a in acts if a["node"] == NODES[1]] and 0 < len(on_node) < len(acts)
    # a model nobody has is an error that lists the models, never an empty answer
    out = _pal(fleet_db, "gpus", "--actions", "--model", "no-such-gpu", "--format", "json", code=1)
    assert "no GPU of model 'no-such-gpu'; models: Tesla V100-SXM2-16GB" in out
    out = _pal(fleet_db, "gpus", "drain")
    assert f'would run: scontrol update NodeName={NODES[1]} State=DRAIN Reason="pal: GPU 00000005: ' in out
    assert "dry run" in out and out.count("would run:") == len({a["node"] for a in acts if a["action"] == "drain"})
    assert "Slurm's node list not read" in out and "the plan is not checked against it" in out
    # a --node with nothing to drain is named, not dropped in silence
    some = _pal(fleet_db, "gpus", "drain", "--node", NODES[1], "--node", NODES[3])
    assert f"{NODES[3]}: no GPU there is graded `drain`; not drained" in some
    assert some.count("would run:") == 1 and f"NodeName={NODES[1]} " in some
    # and a node the database does not know is a typo, refused before anything is planned
    typo = _pal(fleet_db, "gpus", "drain", "--node", NODES[1], "--node", "gpu-healthy", code=1)
    assert "no GPU on node gpu-healthy; nodes: " in typo and "would run" not in typo
    # --apply without Slurm's node list drains nothing and says why
    bad = _pal(fleet_db, "gpus", "drain", "--apply", code=1)
    assert "Slurm's node list not read" in bad and "nothing drained" in bad and "Traceback" not in bad
    # options before `drain` are refused, not silently dropped (they would drain every planned node)
    bad = _pal(fleet_db, "gpus", "--node", NODES[1], "drain", "--apply", code=2)
    assert "--node before `drain` would be ignored" in bad


def test_a_table_that_cannot_fit_gets_long_lines_never_cut_cells(capsys: pytest.CaptureFixture[str]) -> None:
    from rich.console import Console

    from pal_slurm.cli.render import Column, print_table

    rows = [{"node": "a-very-long-node-name-that-is-kept-whole-0001", "n": 1.23456}]
    print_table(rows, [Column("node", lambda r: r["node"]), Column("x", lambda r: r["n"], "right")],
                out=Console(width=30, soft_wrap=False))
    out = capsys.readouterr().out
    assert "a-very-long-node-name-that-is-kept-whole-0001" in out and "1.235" in out and "…" not in out


def test_a_gpu_every_class_sees_slow_is_given_out_last() -> None:
    a = grade_gpu("GPU-0a1b2c3d-0000-1111-2222-333344445555", "gpu007", "V100",
                  [Finding(b, 1.1, NOW) for b in ("resnet50", "bert", "pagerank")], job_classes=CLASSES,
                  policy=POLICY, now=NOW)
    assert a.action == PLACEMENT and a.classes_landing == () and "gives it out last" in a.reason


@pytest.mark.parametrize("run_ratio", [2.0, 10.0])
def test_the_run_spread_drops_the_runs_the_stored_run_ratio_dropped(tmp_path: Path, run_ratio: float) -> None:
    """The spread the actions read leaves out the runs classification dropped as broken, with
    the run_ratio that classification used (stored with its params), not the default."""
    from pal_slurm.db.classification_store import latest_run, load_classification
    from pal_slurm.db.engine import make_engine, session_scope

    uuids = [f"GPU-{i:08x}-0000-0000-0000-000000000000" for i in range(8)]
    recs = records({u: 1.0 for u in uuids}, benchmark="resnet50")
    first = next(i for i, r in enumerate(recs) if r.gpu.uuid == uuids[0])
    recs[first] = replace(recs[first], score=recs[first].score * 3)  # 3x off its GPU's median
    (tmp_path / "fleet.jsonl").write_text(dump_jsonl(recs))
    (tmp_path / "pal.toml").write_text(f"[classification]\nbenchmark_set = \"pal-artifact\"\nrun_ratio = {run_ratio}\n")
    url = f"sqlite:///{tmp_path / 'pal.db'}"
    for args in (["db", "upgrade"], ["profile", "import", str(tmp_path / "fleet.jsonl")], ["classify", "--allow-partial"]):
        res = CliRunner().invoke(cli, ["--db", url, *args], env={"PAL_CONFIG": str(tmp_path / "pal.toml")})
        assert res.exit_code == 0, res.output
    engine = make_engine(url)
    with session_scope(engine) as s:
        run = latest_run(s)
        assert run is not None and run.params["run_ratio"] == run_ratio
        stored = load_classification(s, run, with_clocks=True)
    engine.dispose()
    spread = next(r.run_spread for r in stored.results if r.uuid == uuids[0])
    assert spread is not None
    if run_ratio == 2.0:  # the 3x run is broken: the other three are 0.1 % apart
        assert spread < 0.01
    else:  # within 10x: kept, and it widens the spread
        assert spread > 0.4
