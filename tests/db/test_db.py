"""The database layer on every backend: migrations from empty, imports, classification storage.

Runs on SQLite always and on the real PostgreSQL and MariaDB servers `make test` starts.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import func, inspect, select, text

from tests.support.fleetgen import T0, records, two_tier_fleet
from pal_slurm.services.classification import run_classification
from pal_slurm.config import load_config
from pal_slurm.db import migrate
from pal_slurm.db.engine import make_engine, session_scope
from pal_slurm.db.models import Base, Gpu, Node, Placement, ProfileRun
from pal_slurm.errors import DatabaseError, InputError, PalError
from pal_slurm.services.ingest import import_records_now
from pal_slurm.report.service import load_gpu_rows, load_report
from conftest import ARTIFACT_CONFIG


def _count(engine, model) -> int:
    with session_scope(engine) as s:
        return s.scalar(select(func.count()).select_from(model))


def test_migrations_from_empty(db_url: str) -> None:
    eng = make_engine(db_url)
    try:
        assert migrate.schema_state(eng).current is None
        with pytest.raises(DatabaseError, match="pal db upgrade"):
            migrate.require_current(eng)
        state = migrate.upgrade(eng)
        assert state.up_to_date and state.current == migrate.head_revision()
        tables = set(inspect(eng).get_table_names())
        assert set(Base.metadata.tables) <= tables
        with eng.connect() as conn:
            diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), Base.metadata)
        assert diff == [], f"models and migrations differ: {diff}"
        assert migrate.upgrade(eng).current == state.current  # idempotent
        migrate.require_current(eng)
        with eng.begin() as conn:  # stamped one behind: the fast path must not let it through
            conn.execute(text("UPDATE alembic_version SET version_num = '0005'"))
        with pytest.raises(DatabaseError, match="at 0005, this pal needs"):
            migrate.require_current(eng)
    finally:
        eng.dispose()


def test_the_fast_schema_check_knows_the_newest_migration() -> None:
    """require_current passes a current database without Alembic (SCHEMA_HEAD): a new
    migration must move the constant, or every command would take the slow path."""
    assert migrate.SCHEMA_HEAD == migrate.head_revision()


def test_import_is_idempotent(engine) -> None:
    recs = records(two_tier_fleet(), runs=4)
    first = import_records_now(engine, recs)
    assert (first.added, first.already_present, first.new_gpus) == (len(recs), 0, 17)
    again = import_records_now(engine, recs)
    assert (again.added, again.already_present, again.new_gpus) == (0, len(recs), 0)
    assert _count(engine, ProfileRun) == len(recs)
    assert _count(engine, Gpu) == 17
    assert _count(engine, Node) == len({r.gpu.node for r in recs})


def test_import_is_all_or_nothing(engine) -> None:
    import_records_now(engine, records({"GPU-a": 1.0}, benchmark="bert"))
    good = records({"GPU-new": 1.0}, benchmark="resnet50", tag="x")
    bad = records({"GPU-other": 1.0}, benchmark="bert", lower_is_better=False, tag="y")
    before = (_count(engine, ProfileRun), _count(engine, Gpu))
    with pytest.raises(InputError, match="lower_is_better"):
        import_records_now(engine, good + bad)
    assert (_count(engine, ProfileRun), _count(engine, Gpu)) == before


def test_timestamps_keep_utc_and_microseconds(engine) -> None:
    import_records_now(engine, records({"GPU-a": 1.0}, runs=1))
    with session_scope(engine) as s:
        run = s.scalars(select(ProfileRun)).one()
        gpu = s.scalars(select(Gpu)).one()
    assert run.started_at.tzinfo is not None
    assert run.started_at == T0.replace(minute=T0.minute + 1)
    assert gpu.first_seen == run.started_at and gpu.state == "present"


def test_classify_report_roundtrip(engine, tmp_path: Path) -> None:
    fleet = two_tier_fleet()
    import_records_now(engine, records(fleet, benchmark="resnet50", runs=4))
    import_records_now(engine, records(fleet, benchmark="pagerank", runs=4, base=50, tag="p"))
    import_records_now(engine, records({"GPU-fast-00": 1.0}, benchmark="sgemm", runs=2, tag="s"))  # too few runs
    cfg = load_config(None, env={"PAL_CONFIG": ARTIFACT_CONFIG, "HOME": str(tmp_path)})
    summary = run_classification(engine, cfg, allow_partial=True)
    assert summary.version == 1 and summary.previous_version is None
    rep = load_report(engine, cfg)
    items = {i["benchmark"]: i for i in rep["benchmarks"]}
    res = items["resnet50"]
    assert res["gpus"] == 17 and res["outliers"] == ["GPU-broken-00"]
    # PerfVar is relative to the 16 regular GPUs' median, (1.001 + 1.002) / 2: the broken one is left out
    assert res["perfvar"]["max"] == pytest.approx(1.5 / 1.0015, rel=1e-6)
    regular = [b for b in res["bins"] if not b["outlier"]]
    assert [b["gpus"] for b in regular] == [12, 4]
    assert regular[1]["slowdown"] / regular[0]["slowdown"] == pytest.approx(1.06, rel=0.005)
    assert items["sgemm"]["gpus"] == 0 and items["sgemm"]["unprofiled"] == 1
    classes = {(i["job_class"], i["benchmark"]) for i in rep["job_classes"]}
    assert ("A", "resnet50") in classes and ("D", "pagerank") in classes
    assert not any(i["job_class"] in ("B", "C") for i in rep["job_classes"])  # no bert runs
    rows = {r["uuid"]: r for r in load_gpu_rows(engine)}
    assert rows["GPU-broken-00"]["outlier"] is True
    assert rows["GPU-slow-03"]["classes"]["A"]["bin"] == 1
    assert rows["GPU-fast-00"]["classes"]["B"]["slowdown"] is None  # unprofiled, not guessed
    assert rows["GPU-fast-00"]["last_profiled"] is not None
    second = run_classification(engine, cfg, hysteresis=0.01, allow_partial=True)
    assert (second.version, second.previous_version) == (2, 1)


def test_classify_needs_runs(engine, tmp_path: Path) -> None:
    cfg = load_config(None, env={"PAL_CONFIG": ARTIFACT_CONFIG, "HOME": str(tmp_path)})
    with pytest.raises(PalError, match="no profile runs"):
        run_classification(engine, cfg, allow_partial=True)
    with pytest.raises(PalError, match="pal classify"):
        load_report(engine, cfg)


def test_placement_json_roundtrip(engine) -> None:
    with session_scope(engine) as s:
        s.add(Placement(slurm_job_id="123_4", policy="pal", job_class="A", classification_version=1,
                        gpus=[{"node": "n1", "slot": 2, "slowdown": 0.98}], alternatives=[["n2", [0, 1]]],
                        reason="best free pair", outcome="applied",
                        applied_at=datetime(2026, 1, 1, tzinfo=timezone.utc)))
    with session_scope(engine) as s:
        p = s.scalars(select(Placement)).one()
        assert p.gpus[0]["slot"] == 2 and p.alternatives == [["n2", [0, 1]]]
        assert p.applied_at.tzinfo is not None


def test_unreachable_server_is_one_clear_error() -> None:
    eng = make_engine("postgresql+psycopg://pal:secret@127.0.0.1:1/none", connect_timeout_s=2)
    with pytest.raises(DatabaseError) as err:
        migrate.schema_state(eng)
    assert "secret" not in str(err.value) and "cannot reach" in str(err.value)


def test_unknown_driver_is_clear() -> None:
    with pytest.raises(DatabaseError, match="no database driver|invalid database URL"):
        make_engine("oracle+nosuchdriver://u:p@h/db")


def test_a_benchmark_another_import_created_meanwhile_is_joined_not_a_failed_import(engine) -> None:
    """`pal profile submit` imports from every node at once: on a fresh database two imports
    both find a benchmark missing and both insert it. The loser reads the winner's row and its
    transaction goes on (seen on the test cluster: `UNIQUE constraint failed: benchmarks.name`
    lost a node's whole profile)."""
    from sqlalchemy.orm import Session

    from pal_slurm.db.measurement_store import create_benchmark
    from pal_slurm.db.models import Benchmark

    with Session(engine) as loser:
        assert loser.scalar(select(func.count()).select_from(Benchmark)) == 0  # it saw none
        with session_scope(engine) as winner:  # another node's import commits it meanwhile
            winner.add(Benchmark(name="stream", unit="GB/s", lower_is_better=False, description=""))
        got = create_benchmark(loser, "stream", "GB/s", False)
        assert got.id is not None and got.name == "stream"
        loser.add(Node(name="n1", first_seen=datetime.now(timezone.utc), last_seen=datetime.now(timezone.utc)))
        loser.commit()  # the rest of the import still commits
    with session_scope(engine) as s:
        assert s.scalar(select(func.count()).select_from(Benchmark)) == 1
        assert s.scalar(select(func.count()).select_from(Node)) == 1


def test_a_new_sqlite_database_is_not_world_readable(tmp_path: Path) -> None:
    """Job commands, users and placements live in it: created 0640 whatever the umask, never
    through a link; an existing file keeps the mode its admin gave it."""
    import os
    import stat

    from pal_slurm.db.engine import make_engine
    from pal_slurm.db.migrate import upgrade

    old = os.umask(0o022)
    try:
        path = tmp_path / "pal.db"
        upgrade(make_engine(f"sqlite:///{path}"))
        assert stat.S_IMODE(path.stat().st_mode) == 0o640
        kept = tmp_path / "kept.db"
        kept.touch(mode=0o600)
        upgrade(make_engine(f"sqlite:///{kept}"))
        assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    finally:
        os.umask(old)
