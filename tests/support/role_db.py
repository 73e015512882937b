"""A throwaway database on a real server with pal's roles created in it (pal_slurm/db/role_grants.py,
as roles.py writes them), an engine per role, and the server's refusal of what a role may not do.

Roles are global to a server and tests run side by side, so every database names its own roles
(RoleNames with a random tag); they are dropped afterwards.
"""

from __future__ import annotations

import uuid
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import SQLAlchemyError

from conftest import admin_url, throwaway_db
from pal_slurm.db import migrate
from pal_slurm.db.engine import make_engine
from pal_slurm.db.role_grants import RoleNames
from pal_slurm.db.roles import MYSQL_OWNER_PRIVILEGES, node_login, role_statements

PASSWORD = "role-test-pw"
T = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)

SERVERS = [pytest.param("postgres", marks=pytest.mark.postgres), pytest.param("mysql", marks=pytest.mark.mysql)]


@dataclass
class RoleDb:
    """A throwaway database with the roles created in it, and an engine per role."""

    kind: str
    database: str
    names: RoleNames
    owner: Engine
    placer: Engine
    admin: Engine
    nodes: dict[str, Engine] = field(default_factory=dict)
    urls: dict[str, str] = field(default_factory=dict)

    @property
    def dialect(self) -> str:
        return "postgresql" if self.kind == "postgres" else "mysql"


def run_script(engine: Engine, statements: list[str]) -> None:
    """Run statements one by one on a driver connection, as psql or mariadb run the file
    (no bind parameters, so a '%' in a LIKE pattern is just a '%'); one transaction."""
    raw = engine.raw_connection()
    try:
        cur = raw.cursor()
        for stmt in statements:
            cur.execute(stmt)
        raw.commit()
    finally:
        raw.close()


def _url_as(pal_url: str, user: str) -> str:
    return make_url(pal_url).set(username=user, password=PASSWORD).render_as_string(hide_password=False)


def _owner_url(admin: Engine, kind: str, names: RoleNames, database: str, pal_url: str) -> str:
    """Who migrates the schema: on PostgreSQL the database's owner, on MariaDB a user created here
    with no more than the owner's grants."""
    if kind == "postgres":  # the owner is the database's owner: the tests' pal user created it
        return pal_url
    # a MariaDB owner with exactly the owner's grants, who migrates from empty
    run_script(admin, [f"CREATE USER '{names.owner}'@'%' IDENTIFIED BY '{PASSWORD}'",
                       f"GRANT {MYSQL_OWNER_PRIVILEGES} ON `{database}`.* TO '{names.owner}'@'%'"])
    return _url_as(pal_url, names.owner)


def _create_roles(admin: Engine, kind: str, database: str, names: RoleNames, logins: list[str]) -> None:
    """The generated role script, run as the administrator would run it, then a password for the
    placer and each node's login (the script sets none: an admin types them at a prompt)."""
    dialect = "postgresql" if kind == "postgres" else "mysql"
    run_script(admin, role_statements(dialect, database=database, nodes=["gpu001", "gpu002"],  # type: ignore[arg-type]
                                      names=names))
    if kind == "postgres":
        run_script(admin, [f"ALTER ROLE \"{r}\" PASSWORD '{PASSWORD}'" for r in (names.placer, *logins)])
    else:
        run_script(admin, [f"ALTER USER '{r}'@'%' IDENTIFIED BY '{PASSWORD}' ACCOUNT UNLOCK"
                           for r in (names.placer, *logins)])


def _drop_database(admin: Engine, kind: str, database: str, dbs: Generator[str, None, None]) -> None:
    """Ends the sessions still on the database (PostgreSQL), then drops it."""
    if kind == "postgres":
        with admin.connect() as conn:
            conn.execute(text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                              "WHERE datname = :d AND pid <> pg_backend_pid()"), {"d": database})
            conn.commit()
    admin.dispose()
    dbs.close()  # drops the database


def _drop_roles(admin_base: URL, kind: str, names: RoleNames, logins: list[str]) -> None:
    """The roles live on the server, not in the database: dropped one by one."""
    drop = create_engine(admin_base)
    try:
        if kind == "postgres":
            run_script(drop, [f'DROP ROLE IF EXISTS "{r}"' for r in (*logins, names.placer, names.node)])
        else:
            run_script(drop, [f"DROP USER IF EXISTS '{r}'@'%'" for r in (*logins, names.placer, names.owner)]
                       + [f"DROP ROLE IF EXISTS {names.node}"])
    finally:
        drop.dispose()


def role_db(kind: str) -> Iterator[RoleDb]:
    """A RoleDb on the `kind` server (a generator: yields it once, then drops the database and
    the roles)."""
    dialect = "postgresql" if kind == "postgres" else "mysql"
    tag = uuid.uuid4().hex[:8]
    names = RoleNames(owner=f"pal_owner_{tag}", placer=f"pal_placer_{tag}", node=f"pal_node_{tag}",
                      node_prefix=f"pal_node_{tag}_")
    admin_base = make_url(admin_url(kind))
    dbs = throwaway_db(kind)
    pal_url = next(dbs)
    database = make_url(pal_url).database
    assert database is not None
    admin = create_engine(admin_base.set(database=database))
    engines: list[Engine] = [admin]
    logins = [node_login(n, dialect, names) for n in ("gpu001", "gpu002")]  # type: ignore[arg-type]
    try:
        owner = make_engine(_owner_url(admin, kind, names, database, pal_url))
        engines.append(owner)
        migrate.upgrade(owner)
        _create_roles(admin, kind, database, names, logins)
        placer = make_engine(_url_as(pal_url, names.placer))
        engines.append(placer)
        db = RoleDb(kind, database, names, owner, placer, admin, urls={"placer": _url_as(pal_url, names.placer)})
        for n, login in zip(("gpu001", "gpu002"), logins):
            db.nodes[n] = make_engine(_url_as(pal_url, login))
            db.urls[n] = _url_as(pal_url, login)
            engines.append(db.nodes[n])
        yield db
    finally:
        for e in engines[1:]:
            e.dispose()
        _drop_database(admin, kind, database, dbs)
        _drop_roles(admin_base, kind, names, logins)


def refused(engine: Engine, sql: str, params: dict[str, Any] | None = None) -> str:
    """The server's one-line refusal of `sql` run on `engine` (fails the test when it ran)."""
    try:
        with engine.begin() as conn:
            result = conn.execute(text(sql), params or {})
            count = result.rowcount
    except SQLAlchemyError as exc:
        return str(getattr(exc, "orig", exc)).splitlines()[0]
    pytest.fail(f"the server let it through ({count} row(s)): {sql}")
