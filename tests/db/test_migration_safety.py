"""Migrations on a live database: a bounded wait for table locks, and a rerun that completes a
migration that stopped midway.

On every backend: PostgreSQL rolls a failed migration back whole; MariaDB commits each DDL
statement on its own (and so does SQLite through Python's sqlite3, which opens no transaction
before DDL), so there a failure leaves part of a migration applied under the previous
revision's stamp, and only a migration that skips what exists (pal_slurm.db.migration_ops)
lets `pal db upgrade` finish it.
"""

from __future__ import annotations

import inspect as pyinspect
import time
from collections.abc import Iterator
from importlib import import_module
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine, event, inspect, text
from sqlalchemy.exc import OperationalError

from pal_slurm.db import migrate
from pal_slurm.db.engine import make_engine
from pal_slurm.db.models import Base
from pal_slurm.errors import DatabaseError

REVISIONS = ["0001", "0002", "0003", "0004", "0005", "0006", "0007", "0008"]


@pytest.fixture
def eng(db_url: str) -> Iterator[Engine]:
    e = make_engine(db_url)
    yield e
    e.dispose()


def _schema(engine: Engine) -> dict[str, tuple[tuple[str, ...], tuple[str, ...]]]:
    """Each table's columns and index names, as the database has them (alembic_version aside)."""
    insp = inspect(engine)
    return {t: (tuple(sorted(c["name"] for c in insp.get_columns(t))),
                tuple(sorted(str(i["name"]) for i in insp.get_indexes(t))))
            for t in insp.get_table_names() if t != "alembic_version"}


class FailAt:
    """Fail the migration's statement that `when` picks, as a lost connection would."""

    def __init__(self, engine: Engine, *, ddl: int | None = None, stamp: bool = False) -> None:
        self.engine, self.ddl, self.stamp, self.seen, self.fired = engine, ddl, stamp, 0, False

    def __call__(self, _conn, _cursor, statement: str, *_args) -> None:
        words = statement.lstrip().upper()
        if "ALEMBIC_VERSION" in words:
            if self.stamp and words.startswith(("INSERT", "UPDATE")):
                self._fail(statement)
            return
        if words.startswith(("CREATE", "ALTER")):
            self.seen += 1
            if self.ddl is not None and self.seen == self.ddl:
                self._fail(statement)

    def _fail(self, statement: str) -> None:
        self.fired = True
        raise OperationalError(statement, None, Exception("injected failure: connection lost"))

    def __enter__(self) -> FailAt:
        event.listen(self.engine, "before_cursor_execute", self)
        return self

    def __exit__(self, *_exc) -> None:
        event.remove(self.engine, "before_cursor_execute", self)


def test_every_migration_uses_the_operations_a_rerun_can_repeat() -> None:
    """A new migration written with plain op.create_table / add_column would break a MariaDB
    rerun; its upgrade() must go through pal_slurm.db.migration_ops."""
    versions = Path(migrate.__file__).with_name("migrations") / "versions"
    names = sorted(p.stem for p in versions.glob("0*.py"))
    assert [n[:4] for n in names] == REVISIONS, "a new migration: add it to REVISIONS"
    for name in names:
        module = import_module(f"pal_slurm.db.migrations.versions.{name}")
        source = pyinspect.getsource(module.upgrade)
        for plain in ("op.create_table(", "op.add_column(", "batch_op.add_column(", "batch_op.create_index(",
                      "op.create_index("):
            assert plain not in source, f"{name}: {plain} in upgrade(); use pal_slurm.db.migration_ops"


def test_a_migration_that_stops_midway_completes_on_rerun(eng: Engine, db_url: str) -> None:
    """Each migration in turn fails after its first DDL statement, then at its version stamp
    (every DDL done, the stamp lost), and `upgrade` run again reaches it with the schema whole."""
    server = eng.dialect.name
    previous: str | None = None
    for rev in REVISIONS:
        before = _schema(eng)
        with FailAt(eng, ddl=2) as fail:
            try:
                migrate.upgrade(eng, rev)
            except DatabaseError as exc:
                assert "injected failure" in str(exc)
        if fail.fired:
            assert migrate.schema_state(eng).current == previous
            if server == "postgresql":
                assert _schema(eng) == before, f"{rev}: PostgreSQL rolls a migration back whole"
            else:  # MariaDB commits each DDL statement; so does Python's sqlite3 (no transaction before DDL)
                assert _schema(eng) != before, f"{rev}: the first statement stayed (the case under test)"
        else:  # one statement only: nothing midway; undo it to try its lost stamp below
            assert rev == "0005", f"{rev} has one DDL statement only?"
            assert migrate.schema_state(eng).current == rev
            with eng.begin() as conn:
                conn.execute(text(f"UPDATE alembic_version SET version_num = '{previous}'"))
                conn.execute(text("ALTER TABLE profile_runs DROP COLUMN quarantine"))
        with FailAt(eng, stamp=True), pytest.raises(DatabaseError, match="injected failure"):
            migrate.upgrade(eng, rev)
        assert migrate.schema_state(eng).current == previous
        assert migrate.upgrade(eng, rev).current == rev
        previous = rev
    with eng.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), Base.metadata)
    assert diff == [], f"after the reruns the schema differs from the models: {diff}"


def test_a_migration_gives_up_on_a_held_lock_with_a_clear_error(eng: Engine, db_url: str) -> None:
    """A reader's open transaction on a table 0005 alters: the ALTER waits at most the lock
    timeout, then `upgrade` says why and what to do; once the reader is gone it goes through."""
    migrate.upgrade(eng, "0004")
    holder = make_engine(db_url)
    try:
        with holder.connect() as reader:
            if eng.dialect.name == "sqlite":
                reader.exec_driver_sql("BEGIN IMMEDIATE")  # SQLite locks the file: a writer in the way
            reader.execute(text("SELECT count(*) FROM profile_runs")).scalar()  # its transaction stays open
            started = time.monotonic()
            with pytest.raises(DatabaseError) as err:
                migrate.upgrade(eng, lock_timeout_s=1.0)
            waited = time.monotonic() - started
            reader.rollback()
        text_ = str(err.value)
        assert "waited 1 s for a table lock another session holds" in text_, text_
        assert "the schema is at 0004" in text_ and "--lock-timeout" in text_ and "paltest" not in text_
        assert waited < 15, f"gave up after {waited:.1f} s, not about 1 s"
        assert migrate.schema_state(eng).current == "0004"
        assert migrate.upgrade(eng, lock_timeout_s=1.0).up_to_date
    finally:
        holder.dispose()


def test_cli_upgrade_takes_a_lock_timeout(runner, sqlite_url: str) -> None:
    from pal_slurm.cli.main import cli

    bad = runner.invoke(cli, ["--db", sqlite_url, "db", "upgrade", "--lock-timeout", "0"])
    assert bad.exit_code == 2 and "--lock-timeout" in bad.output
    ok = runner.invoke(cli, ["--db", sqlite_url, "db", "upgrade", "--lock-timeout", "2.5"])
    assert ok.exit_code == 0 and "upgraded from empty" in ok.output
