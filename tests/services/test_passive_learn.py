"""`pal gpus learn` end to end on every database: the placer's ledger rows in, per-GPU passive
factors and fail-slow flags out, and every view of them (`pal gpus --passive`, the metrics, the
placer's factors with `passive = use`)."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import Engine, select

from pal_slurm.cli.main import cli
from pal_slurm.config import DatabaseConfig, PalConfig
from pal_slurm.db.accounting_store import AccountingSink
from pal_slurm.db.engine import session_scope
from pal_slurm.db.models import Gpu, GpuFlag, GpuPassiveSpeed
from pal_slurm.db.passive_store import FAIL_SLOW, SlotGpu, load_passive, load_runs, slot_holder
from pal_slurm.placer.factors import load_factors, with_passive
from pal_slurm.savings import JobAccount
from pal_slurm.services.passive import learn

CLASSES = ("A", "B", "C", "D")
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _classified(engine: Engine, tmp_path: Path) -> PalConfig:
    """The demo's 16 GPUs imported and classified on `engine` (pal_slurm.demo.cluster_gpus.make_db's steps)."""
    from pal_slurm.demo.cluster_gpus import records
    from pal_slurm.ingest.jsonl import dump_jsonl
    from pal_slurm.services.classification import run_classification
    from pal_slurm.services.ingest import import_files

    jsonl = tmp_path / "profiles.jsonl"
    jsonl.write_text(dump_jsonl(records()), encoding="utf-8")
    cfg = PalConfig(database=DatabaseConfig(url=engine.url.render_as_string(hide_password=False)), data_dir=tmp_path)
    import_files(engine, [jsonl], "jsonl")
    run_classification(engine, cfg, note="passive test")
    return cfg


def _ledger(engine: Engine, *, slow: tuple[str, int] | None, per_gpu: int = 12, ratio: float = 1.5) -> dict:
    """Recurring 1-GPU jobs of class A, each GPU running every fingerprint in turn, their run time
    the fingerprint's base x the GPU's benchmark factor (x `ratio` on `slow`), with a small
    deterministic jitter; written through the placer's accounting sink, as the placer does."""
    factors = load_factors(engine, CLASSES).by_slot
    slots = sorted(factors)
    sink = AccountingSink(lambda: engine)
    recs = []
    k = 0
    for i in range(per_gpu):
        for n, slot in enumerate(slots):
            fp = f"fp{(n + i) % 8:02d}"
            base = 600.0 + 60.0 * ((n + i) % 8)
            runtime = base * factors[slot].slowdown["A"] * (ratio if slot == slow else 1.0)
            runtime *= 1.0 + 0.004 * math.sin(k)
            ended = NOW - timedelta(hours=2 * (per_gpu - i)) + timedelta(seconds=k)
            k += 1
            recs.append(JobAccount(job_id=str(k), mode="observe", job_class="A", partition="gpu", account="a",
                                   user="u", gpus=((slot[0], slot[1], factors[slot].slowdown["A"]),),
                                   started_at=ended - timedelta(seconds=runtime), ended_at=ended, runtime_s=runtime,
                                   factor=factors[slot].slowdown["A"], tax_gpu_h=0.0, alternative=None,
                                   alternative_factor=None, saved_gpu_h=None, version=1, fingerprint=fp,
                                   time_limit_s=4 * base))
    sink.add(recs)
    assert sink.flush() == len(recs)
    return factors


def test_a_slot_holds_the_gpu_first_seen_last_before_the_run() -> None:
    old = SlotGpu(1, "GPU-old", "n1", 0, 100.0)
    new = SlotGpu(2, "GPU-new", "n1", 0, 500.0)
    assert slot_holder([old, new], 50.0) is old  # before any was seen: the first one
    assert slot_holder([old, new], 499.0) is old
    assert slot_holder([old, new], 500.0) is new
    assert slot_holder([old, new], 9e9) is new


