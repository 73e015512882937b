"""Schema migrations through Alembic, configured in code (no alembic.ini to deploy).

`pal db upgrade` brings a database to the newest schema; every command that reads or
writes data first checks that the schema is current and refuses a mismatch with a
clear message instead of failing half-way.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import SQLAlchemyError

from pal_slurm.config import mask_url
from pal_slurm.db.engine import describe_error
from pal_slurm.errors import DatabaseError

if TYPE_CHECKING:
    from alembic.config import Config

SCRIPT_LOCATION = "pal_slurm.db:migrations"

#: The newest migration's revision. Every data command checks the schema before it starts,
#: and this lets a current database pass without importing Alembic (a fifth of a second);
#: tests/db/test_db.py checks that it is Alembic's head, so a new migration must move it.
SCHEMA_HEAD = "0008"


def alembic_config(url: str = "sqlite://") -> Config:
    from alembic.config import Config

    cfg = Config(stdout=io.StringIO())
    cfg.set_main_option("script_location", SCRIPT_LOCATION)
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def head_revision() -> str:
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


@dataclass(frozen=True)
class SchemaState:
    current: str | None
    head: str
    #: the database carries a revision this pal-slurm has no migration for: a newer pal-slurm
    #: wrote it, and the cure is upgrading pal-slurm (`pal db upgrade` cannot go there)
    newer: bool = False

    @property
    def up_to_date(self) -> bool:
        return self.current == self.head

    @property
    def advice(self) -> str:
        """What the admin does next, in words."""
        if self.up_to_date:
            return "up to date"
        if self.newer:
            return (f"newer than this pal-slurm knows (it reaches {self.head}): upgrade pal-slurm to the "
                    "version that wrote it, not the database")
        return "needs `pal db upgrade`"


def known_revisions() -> frozenset[str]:
    """Every revision this pal-slurm's migrations name."""
    from alembic.script import ScriptDirectory

    return frozenset(rev.revision for rev in ScriptDirectory.from_config(alembic_config()).walk_revisions())


def schema_state(engine: Engine) -> SchemaState:
    from alembic.runtime.migration import MigrationContext

    try:
        with engine.connect() as conn:
            current = MigrationContext.configure(conn).get_current_revision()
    except SQLAlchemyError as exc:
        raise DatabaseError(f"cannot reach the database {mask_url(str(engine.url))}: {describe_error(exc)}") from exc
    return SchemaState(current=current, head=head_revision(),
                       newer=current is not None and current not in known_revisions())


#: how long a migration waits for a table lock by default ([database] migration_lock_timeout_s)
DEFAULT_LOCK_TIMEOUT_S = 5.0


def upgrade(engine: Engine, revision: str = "head", *, lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S) -> SchemaState:
    """Migrate to `revision`, each statement waiting at most `lock_timeout_s` for a table lock.

    Why the bound: an ALTER TABLE needs an exclusive lock, and while it waits for a long reader
    (a report, an admin's open transaction) every later reader of that table, the placer's
    included, queues behind it. Bounded, the migration gives up instead (DatabaseError saying
    so, and to run it again when the database is quieter): PostgreSQL rolls it back whole;
    on MariaDB (and SQLite) the statements done stay, and the rerun completes the rest (each
    migration skips what exists, pal_slurm.db.migration_ops)."""
    from alembic import command

    state = schema_state(engine)
    if state.newer:
        raise DatabaseError(f"the database schema {state.current} at {mask_url(str(engine.url))} is "
                            f"{state.advice}")
    cfg = alembic_config(str(engine.url))
    try:
        with engine.begin() as conn:
            restore = _bound_lock_waits(conn, lock_timeout_s)
            try:
                cfg.attributes["connection"] = conn
                command.upgrade(cfg, revision)
            finally:
                _restore(conn, restore)
    except SQLAlchemyError as exc:
        where = mask_url(str(engine.url))
        if is_lock_timeout(exc):
            raise DatabaseError(
                f"migration stopped on {where}: it waited {lock_timeout_s:g} s for a table lock another session "
                f"holds (a long query or an open transaction on a table it alters) and gave up, so that nothing "
                f"queues behind it; the schema is at {_current_or_unknown(engine)}. Run `pal db upgrade` again "
                "when the database is quieter, or allow a longer wait with --lock-timeout SECONDS") from exc
        raise DatabaseError(f"migration failed on {where}: {describe_error(exc)}") from exc
    return schema_state(engine)


