"""`pal report fairness`: GPU-hours per speed tier against the fleet's share, and
the wait pal-slurm added, per account and user; from the placer's records on every backend."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from click.testing import CliRunner

from pal_slurm.cli.main import cli
from pal_slurm.db.engine import make_engine
from pal_slurm.db.migrate import upgrade
from pal_slurm.placer.audit import AuditSink, Record, placed_jobs
from pal_slurm.report.fairness import PlacedJob, fairness, tier

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def job(job_id: str, user: str, account: str, sfs: tuple[float, ...], hours: float, wait_s: float,
        outcome: str = "applied") -> PlacedJob:
    start = T0 + timedelta(seconds=wait_s)
    return PlacedJob(job_id=job_id, user=user, account=account, outcome=outcome,
                     slowdowns=sfs if outcome == "applied" else (), submitted_at=T0,
                     released_at=T0 + timedelta(seconds=wait_s), started_at=start,
                     ended_at=start + timedelta(hours=hours))


def test_tiers() -> None:
    assert [tier(x) for x in (0.95, 0.99, 1.0, 1.01, 1.02, None)] == ["fast", "typical", "typical", "typical",
                                                                       "slow", "typical"]


def test_shares_against_the_fleet_and_added_waits() -> None:
    jobs = [job("1", "alice", "ml", (0.95, 0.96), 1.0, 2.0),     # 2 fast GPU-hours
            job("2", "bob", "ml", (1.2,), 2.0, 10.0),             # 2 slow GPU-hours
            job("3", "bob", "phys", (), 0.0, 30.0, outcome="released-unchanged")]
    data = fairness(jobs, T0 + timedelta(days=1))
    rows = {(r["kind"], r["name"]): r for r in data["rows"]}
    assert data["fleet"]["gpu_hours"] == 4.0 and data["fleet"]["share"] == {"fast": 0.5, "typical": 0.0, "slow": 0.5}
    alice, bob = rows[("user", "alice")], rows[("user", "bob")]
    assert alice["share"]["fast"] == 1.0 and alice["fleet_share"]["fast"] == 0.5
    assert bob["share"]["slow"] == 1.0 and bob["jobs"] == 2
    assert bob["added_wait_s"] == {"median": 20.0, "p95": 29.0, "jobs": 2}
    assert rows[("account", "ml")]["gpu_hours"] == 4.0 and rows[("account", "phys")]["gpu_hours"] == 0.0


def test_a_running_job_counts_until_now() -> None:
    running = PlacedJob("1", "a", "x", "applied", (1.0,), T0, T0, T0, None)
    assert fairness([running], T0 + timedelta(hours=3))["fleet"]["gpu_hours"] == 3.0


def test_from_the_placer_records_and_the_cli(db_url: str) -> None:
    engine = make_engine(db_url)
    upgrade(engine)
    sink = AuditSink(lambda: engine)
    sink.add(Record(job_id="11", policy="pal-match", job_class="A", version=1,
                    gpus=[{"node": "n1", "minor": 0, "slowdown": 0.9}, {"node": "n1", "minor": 1, "slowdown": 1.3}],
                    alternatives=None, reason="r", outcome="applied", decided_at=T0 + timedelta(seconds=5),
                    applied_at=T0 + timedelta(seconds=5), user="alice", account="ml", submitted_at=T0))
    sink.add(Record(job_id="12", policy="pal-match", job_class="A", version=None, gpus=[], alternatives=None,
                    reason="r", outcome="released-unchanged", decided_at=T0 + timedelta(seconds=60),
                    applied_at=T0 + timedelta(seconds=60), user="bob", account="phys", submitted_at=T0))
    sink.add(Record(job_id="13", policy="pal-match", job_class="A", version=1, gpus=[], alternatives=None,
                    reason="waits", outcome="waiting", decided_at=T0))
    sink.mark("11", "started_at", T0 + timedelta(seconds=6))
    sink.mark("11", "ended_at", T0 + timedelta(seconds=6, hours=1))
    sink.mark("11", "ended_at", T0 + timedelta(hours=9))  # a second end changes nothing
    assert sink.flush() == 3 and not sink.marks
    jobs = {j.job_id: j for j in placed_jobs(engine)}
    assert set(jobs) == {"11", "12"}
    assert jobs["11"].ended_at - jobs["11"].started_at == timedelta(hours=1)
    assert placed_jobs(engine, since=T0 + timedelta(seconds=30))[0].job_id == "12"
    runner = CliRunner()
    out = runner.invoke(cli, ["--db", db_url, "report", "fairness", "--format", "json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    rows = {(r["kind"], r["name"]): r for r in data["rows"]}
    assert rows[("user", "alice")]["gpu_hours_by_tier"] == {"fast": 1.0, "typical": 0.0, "slow": 1.0}
    assert rows[("user", "bob")]["added_wait_s"]["median"] == 60.0
    table = runner.invoke(cli, ["--db", db_url, "report", "fairness"])
    assert table.exit_code == 0 and "user alice" in table.output and "50% (50%)" in table.output, table.output
    csv = runner.invoke(cli, ["--db", db_url, "report", "fairness", "--format", "csv", "--since", "1d"])
    assert csv.exit_code == 0 and csv.output.splitlines()[0].startswith("kind,name,jobs,gpu_hours")
    bad = runner.invoke(cli, ["--db", db_url, "report", "fairness", "--since", "yesterday"])
    assert bad.exit_code == 2 and "'--since': 'yesterday'" in bad.output and "Traceback" not in bad.output