def test_learn_estimates_every_gpu_and_flags_the_one_gone_slow(engine: Engine, tmp_path: Path) -> None:
    cfg = _classified(engine, tmp_path)
    factors = _ledger(engine, slow=None)
    slow = sorted(factors)[5]
    _ledger_more(engine, factors, slow)  # the slow GPU's later jobs: 1.5x its benchmark
    dry = learn(engine, cfg, now=NOW + timedelta(hours=1))
    assert not dry.applied and dry.stored == 0
    with session_scope(engine) as session:
        assert session.scalars(select(GpuPassiveSpeed)).first() is None
    out = learn(engine, cfg, now=NOW + timedelta(hours=1), apply=True)
    uuid = {(g.node, g.minor): g.uuid for g in factors.values()}
    by_gpu = {e.gpu: e for e in out.result.estimates if e.job_class == "A"}
    assert set(by_gpu) == set(uuid.values())  # every physical GPU, keyed by its UUID
    for slot, v in factors.items():
        e = by_gpu[uuid[slot]]
        if slot != slow:  # the others: within 2 % of the benchmark
            assert e.factor == pytest.approx(v.slowdown["A"], rel=0.02)
    # 8 of its 20 jobs slow: the window's median still reads the old pace, the CUSUM has caught the change
    assert by_gpu[uuid[slow]].factor < factors[slow].slowdown["A"] * 1.1
    assert [f.gpu for f in out.opened] == [uuid[slow]]
    with session_scope(engine) as session:
        stored = load_passive(session)
        flags = session.execute(select(GpuFlag.gpu_uuid, GpuFlag.kind, GpuFlag.node)).all()
    assert stored[uuid[slow]]["A"].factor == pytest.approx(by_gpu[uuid[slow]].factor)
    assert flags == [(uuid[slow], FAIL_SLOW, slow[0])]
    again = learn(engine, cfg, now=NOW + timedelta(hours=2), apply=True)
    assert again.opened == () and [f.gpu for f in again.flags] == [uuid[slow]]  # one open flag per GPU
    with session_scope(engine) as session:
        assert len(session.scalars(select(GpuFlag)).all()) == 1
        assert len(session.scalars(select(GpuPassiveSpeed)).all()) == len(by_gpu)  # replaced, not added
    # the placer with `passive = use`: the window's estimate agrees with the benchmark (within both
    # uncertainties), so placement keeps the benchmark's factor; the flag is what acts
    placed = load_factors(engine, CLASSES, passive_min_paced=3).by_slot
    assert placed[slow] == factors[slow]


def _ledger_more(engine: Engine, factors: dict, slow: tuple[str, int], n: int = 8) -> None:
    """`n` more jobs on the slow GPU, 1.5x its benchmark, after the others."""
    sink = AccountingSink(lambda: engine)
    recs = []
    for i in range(n):
        base = 600.0 + 60.0 * (i % 8)
        runtime = base * factors[slow].slowdown["A"] * 1.5
        ended = NOW - timedelta(minutes=30) + timedelta(seconds=i)
        recs.append(JobAccount(job_id=f"s{i}", mode="observe", job_class="A", partition="gpu", account="a", user="u",
                               gpus=((slow[0], slow[1], 1.0),), started_at=ended - timedelta(seconds=runtime),
                               ended_at=ended, runtime_s=runtime, factor=1.0, tax_gpu_h=0.0, alternative=None,
                               alternative_factor=None, saved_gpu_h=None, version=1, fingerprint=f"fp{i % 8:02d}",
                               time_limit_s=4 * base))
    sink.add(recs)
    assert sink.flush() == n


def test_runs_at_a_slot_no_gpu_row_holds_and_rows_without_fingerprint_are_counted_not_guessed(
        engine: Engine, tmp_path: Path) -> None:
    _classified(engine, tmp_path)
    sink = AccountingSink(lambda: engine)
    common = {"mode": "observe", "job_class": "A", "partition": "p", "account": "a", "user": "u",
              "started_at": NOW - timedelta(hours=1), "ended_at": NOW, "runtime_s": 3600.0, "factor": None,
              "tax_gpu_h": None, "alternative": None, "alternative_factor": None, "saved_gpu_h": None, "version": 1}
    sink.add([JobAccount(job_id="1", gpus=(("nowhere", 0, None),), fingerprint="fp", **common),
              JobAccount(job_id="2", gpus=(("nowhere", 0, None),), **common)])
    assert sink.flush() == 2
    with session_scope(engine) as session:
        got = load_runs(session)
    assert got.runs == ()
    assert sorted(got.unusable.values()) == [1, 1]