def _bound_lock_waits(conn: Connection, seconds: float) -> list[tuple[str, Any]]:
    """Make this connection's lock waits give up after `seconds`; what to set back afterwards
    (session settings outlive the migration on a pooled connection)."""
    dialect = conn.dialect.name
    if dialect == "postgresql":
        # LOCAL: for the migration's transaction only (PostgreSQL migrates in one transaction)
        conn.execute(text(f"SET LOCAL lock_timeout = {max(1, round(seconds * 1000))}"))
        return []
    if dialect in ("mysql", "mariadb"):
        # lock_wait_timeout bounds the metadata lock an ALTER waits for; innodb_lock_wait_timeout
        # the row locks of a data statement; both take whole seconds
        old = conn.execute(text("SELECT @@SESSION.lock_wait_timeout, @@SESSION.innodb_lock_wait_timeout")).one()
        whole = max(1, math.ceil(seconds))
        conn.execute(text(f"SET SESSION lock_wait_timeout = {whole}, innodb_lock_wait_timeout = {whole}"))
        return [("lock_wait_timeout", int(old[0])), ("innodb_lock_wait_timeout", int(old[1]))]
    if dialect == "sqlite":
        old = conn.exec_driver_sql("PRAGMA busy_timeout").scalar()
        conn.exec_driver_sql(f"PRAGMA busy_timeout = {max(1, round(seconds * 1000))}")
        return [("busy_timeout", old)]
    return []


def _restore(conn: Connection, settings: list[tuple[str, Any]]) -> None:
    """Set back what _bound_lock_waits changed; a connection the failure broke is left to the pool."""
    try:
        for name, value in settings:
            if name == "busy_timeout":
                conn.exec_driver_sql(f"PRAGMA busy_timeout = {int(value)}")
            else:
                conn.execute(text(f"SET SESSION {name} = {int(value)}"))
    except SQLAlchemyError:
        conn.invalidate()


def is_lock_timeout(exc: SQLAlchemyError) -> bool:
    """Whether a driver error is a lock wait that ran out: PostgreSQL's lock_not_available
    (55P03), MariaDB/MySQL's 1205 (lock wait timeout), SQLite's "database is locked"."""
    orig = getattr(exc, "orig", None)
    if orig is None:
        return False
    if getattr(orig, "sqlstate", None) == "55P03":
        return True
    args = getattr(orig, "args", ())
    if args and args[0] == 1205:
        return True
    return "database is locked" in str(orig)


def _current_or_unknown(engine: Engine) -> str:
    try:
        return schema_state(engine).current or "empty (nothing applied)"
    except DatabaseError:
        return "unknown (the database did not answer)"


def require_current(engine: Engine) -> None:
    """Refuse to work on a database whose schema is not exactly ours."""
    if _stamped(engine) == SCHEMA_HEAD:
        return
    state = schema_state(engine)
    if state.current is None:
        raise DatabaseError(
            f"the database {mask_url(str(engine.url))} has no pal schema yet: run `pal db upgrade`"
        )
    if not state.up_to_date:
        if not state.newer:
            raise DatabaseError(
                f"the database schema is at {state.current}, this pal needs {state.head}: run `pal db upgrade`"
            )
        raise DatabaseError(
            f"the database schema {state.current} is newer than this pal ({state.head}): upgrade pal-slurm"
        )


def _stamped(engine: Engine) -> str | None:
    """The revision the database is stamped with, read directly (None when it has none or
    cannot be read: the full check then says why)."""
    try:
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT version_num FROM alembic_version")).all()
    except SQLAlchemyError:
        return None
    return str(rows[0][0]) if len(rows) == 1 else None


def offline_sql(dialect: str) -> str:
    """The DDL of every migration for one dialect (postgresql, mysql, sqlite): what sql/ holds."""
    from alembic import command

    cfg = alembic_config(f"{dialect}://")
    buf = io.StringIO()
    cfg.output_buffer = buf
    command.upgrade(cfg, "head", sql=True)
    return buf.getvalue()
