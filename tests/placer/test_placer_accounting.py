"""Per-job accounting of the variability tax: the ledger (pure), the placer's hooks in observe and
enforce mode over a recording backend, the `job_accounting` table on every database, and
`pal report savings`.

What Slurm itself does is shown on the real test cluster (tests/slurm/test_savings.py).
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import astuple, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import create_engine, select

from pal_eval.fakes import StaticFactors
from pal_slurm.cli.main import cli
from pal_slurm.config import PlacerConfig
from pal_slurm.db.accounting_store import AccountingSink, load_cells
from pal_slurm.db.models import JobAccounting
from pal_slurm.placement.variability import GpuVariability
from pal_slurm.placer.accounting import Accounting
from pal_slurm.placer.audit import AuditSink
from pal_slurm.placer.cycle import Placer
from pal_slurm.placer.factors import Factors
from pal_slurm.placer.ledger import Alternative, JobAccount, Ledger, job_gpus
from pal_slurm.savings import cells_of, savings
from pal_slurm.slurm.model import SlurmJob
from tests.support.recording_slurm import CLASSES, NOW, Recorder, held, node, running
from conftest import ARTIFACT_CONFIG

#: minor 0 is the slowest: Slurm's first fit takes it, the placer does not
FACTORS = {0: 1.3, 1: 1.2, 2: 1.1, 3: 1.0}


def by_slot(nodes: list[str]) -> dict[tuple[str, int], GpuVariability]:
    return {(n, m): GpuVariability(perfvar={c: f for c in CLASSES}, slowdown={c: f for c in CLASSES})
            for n in nodes for m, f in FACTORS.items()}


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


def make_placer(tmp_path: Path, jobs: list[SlurmJob], mode: str, sink: AccountingSink | None = None):
    backend = Recorder(jobs, [node("n1")])
    clock = Clock()
    config = PlacerConfig(mode=mode, state_file=str(tmp_path / "filter-state"))  # type: ignore[arg-type]
    books = Accounting(sink or AccountingSink(None), mode)
    p = Placer(backend, config, StaticFactors(Factors(by_slot=by_slot(["n1"]), version=7, loaded_at=NOW)),  # type: ignore[arg-type]
               AuditSink(None), classes=CLASSES, clock=clock, accounting=books)
    return p, backend, clock, books


# --------------------------------------------------------------------------- the ledger, pure


def job(job_id: str = "1", **kw: object) -> SlurmJob:
    base = SlurmJob(job_id=job_id, name="j", user="alice", state="PENDING", state_reason="Resources", priority=1000,
                    partition="gpu", submit_time=NOW - 5, tres_per_node="gres:gpu:2", account="physics")
    return replace(base, **kw)  # type: ignore[arg-type]


def test_observe_tax_and_saving_are_gpu_hours_beyond_typical_and_beyond_the_placers_choice() -> None:
    ledger = Ledger(mode="observe")
    ledger.chose("1", Alternative("placer", "A", 1.0, 7))
    j = running(job(), "n1", (0, 1), NOW)
    assert ledger.cycle([j], by_slot(["n1"]), NOW + 5, 7, lambda _j: "B") == []
    ledger.cycle([j], by_slot(["n1"]), NOW + 3598, 7, lambda _j: "B")  # last seen running
    [rec] = ledger.cycle([], by_slot(["n1"]), NOW + 3602, 7, lambda _j: "B")
    assert rec.job_class == "A" and rec.gpus == (("n1", 0, 1.3), ("n1", 1, 1.2)) and rec.factor == 1.3
    assert rec.runtime_s == 3600  # it ended between the two cycles: halfway
    assert rec.tax_gpu_h == pytest.approx(2 * (1 - 1 / 1.3))  # 2 GPU-hours; typical GPUs: 2 / 1.3
    assert rec.saved_gpu_h == pytest.approx(2 * (1 - 1.0 / 1.3))  # the placer's GPUs: as typical ones
    assert (rec.alternative, rec.alternative_factor, rec.partition, rec.account, rec.user) == \
        ("placer", 1.0, "gpu", "physics", "alice")
    assert not ledger.running and not ledger.choices


def test_a_finished_job_keeps_its_fingerprint_and_time_limit_for_passive_speed() -> None:
    """Runs of the same work (user, name, command) share a fingerprint across job ids; the limit
    tells an impossible run time from a real one (pal_slurm.classification.passive)."""
    from pal_slurm.jobs.fingerprint import fingerprint

    ledger = Ledger(mode="observe")
    recs = []
    for jid in ("1", "2"):
        j = running(job(jid, command="/home/alice/train.sh", time_limit_s=7200.0), "n1", (0,), NOW)
        ledger.cycle([j], by_slot(["n1"]), NOW + 5, 7, lambda _j: "A")
        recs += ledger.cycle([], by_slot(["n1"]), NOW + 65, 7, lambda _j: "A")
    assert [r.fingerprint for r in recs] == [fingerprint("alice", "j", "/home/alice/train.sh")] * 2
    assert [r.time_limit_s for r in recs] == [7200.0, 7200.0]
    other = running(job("3", command="/home/alice/eval.sh"), "n1", (0,), NOW)
    ledger.cycle([other], by_slot(["n1"]), NOW + 5, 7, lambda _j: "A")
    [rec] = ledger.cycle([], by_slot(["n1"]), NOW + 65, 7, lambda _j: "A")
    assert rec.fingerprint != recs[0].fingerprint and rec.time_limit_s is None


def test_enforce_saving_is_what_first_fit_would_have_cost() -> None:
    ledger = Ledger(mode="enforce")
    ledger.chose("1", Alternative("first-fit", "A", 1.3, 7))
    j = running(job(), "n1", (3,), NOW)
    ledger.cycle([j], by_slot(["n1"]), NOW, 7, lambda _j: "A")
    ledger.cycle([j], by_slot(["n1"]), NOW + 1800, 7, lambda _j: "A")
    [rec] = ledger.cycle([], by_slot(["n1"]), NOW + 1800, 7, lambda _j: "A")
    assert rec.factor == 1.0 and rec.tax_gpu_h == 0.0
    assert rec.saved_gpu_h == pytest.approx(0.5 * (1.3 - 1.0))  # first fit's 1.3x on half a GPU-hour


def test_unknown_gpus_or_factors_are_unaccounted_never_zero_tax() -> None:
    ledger = Ledger()
    no_detail = replace(running(job("1"), "n1", (0,), NOW), gres_detail=())
    elsewhere = running(job("2"), "n9", (0,), NOW)  # a node the classification does not know
    ledger.cycle([no_detail, elsewhere], by_slot(["n1"]), NOW, 7, lambda _j: "A")
    recs = ledger.cycle([], by_slot(["n1"]), NOW + 60, 7, lambda _j: "A")
    assert sorted(r.job_id for r in recs) == ["1", "2"]
    assert all(r.factor is None and r.tax_gpu_h is None and not r.accounted for r in recs)
    data = report(recs)
    assert data["unaccounted_jobs"] == 2 and data["accounted_jobs"] == 0 and data["lost_share"] is None
    assert "no accounted GPU job; 2 jobs unaccounted" in data["headline"]


def test_requeued_and_cancelled_jobs_and_cpu_jobs_leave_no_record() -> None:
    ledger = Ledger()
    ledger.chose("9", Alternative("placer", "A", 1.0, 7))
    cpu = replace(running(job("3"), "n1", (), NOW), tres_per_node="", gres_detail=())
    ledger.cycle([running(job("1"), "n1", (0,), NOW), job("9"), cpu], by_slot(["n1"]), NOW, 7, lambda _j: "A")
    assert set(ledger.running) == {"1"}
    assert ledger.cycle([job("1")], by_slot(["n1"]), NOW + 60, 7, lambda _j: "A") == []  # requeued: pending again
    assert "9" not in ledger.choices  # cancelled while pending: forgotten


def test_a_completing_job_ends_when_slurm_says_and_is_accounted_once() -> None:
    ledger = Ledger()
    j = running(job("1"), "n1", (0,), NOW)
    ledger.cycle([j], by_slot(["n1"]), NOW + 1, 7, lambda _j: "A")
    completing = replace(j, state="COMPLETING", end_time=NOW + 600)
    [rec] = ledger.cycle([completing], by_slot(["n1"]), NOW + 602.7, 7, lambda _j: "A")
    assert rec.runtime_s == 600 and rec.ended_at == datetime.fromtimestamp(NOW + 600, UTC)
    assert ledger.cycle([completing], by_slot(["n1"]), NOW + 603, 7, lambda _j: "A") == []  # not again
    assert ledger.cycle([], by_slot(["n1"]), NOW + 604, 7, lambda _j: "A") == [] and not ledger.closed
    # first seen completing (a job shorter than a cycle): accounted from Slurm's own times
    short = replace(running(job("2"), "n1", (1,), NOW + 10), state="COMPLETING", end_time=NOW + 12)
    [rec2] = ledger.cycle([short], by_slot(["n1"]), NOW + 13, 7, lambda _j: "A")
    assert rec2.runtime_s == 2 and rec2.factor == 1.2


def test_gpus_of_a_running_job_from_per_slot_types_or_indices() -> None:
    typed = running(job(), "n1", (1, 3), NOW)
    assert job_gpus(typed) == (("n1", 1), ("n1", 3))
    plain = replace(typed, nodes="n[1-2]", gres_detail=("gpu:2(IDX:0-1)", "gpu:1(IDX:3)"))
    assert job_gpus(plain) == (("n1", 0), ("n1", 1), ("n2", 3))


# --------------------------------------------------------------------------- the placer's hooks


def test_observe_mode_records_the_placers_choice_and_what_slurm_gave(tmp_path: Path) -> None:
    j = job("1", tres_per_node="gres:gpu:1")
    p, backend, clock, books = make_placer(tmp_path, [j], "observe")
    report = p.cycle()
    assert report.observed == ["1"]
    alt = books.ledger.choices["1"]
    assert alt.kind == "placer" and alt.factor == 1.0  # the placer would take the fastest GPU, minor 3
    # its record names the GPU as an applied placement's does: slot type and factor too
    [seen] = [r for r in p.audit.pending if r.outcome == "observe"]
    assert seen.gpus == [{"node": "n1", "minor": 3, "type": "v100_g3", "slowdown": 1.0}]
    backend._jobs = [running(j, "n1", (0,), NOW + 2)]  # Slurm's own first fit: minor 0, 1.3x
    clock.now = NOW + 10
    p.cycle()
    clock.now = NOW + 7200
    p.cycle()
    backend._jobs = []
    clock.now = NOW + 7204  # it ended between the two cycles: NOW + 7202 (halfway)
    p.cycle()
    [rec] = books.sink.pending
    assert (rec.mode, rec.factor, rec.alternative, rec.alternative_factor) == ("observe", 1.3, "placer", 1.0)
    assert rec.tax_gpu_h == pytest.approx(2 * (1 - 1 / 1.3)) and rec.saved_gpu_h == pytest.approx(rec.tax_gpu_h)
    assert not [c for c in backend.calls if c[0] == "update" and c[2] != "AdminComment"]  # observe changes nothing


def test_enforce_mode_records_what_first_fit_would_have_given(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    j = held("1")
    p, backend, clock, books = make_placer(tmp_path, [j], "enforce")

    def second_decision(*_a: object, **_k: object) -> None:
        raise AssertionError("pal-guard says what first fit would have given: no second decision")

    monkeypatch.setattr("pal_slurm.placer.ledger.decide", second_decision)
    assert p.cycle().placed == ["1"]
    types = [c[3] for c in backend.of("1") if c[0] == "update" and c[2] == "TresPerNode" and c[3]]
    assert types == ["gres:gpu:v100_g3:1"]  # the placer's choice: the 1.0x GPU
    assert books.ledger.choices["1"] == Alternative("first-fit", "A", 1.3, 7)  # Slurm's: minor 0
    backend._jobs = [running(backend.jobs()[0], "n1", (3,), NOW + 1)]
    clock.now = NOW + 20
    p.cycle()
    clock.now = NOW + 3601
    p.cycle()
    backend._jobs = []
    p.cycle()
    [rec] = books.sink.pending
    assert (rec.mode, rec.factor, rec.tax_gpu_h) == ("enforce", 1.0, 0.0)
    assert rec.saved_gpu_h == pytest.approx(0.3)


def test_accounting_errors_never_stop_a_cycle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p, backend, clock, books = make_placer(tmp_path, [held("1")], "enforce")

    def broken(*_a: object, **_k: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr("pal_slurm.placer.accounting.first_fit_alternatives", broken)
    monkeypatch.setattr(books.ledger, "cycle", broken)
    assert p.cycle().placed == ["1"]


# --------------------------------------------------------------------------- the database


def record(job_id: str, *, factor: float | None, alt: float | None = None, mode: str = "observe",
           hours: float = 1.0, gpus: int = 1, partition: str = "gpu", ended: datetime | None = None,
           node_name: str = "n1") -> JobAccount:
    ended = ended or datetime.now(UTC)
    gpu_h = gpus * hours
    tax = None if factor is None else gpu_h * (1 - 1 / factor)
    saved = None if factor is None or alt is None else (
        gpu_h * (1 - alt / factor) if mode == "observe" else gpu_h * (alt / factor - 1))
    return JobAccount(job_id=job_id, mode=mode, job_class="A", partition=partition, account="acct", user="u",
                      gpus=tuple((node_name, m, factor) for m in range(gpus)), started_at=ended - timedelta(hours=hours),
                      ended_at=ended, runtime_s=hours * 3600, factor=factor, tax_gpu_h=tax,
                      alternative=None if alt is None else ("placer" if mode == "observe" else "first-fit"),
                      alternative_factor=alt, saved_gpu_h=saved, version=1)


def report(recs: list[JobAccount], by: str | None = None, **kw: object) -> dict:
    """The savings report of some records, summed in Python (cells_of)."""
    cells, pace = cells_of(recs, by)
    return savings(cells, pace, by=by, **kw)  # type: ignore[arg-type]


def norm(items: list) -> list[tuple]:
    """Dataclasses as sorted tuples, floats to 9 digits (SUM over another order on a server)."""
    return sorted(tuple(round(v, 9) if isinstance(v, float) else v for v in astuple(x)) for x in items)


def test_records_round_trip_and_wait_in_memory_while_the_database_is_down(engine, tmp_path: Path) -> None:
    state = {"up": False}
    dead = create_engine(f"sqlite:///{tmp_path / 'missing' / 'no.db'}")  # its directory does not exist

    sink = AccountingSink(lambda: engine if state["up"] else dead)
    old = datetime.now(UTC) - timedelta(days=30)
    sink.add([record("1", factor=1.3, alt=1.0), record("2", factor=None), record("3", factor=1.1, ended=old)])
    assert sink.flush() == 0 and len(sink.pending) == 3 and sink.last_error
    state["up"] = True
    assert sink.flush() == 3 and not sink.pending
    week = datetime.now(UTC) - timedelta(days=7)
    for by in (None, "partition", "class"):
        for since in (None, week):
            kept = [r for r in (record("1", factor=1.3, alt=1.0), record("2", factor=None),
                                record("3", factor=1.1, ended=old)) if since is None or r.ended_at >= since]
            cells, pace = load_cells(engine, since, by)
            want_cells, want_pace = cells_of(kept, by)
            assert norm(cells) == norm(want_cells) and cells, (by, since)
            assert norm(pace) == norm(want_pace) and pace
    with engine.connect() as conn:  # the full record: every GPU with its factor, timestamps in UTC
        row = conn.execute(select(JobAccounting).where(JobAccounting.slurm_job_id == "1")).one()
    assert row.gpus == [{"node": "n1", "minor": 0, "slowdown": 1.3}] and row.ended_at.tzinfo is not None
    assert (row.mode, row.alternative, row.alternative_slowdown) == ("observe", "placer", 1.0)


# --------------------------------------------------------------------------- the report


def test_savings_totals_groups_and_responsible_gpus() -> None:
    recs = [record("1", factor=1.25, alt=1.0, hours=2, gpus=2, partition="a"),  # 4 GPU-h, lost 0.8, saved 0.8
            record("2", factor=1.0, alt=1.0, hours=4, partition="b"),  # 4 GPU-h, lost 0, saved 0
            record("3", factor=0.95, alt=1.0, hours=1, partition="b"),  # fast GPU: no loss; placer worse: -0.0526
            record("4", factor=1.1, alt=1.0, mode="enforce", hours=1, partition="a", node_name="n2"),
            record("5", factor=None, hours=3, partition="a")]
    data = report(recs, by="partition", since="7d",
                   gpu_names={("n1", 0): "GPU-aaa"}, actions={"GPU-aaa": {"action": "drain", "reason": "slow"}})
    assert data["jobs"] == 5 and data["accounted_jobs"] == 4 and data["unaccounted_jobs"] == 1
    assert data["unaccounted_gpu_hours"] == pytest.approx(3)
    assert data["gpu_hours"] == pytest.approx(4 + 4 + 1 + 1)
    assert data["lost_gpu_hours"] == pytest.approx(0.8 + 1 * (1 - 1 / 1.1))
    assert data["observe_saved_gpu_hours"] == pytest.approx(0.8 + 0 + (1 - 1 / 0.95))
    assert data["enforce_saved_gpu_hours"] == pytest.approx(1.0 / 1.1 - 1)  # first fit's 1.0 was faster: negative
    assert [g["name"] for g in data["groups"]] == ["a", "b"]
    a = data["groups"][0]
    assert a["jobs"] == 3 and a["unaccounted_jobs"] == 1 and a["lost_gpu_hours"] == pytest.approx(0.8 + 1 - 1 / 1.1)
    top = data["gpus"][0]
    assert (top["node"], top["minor"], top["uuid"], top["action"]) == ("n1", 0, "GPU-aaa", "drain")
    assert top["lost_gpu_hours"] == pytest.approx(0.4)  # job 1's 0.8 split over its two equally slow GPUs
    lost, share = data["lost_gpu_hours"], data["lost_share"]
    assert data["headline"] == (f"last 7 days: {lost:.2g} GPU-hours ({100 * share:.1f} %) lost to slow GPUs; "
                                f"pal-slurm would have saved {data['observe_saved_gpu_hours']:.2g} of them; "
                                f"pal-slurm saved {data['enforce_saved_gpu_hours']:.2g} GPU-hours against Slurm's "
                                "first fit; 1 job unaccounted (GPUs or factors unknown)")


@pytest.fixture
def filled(engine) -> str:
    sink = AccountingSink(lambda: engine)
    now = datetime.now(UTC)
    sink.add([record(str(i), factor=1.2 if i % 2 else 1.0, alt=1.0, hours=10, partition=f"p{i % 3}",
                     ended=now - timedelta(hours=i)) for i in range(12)])
    sink.add([record("old", factor=2.0, alt=1.0, hours=100, ended=now - timedelta(days=9)),
              record("lost", factor=None, hours=1)])
    assert sink.flush() == 14
    return str(engine.url.render_as_string(hide_password=False))


def pal(url: str, *args: str):
    return CliRunner().invoke(cli, ["--db", url, "report", "savings", *args], env={"PAL_CONFIG": ARTIFACT_CONFIG})


def test_pal_report_savings_json_table_csv(filled: str) -> None:
    got = pal(filled, "--format", "json")
    assert got.exit_code == 0, got.output
    data = json.loads(got.stdout)
    assert data["jobs"] == 13 and data["unaccounted_jobs"] == 1  # the 9-day-old job is outside 7d
    assert data["lost_gpu_hours"] == pytest.approx(6 * 10 * (1 - 1 / 1.2))
    # 6 jobs x 10 GPU-h at 1.2x: 10 GPU-hours of 120 lost, all of it avoided on the placer's 1.0x GPUs
    assert data["headline"] == ("last 7 days: 10 GPU-hours (8.3 %) lost to slow GPUs; pal-slurm would have saved "
                                "10 of them; 1 job unaccounted (GPUs or factors unknown)")
    table = pal(filled, "--by", "partition")
    assert table.exit_code == 0, table.output
    assert table.stdout.splitlines()[0] == data["headline"]
    assert "p0" in table.stdout and "p2" in table.stdout
    rows = list(csv.DictReader(io.StringIO(pal(filled, "--format", "csv", "--by", "class").stdout)))
    assert [r["name"] for r in rows] == ["total", "A"] and rows[0]["jobs"] == "13"
    everything = json.loads(pal(filled, "--format", "json", "--since", "30d").stdout)
    assert everything["jobs"] == 14


@pytest.mark.parametrize("bad", ["7 days", "yesterday", "-3d", "2026-13-40"])
def test_a_since_that_does_not_parse_names_the_format(sqlite_url: str, bad: str) -> None:
    CliRunner().invoke(cli, ["--db", sqlite_url, "db", "upgrade"], env={"PAL_CONFIG": ARTIFACT_CONFIG})
    got = pal(sqlite_url, "--since", bad)
    assert got.exit_code == 2 and "Traceback" not in got.output
    assert f"'--since': {bad!r} is not an age (7d, 12h, 30m, 90s) or an ISO date/time" in got.output


def test_an_empty_database_says_so(sqlite_url: str) -> None:
    CliRunner().invoke(cli, ["--db", sqlite_url, "db", "upgrade"], env={"PAL_CONFIG": ARTIFACT_CONFIG})
    got = pal(sqlite_url)
    assert got.exit_code == 0 and got.stdout.splitlines()[0] == "last 7 days: no accounted GPU job"
    assert json.loads(pal(sqlite_url, "--format", "json").stdout)["jobs"] == 0


def test_the_html_report_and_the_savings_report_name_the_gpus_from_the_classification(tmp_path: Path) -> None:
    """On the demo's classified fleet: a job slowed by one of its GPUs is blamed on that GPU, by UUID,
    in `pal report savings` and in the HTML report's section."""
    from pal_slurm.db.engine import make_engine
    from pal_slurm.demo.cluster_gpus import make_db
    from pal_slurm.placer.factors import load_factors

    url = make_db(tmp_path)
    engine = make_engine(url)
    factors = load_factors(engine, CLASSES)
    (node_name, minor), slow = max(factors.by_slot.items(), key=lambda kv: kv[1].slowdown["A"])
    ledger = Ledger(mode="observe")
    ledger.chose("1", Alternative("placer", "A", 1.0, factors.version))
    start = datetime.now(UTC).timestamp() - 3600
    j = running(job("1", tres_per_node="gres:gpu:1"), node_name, (minor,), start)
    for at in (start, start + 3600):
        ledger.cycle([j], factors.by_slot, at, factors.version, lambda _j: "A")
    sink = AccountingSink(lambda: engine)
    sink.add(ledger.cycle([], factors.by_slot, start + 3600, factors.version, lambda _j: "A"))
    assert sink.flush() == 1
    got = pal(url, "--format", "json")
    assert got.exit_code == 0, got.output
    top = json.loads(got.stdout)["gpus"][0]
    assert (top["node"], top["minor"]) == (node_name, minor) and top["uuid"] == slow.uuid
    assert top["lost_gpu_hours"] == pytest.approx(1 - 1 / slow.slowdown["A"], rel=1e-3)
    html = tmp_path / "r.html"
    out = CliRunner().invoke(cli, ["--db", url, "report", "--html", str(html)], env={"PAL_CONFIG": ARTIFACT_CONFIG})
    assert out.exit_code == 0, out.output
    text = html.read_text()
    assert '<h2 id="savings">Variability tax</h2>' in text and f"<td>{slow.uuid}</td>" in text