def test_pal_gpus_learn_and_passive_on_the_command_line(tmp_path: Path) -> None:
    from pal_slurm.db.engine import make_engine
    from pal_slurm.demo.cluster_gpus import make_db

    url = make_db(tmp_path)
    engine = make_engine(url)
    factors = _ledger(engine, slow=None)
    slow = sorted(factors)[2]
    _ledger_more(engine, factors, slow, n=16)  # most of its jobs slow: its passive factor says so too
    run = CliRunner()
    dry = run.invoke(cli, ["--db", url, "gpus", "learn", "--days", "3650"])
    assert dry.exit_code == 0, dry.output
    assert "would open" in dry.stdout and "dry run: nothing stored" in dry.stderr
    shown = json.loads(run.invoke(cli, ["--db", url, "gpus", "--passive", "--format", "json"]).stdout)
    assert all(r["passive"] == {} for r in shown)
    done = run.invoke(cli, ["--db", url, "gpus", "learn", "--days", "3650", "--apply", "--format", "json"])
    assert done.exit_code == 0, done.output
    data = json.loads(done.stdout)
    assert data["applied"] and data["stored"] == 16 and [f["slot"] for f in data["fail_slow"]] == [slow[1]]
    shown = {(r["node"], r["slot"]): r for r in
             json.loads(run.invoke(cli, ["--db", url, "gpus", "--passive", "--format", "json"]).stdout)}
    assert shown[slow]["flags"].keys() == {FAIL_SLOW} and shown[slow]["passive"]["A"]["disagrees"] == "slower"
    assert all(r["passive"]["A"]["disagrees"] is None for s, r in shown.items() if s != slow)
    # the placer with `passive = use` ranks the slow GPU by what its jobs show, every other GPU by its benchmark
    p_slow = shown[slow]["passive"]["A"]["factor"]
    placed = load_factors(engine, CLASSES, passive_min_paced=3).by_slot
    assert placed[slow].slowdown["A"] == placed[slow].perfvar["A"] == pytest.approx(p_slow)
    assert all(placed[k] == v for k, v in factors.items() if k != slow)
    assert load_factors(engine, CLASSES, passive_min_paced=10_000).by_slot[slow] == factors[slow]
    table = run.invoke(cli, ["--db", url, "gpus", "--passive"], terminal_width=200)
    assert table.exit_code == 0 and "fail-slow" in table.stdout and "passive A" in table.stdout
    csv_out = run.invoke(cli, ["--db", url, "gpus", "--passive", "--format", "csv"]).stdout
    assert csv_out.splitlines()[0].startswith("node,slot,GPU,sf A,passive A factor")


def test_learn_says_so_when_passive_speed_is_off(tmp_path: Path) -> None:
    from pal_slurm.demo.cluster_gpus import make_db

    url = make_db(tmp_path)
    conf = tmp_path / "pal.toml"
    conf.write_text('[classification]\npassive = "off"\n')
    got = CliRunner().invoke(cli, ["--db", url, "gpus", "learn"], env={"PAL_CONFIG": str(conf)})
    assert got.exit_code != 0 and "Traceback" not in got.output and "passive speed is off" in got.output


def test_passive_factors_replace_the_benchmark_only_where_they_contradict_it_on_enough_jobs() -> None:
    from pal_slurm.db.passive_store import StoredPassive
    from pal_slurm.placement.variability import GpuVariability

    g = GpuVariability(perfvar={"A": 1.1, "B": 1.0, "C": 1.0}, slowdown={"A": 1.1, "B": 1.0, "C": 1.0}, uuid="u",
                       node="n", minor=0)
    p = {"A": StoredPassive("u", "A", 1.4, 1.35, 1.45, 20, 12, 3.0, NOW),   # slower beyond both: taken
         "B": StoredPassive("u", "B", 1.3, 1.2, 1.4, 5, 4, 1.0, NOW),       # too few paced jobs
         "C": StoredPassive("u", "C", 1.01, 0.99, 1.03, 40, 30, 9.0, NOW),  # agrees with the benchmark
         "X": StoredPassive("u", "X", 9.0, 9.0, 9.0, 50, 50, 1.0, NOW)}     # a class the GPU has not
    got = with_passive(g, p, min_paced=10)
    assert got.slowdown == {"A": 1.4, "B": 1.0, "C": 1.0} and got.perfvar == {"A": 1.4, "B": 1.0, "C": 1.0}
    faster = with_passive(g, {"A": StoredPassive("u", "A", 0.9, 0.88, 0.92, 20, 12, 3.0, NOW)}, min_paced=10)
    assert faster.perfvar["A"] == 0.9  # faster beyond both: taken too
    assert with_passive(g, {}, 10) is g


