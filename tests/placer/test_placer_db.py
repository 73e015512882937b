"""The placer's database side on every backend: audit records, job identities, factors."""

from __future__ import annotations

from pathlib import Path

from pal_slurm.db.engine import make_engine, session_scope
from pal_slurm.db.migrate import upgrade
from pal_slurm.db.models import JobIdentity
from pal_slurm.db.sensitivity_store import record_identities
from pal_slurm.placer.audit import AuditSink, Record, placements_for


def test_audit_bulk_flush_and_explain_order(db_url: str) -> None:
    engine = make_engine(db_url)
    upgrade(engine)
    sink = AuditSink(lambda: engine)
    for i in range(300):
        sink.add(Record(job_id=str(i % 7), policy="pal-match", job_class="A", version=2,
                        gpus=[{"node": "n1", "minor": i % 4, "type": f"v100_g{i % 4}", "slowdown": 0.97}],
                        alternatives=[{"gpus": ["n1:0"], "weight": 0.97}], reason=f"r{i}", outcome="applied"))
    assert sink.flush() == 300 and not sink.pending
    rows = placements_for(engine, "3", limit=100)
    assert len(rows) == len([i for i in range(300) if i % 7 == 3])
    assert rows[0]["gpus"][0]["type"].startswith("v100_g") and rows[0]["classification_version"] == 2


def test_audit_keeps_records_while_the_database_is_down(tmp_path: Path) -> None:
    bad = make_engine("postgresql+psycopg://pal:x@127.0.0.1:1/pal", connect_timeout_s=1)
    sink = AuditSink(lambda: bad, max_pending=5)
    for i in range(7):
        sink.add(Record(job_id=str(i), policy="p", job_class=None, version=None, gpus=[], alternatives=None,
                        reason="x", outcome="released-unchanged"))
    assert sink.flush() == 0 and len(sink.pending) == 5 and sink.dropped == 2
    assert sink.last_error and "x@" not in sink.last_error  # no password in what we log


def test_record_identities_bulk_is_idempotent_and_follows_reused_ids(db_url: str) -> None:
    engine = make_engine(db_url)
    upgrade(engine)
    jobs = [(str(i), "alice", f"train-{i % 3}", "/home/alice/run.sh") for i in range(1200)]
    with session_scope(engine) as s:
        assert record_identities(s, jobs) == 1200
    with session_scope(engine) as s:
        assert record_identities(s, jobs) == 0
        assert record_identities(s, [("5", "bob", "other", "x.sh")]) == 1
    with session_scope(engine) as s:
        rows = {r.slurm_job_id: r for r in s.query(JobIdentity)}
        assert len(rows) == 1200 and rows["5"].user == "bob" and rows["6"].fingerprint == rows["3"].fingerprint


def test_learned_runtimes_per_fingerprint(db_url: str) -> None:
    """The placer's runtime estimates from job profiles: a job's longest node, the p90 of the
    newest `history` jobs, only with `min_jobs` of them, only from the last `max_age_days`."""
    from datetime import UTC, datetime, timedelta

    from pal_slurm.db.models import JobProfile
    from pal_slurm.db.sensitivity_store import learned_runtimes

    engine = make_engine(db_url)
    upgrade(engine)
    now = datetime(2026, 12, 1, tzinfo=UTC)

    def profile(job: str, node: str, fp: str, minutes: float, days_ago: float) -> JobProfile:
        start = now - timedelta(days=days_ago)
        return JobProfile(slurm_job_id=job, node=node, user="u", gpu_uuids=[], gpus=1, started_at=start,
                          ended_at=start + timedelta(minutes=minutes), duration_s=60 * minutes, samples=1,
                          fingerprint=fp)

    with session_scope(engine) as s:
        for i in range(10):  # fp "a": 10 jobs of 10..100 min, each also on a second, shorter node
            s.add(profile(f"a{i}", "n1", "a", 10 * (i + 1), days_ago=i + 1))
            s.add(profile(f"a{i}", "n2", "a", 1, days_ago=i + 1))
        for i in range(2):  # fp "b": too few jobs
            s.add(profile(f"b{i}", "n1", "b", 30, days_ago=1))
        for i in range(5):  # fp "c": only old jobs
            s.add(profile(f"c{i}", "n1", "c", 30, days_ago=200))
    with session_scope(engine) as s:
        got = learned_runtimes(s, now=now)
        assert got == {"a": 100 * 60.0}  # p90 of 10 jobs: the 10th; the longest node counts
        assert learned_runtimes(s, now=now, history=5) == {"a": 50 * 60.0}  # the 5 newest: 10..50 min
        assert learned_runtimes(s, now=now, max_age_days=365)["c"] == 30 * 60.0


