"""Schema migrations through Alembic, configured in code (no alembic.ini to deploy).

`pal db upgrade` brings a database to the newest schema; every command that reads or
writes data first checks that the schema is current and refuses a mismatch with a
clear message instead of failing half-way.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

from typing import TYPE_CHECKING

from sqlalchemy import Engine, text
from sqlalchemy.exc import SQLAlchemyError

from pal_slurm.config import mask_url
from pal_slurm.db.engine import describe_error
from pal_slurm.errors import DatabaseError

if TYPE_CHECKING:
    from alembic.config import Config

SCRIPT_LOCATION = "pal_slurm.db:migrations"

#: The newest migration's revision. Every data command checks the schema before it starts,
#: and this lets a current database pass without importing Alembic (a fifth of a second);
#: tests/test_db.py checks that it is Alembic's head, so a new migration must move it.
SCHEMA_HEAD = "0007"


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


def upgrade(engine: Engine, revision: str = "head") -> SchemaState:
    from alembic import command

    state = schema_state(engine)
    if state.newer:
        raise DatabaseError(f"the database schema {state.current} at {mask_url(str(engine.url))} is "
                            f"{state.advice}")
    cfg = alembic_config(str(engine.url))
    try:
        with engine.begin() as conn:
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, revision)
    except SQLAlchemyError as exc:
        raise DatabaseError(f"migration failed on {mask_url(str(engine.url))}: {describe_error(exc)}") from exc
    return schema_state(engine)


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