def test_the_metrics_carry_the_passive_factor_and_the_open_flags() -> None:
    from prometheus_client import generate_latest
    from prometheus_client.registry import CollectorRegistry

    from pal_slurm.placer.exporter import PlacerMetrics, gpu_facts

    rows = [{"node": "n1", "uuid": "GPU-1", "classes": {"A": {"slowdown": 1.0, "bin": 0}}, "action": None,
             "passive": {"A": {"factor": 1.31}}, "flags": {"fail_slow": "x"}},
            {"node": "n1", "uuid": "GPU-2", "classes": {"A": {"slowdown": 1.0, "bin": 0}}, "action": None}]
    metrics = PlacerMetrics(lambda: gpu_facts(rows, {"GPU-1": 0, "GPU-2": 1}))
    assert metrics.refresh()
    reg = CollectorRegistry()
    reg.register(metrics)
    text = generate_latest(reg).decode()
    assert 'pal_gpu_slowdown_passive{Hostname="n1",UUID="GPU-1",class="A",gpu="0"} 1.31' in text
    assert 'pal_gpu_flag{Hostname="n1",UUID="GPU-1",gpu="0",kind="fail_slow"} 1.0' in text
    assert "GPU-2" not in "".join(line for line in text.splitlines() if line.startswith("pal_gpu_slowdown_passive"))


def test_a_flagged_gpu_is_reprofiled_one_node_at_a_time_and_its_flag_cleared_by_the_new_runs(tmp_path: Path) -> None:
    """`pal profile submit --gpus FLAGGED` submits for the flagged GPUs' nodes only, chained with
    --dependency=singleton; once the GPU has profile runs newer than its flag, the next
    `pal gpus learn --apply` clears it (and its CUSUM starts again from the new runs)."""
    from pal_slurm.db.engine import make_engine
    from pal_slurm.db.models import Benchmark, ProfileRun

    from pal_slurm.demo.cluster_gpus import make_db

    url = make_db(tmp_path)
    engine = make_engine(url)
    factors = _ledger(engine, slow=None)
    slow = sorted(factors)[9]
    _ledger_more(engine, factors, slow, n=16)
    run = CliRunner()
    assert run.invoke(cli, ["--db", url, "gpus", "learn", "--days", "3650", "--apply"]).exit_code == 0
    sub = run.invoke(cli, ["--db", url, "profile", "submit", "--gpus", "FLAGGED", "--dry-run", "--gpus-per-node", "4"])
    assert sub.exit_code == 0, sub.output
    lines = sub.stdout.splitlines()
    assert len(lines) == 1 and f"--nodelist={slow[0]}" in lines[0] and "--dependency=singleton" in lines[0]
    assert "--job-name=pal-reprofile" in lines[0]
    none = run.invoke(cli, ["--db", url, "profile", "submit", "--gpus", "flagged", "--dry-run", "--nodes", "elsewhere"])
    assert none.exit_code == 0 and "nothing to re-profile" in none.stdout
    named = run.invoke(cli, ["--db", url, "profile", "submit", "--gpus", f"{slow[0]}:{slow[1]}", "--dry-run",
                             "--gpus-per-node", "4"])
    assert named.exit_code == 0 and f"--nodelist={slow[0]}" in named.stdout and len(named.stdout.splitlines()) == 1
    bad = run.invoke(cli, ["--db", url, "profile", "submit", "--gpus", "nosuch:9", "--dry-run"])
    assert bad.exit_code != 0 and "Traceback" not in bad.output and "no GPU 'nosuch:9'" in bad.output
    with session_scope(engine) as session:  # the re-profile: a run newer than the flag
        uuid = session.scalar(select(GpuFlag.gpu_uuid))
        gpu = session.scalar(select(Gpu).where(Gpu.uuid == uuid))
        bench = session.scalars(select(Benchmark)).first()
        session.add(ProfileRun(run_key="reprofile-1", gpu_id=gpu.id, benchmark_id=bench.id,
                               started_at=datetime.now(UTC), score=1.0, unit=bench.unit, lower_is_better=True,
                               source="test"))
    out = json.loads(run.invoke(cli, ["--db", url, "gpus", "learn", "--days", "3650", "--apply", "--format",
                                      "json"]).stdout)
    assert out["cleared"] == [{"gpu": uuid, "kind": FAIL_SLOW}] and out["fail_slow"] == []
    with session_scope(engine) as session:
        assert session.scalar(select(GpuFlag.cleared_at)) is not None