def test_variability_loader_serves_the_placer_and_the_simulator(db_url: str, tmp_path: Path) -> None:
    """db/variability_store on every backend: each classified GPU with its node and minor (the
    placer's slot), PerfVar and slowdown per class; the placer's cache keys it by slot."""
    import pytest

    from pal_slurm.config import ClassificationConfig, DatabaseConfig, PalConfig
    from pal_slurm.db.variability_store import load_variability
    from tests.slurm.placer_support import A_PERFVAR, records
    from pal_slurm.services.classification import run_classification
    from pal_slurm.errors import PalError
    from pal_slurm.ingest.jsonl import dump_jsonl
    from pal_slurm.services.ingest import import_files
    from pal_slurm.placer.factors import load_factors

    engine = make_engine(db_url)
    upgrade(engine)
    with session_scope(engine) as s, pytest.raises(PalError, match="no classification yet"):
        load_variability(s, ("A", "D"))
    jsonl = tmp_path / "runs.jsonl"
    jsonl.write_text(dump_jsonl(records()), encoding="utf-8")
    import_files(engine, [jsonl], "jsonl")
    run_classification(engine, PalConfig(database=DatabaseConfig(url=db_url), data_dir=tmp_path), note="t")
    with session_scope(engine) as s:
        stored = load_variability(s, ("A", "B", "C", "D"))
    assert len(stored.gpus) == len(A_PERFVAR) and stored.version >= 1
    by_slot = {(g.node, g.minor): g for g in stored.gpus}
    assert set(by_slot) == set(A_PERFVAR)
    for slot, pv in A_PERFVAR.items():
        assert by_slot[slot].perfvar["A"] == pytest.approx(pv / 1.0, rel=0.05)
    slowest = max(A_PERFVAR, key=A_PERFVAR.__getitem__)
    assert by_slot[slowest].slowdown["A"] == max(g.slowdown["A"] for g in stored.gpus)
    factors = load_factors(engine, ("A", "B", "C", "D"))
    assert set(factors.by_slot) == set(A_PERFVAR) and factors.version == stored.version


def test_the_placer_loads_no_classes_from_a_schema_behind_it(tmp_path: Path) -> None:
    """An un-upgraded database (here 0003, before the placements' accounting columns): the
    factor cache loads nothing and says why, so held jobs are released unchanged rather
    than placed with decisions that cannot be recorded."""
    from pal_slurm.placer.factors import FactorCache

    engine = make_engine(f"sqlite:///{tmp_path / 'old.db'}")
    upgrade(engine, "0003")
    cache = FactorCache(lambda: engine, classes=("A",))
    assert cache.get(0.0).by_slot == {} and "pal db upgrade" in (cache.last_error or "")


def test_given_factors_are_stored_as_a_classification_the_placer_reads_back(db_url: str) -> None:
    """save_variability (a replay's drawn fleet) on every backend: the same PerfVar and
    slowdown per GPU and class come back through load_variability and the placer's loader,
    classes B and C kept apart (separate draws), as a new version after an older one."""
    import pytest

    from pal_slurm.db.variability_store import load_variability, save_variability
    from pal_slurm.errors import PalError
    from pal_slurm.placement.variability import GpuVariability
    from pal_slurm.placer.factors import load_factors

    def fleet(slow: float) -> list[GpuVariability]:
        return [GpuVariability(perfvar={"A": slow if i == 5 else 1.0 + i / 100, "B": 1.1, "C": 0.9, "D": 1.0},
                               slowdown={"A": slow if i == 5 else 1.0, "B": 1.05, "C": 0.95, "D": 1.0},
                               uuid=f"GPU-t-{i}", node=f"n{i // 4}", minor=i % 4) for i in range(8)]

    engine = make_engine(db_url)
    upgrade(engine)
    with session_scope(engine) as s:
        first = save_variability(s, fleet(2.0), model="Tesla V100-SXM2-16GB", note="one")
    with session_scope(engine) as s:
        second = save_variability(s, fleet(3.0), model="Tesla V100-SXM2-16GB", note="two")
    assert second == first + 1
    with session_scope(engine) as s:
        stored = load_variability(s, ("A", "B", "C", "D"))
    assert stored.version == second
    by_slot = {(g.node, g.minor): g for g in stored.gpus}
    want = {(g.node, g.minor): g for g in fleet(3.0)}
    assert set(by_slot) == set(want)
    for slot, g in want.items():
        assert by_slot[slot].perfvar == pytest.approx(g.perfvar) and by_slot[slot].slowdown == pytest.approx(g.slowdown)
    assert load_factors(engine, ("A", "B", "C", "D")).by_slot[("n1", 1)].slowdown["A"] == 3.0
    with session_scope(engine) as s, pytest.raises(PalError, match="has no node, minor or UUID"):
        save_variability(s, [GpuVariability(perfvar={"A": 1.0}, slowdown={"A": 1.0}, uuid="x")], model="m", note="")