def test_the_report_and_the_html_show_what_the_jobs_say_beside_the_benchmark(tmp_path: Path) -> None:
    from pal_slurm.db.engine import make_engine
    from pal_slurm.demo.cluster_gpus import make_db

    url = make_db(tmp_path)
    engine = make_engine(url)
    run = CliRunner()
    empty = json.loads(run.invoke(cli, ["--db", url, "report", "--format", "json"]).stdout)["passive"]
    assert empty == {"estimates": 0, "learned_at": None, "disagreements": [], "flags": []}
    factors = _ledger(engine, slow=None)
    slow = sorted(factors)[4]
    _ledger_more(engine, factors, slow, n=16)
    assert run.invoke(cli, ["--db", url, "gpus", "learn", "--days", "3650", "--apply"]).exit_code == 0
    data = json.loads(run.invoke(cli, ["--db", url, "report", "--format", "json"]).stdout)["passive"]
    assert data["estimates"] == 16 and [(d["node"], d["slot"], d["disagrees"]) for d in data["disagreements"]] == \
        [(slow[0], slow[1], "slower")]
    assert [(f["node"], f["slot"], f["kind"]) for f in data["flags"]] == [(slow[0], slow[1], FAIL_SLOW)]
    table = run.invoke(cli, ["--db", url, "report"], terminal_width=200).stdout
    assert "16 GPU x class estimates; 1 slower than the benchmark" in table and "1 fail-slow flag(s) open" in table
    html = tmp_path / "r.html"
    assert run.invoke(cli, ["--db", url, "report", "--html", str(html)]).exit_code == 0
    page = html.read_text()
    assert '<h2 id="passive">Passive speed</h2>' in page and "<td>fail-slow</td>" in page
    assert "16 GPU × class estimates" in page


def test_the_sacct_history_counts_where_a_job_took_whole_nodes(engine: Engine, tmp_path: Path) -> None:
    """sacct names a job's nodes, not its GPUs: a COMPLETED job that held every GPU of its nodes
    is a run on those GPUs (keyed by user and job name, the default class); a job on part of a
    node, or one the ledger has, is not read (the first counted)."""
    from pal_slurm.db.history_store import import_history
    from pal_slurm.jobs.sacct_history import read_history

    _classified(engine, tmp_path)
    factors = load_factors(engine, CLASSES).by_slot
    node = sorted(factors)[0][0]
    per_node = sum(1 for n, _m in factors if n == node)
    lines = ["JobID|JobName|User|Submit|Start|End|Elapsed|State|AllocTRES|NodeList",
             f"11|train|bob|2026-11-30T10:00:00|2026-11-30T10:00:00|2026-11-30T11:00:00|01:00:00|COMPLETED|"
             f"cpu=8,gres/gpu={per_node}|{node}",
             f"12|eval|bob|2026-11-30T10:00:00|2026-11-30T10:00:00|2026-11-30T10:30:00|00:30:00|COMPLETED|"
             f"cpu=1,gres/gpu=1|{node}",
             f"13|train|bob|2026-11-30T12:00:00|2026-11-30T12:00:00|2026-11-30T12:10:00|00:10:00|FAILED|"
             f"cpu=8,gres/gpu={per_node}|{node}"]
    with session_scope(engine) as session:
        import_history(session, read_history(lines, source="test"), "test")
    with session_scope(engine) as session:
        got = load_runs(session, NOW - timedelta(days=30), history_class="A")
        none = load_runs(session, NOW - timedelta(days=30))
    [run] = got.runs
    uuids = {factors[(n, m)].uuid for n, m in factors if n == node}
    assert run.job_id == "test:11" and set(run.gpus) == uuids and run.job_class == "A"
    assert run.runtime_s == 3600.0 and run.fingerprint.startswith("sacct:bob")
    assert got.unusable == {"sacct history: not whole nodes (its GPUs are not named)": 1}
    assert none.runs == () and none.unusable == {}
