"""`pal db`: create and migrate the schema; print its DDL."""

from __future__ import annotations

from pathlib import Path

import click

from pal_slurm.cli.context import AppContext
from pal_slurm.cli.numbers import Real
from pal_slurm.cli.render import emit_json, text_format_option


@click.group()
def db() -> None:
    """Database schema: upgrade, current revision, DDL for DBAs."""


@db.command("upgrade")
@click.option("--lock-timeout", "lock_timeout", type=Real(0.1, 3600), metavar="SECONDS",
              help="How long a schema change waits for a table lock another session holds before it gives up "
                   "(so that the placer's reads never queue behind it) [default: [database] "
                   "migration_lock_timeout_s, 5].")
@click.pass_obj
def upgrade(app: AppContext, lock_timeout: float | None) -> None:
    """Create the schema or migrate it to the newest revision (safe to run again).

    A SQLite file's missing directories are created, and said so on stderr (a mistyped
    path shows at once). A schema change that cannot get its table lock within
    --lock-timeout stops with a clear error; run it again when the database is quieter
    (on MariaDB the rerun completes a migration that stopped midway)."""
    from pal_slurm.config import mask_url
    from pal_slurm.db import migrate

    missing = _missing_sqlite_dir(app.cfg.db_url)
    engine = app.creating_engine()  # the one command that may create a SQLite database
    if missing is not None and missing.is_dir():
        click.echo(f"pal: created the directory {missing} for the database (it did not exist)", err=True)
    before = migrate.schema_state(engine)
    after = migrate.upgrade(engine, lock_timeout_s=lock_timeout or app.cfg.database.migration_lock_timeout_s)
    where = mask_url(app.cfg.db_url)
    if before.current == after.current:
        click.echo(f"{where}: already at revision {after.current}")
    else:
        click.echo(f"{where}: upgraded from {before.current or 'empty'} to {after.current}")


def _missing_sqlite_dir(url: str) -> Path | None:
    """The outermost directory a SQLite URL's file needs that does not exist yet (None: none)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except ArgumentError:
        return None  # creating_engine says what is wrong with it
    db = parsed.database
    if parsed.get_backend_name() != "sqlite" or not db or db == ":memory:" or db.startswith("file:"):
        return None
    missing = None
    for parent in Path(db).expanduser().absolute().parents:
        if parent.exists():
            break
        missing = parent
    return missing


@db.command("current")
@text_format_option
@click.pass_obj
def current(app: AppContext, fmt: str) -> None:
    """Show the database's schema revision and whether it is up to date (exit 1 when not)."""
    from pal_slurm.config import mask_url
    from pal_slurm.db import migrate

    state = migrate.schema_state(app.engine)
    data = {"url": mask_url(app.cfg.db_url), "current": state.current, "head": state.head,
            "up_to_date": state.up_to_date, "newer_than_pal": state.newer, "advice": state.advice}
    if fmt == "json":
        emit_json(data)
    else:
        click.echo(f"{data['url']}: revision {state.current or 'none (empty database)'} (head {state.head}): "
                   f"{state.advice}")
    if not state.up_to_date:
        raise click.exceptions.Exit(1)


@db.command("sql")
@click.option("--dialect", type=click.Choice(["postgresql", "mysql", "sqlite"]), required=True)
def sql(dialect: str) -> None:
    """Print the schema as SQL for one dialect, generated from the migrations (what sql/ holds)."""
    from pal_slurm.db import migrate

    click.echo(migrate.offline_sql(dialect), nl=False)


@db.command("roles")
@click.option("--dialect", type=click.Choice(["postgresql", "mysql"]), required=True)
@click.option("--database", default="pal", show_default=True, metavar="NAME", help="The pal database's name.")
@click.option("--node", "nodes", multiple=True, metavar="NAME",
              help="Also create the login of GPU node NAME (pal_node_NAME; repeat for each node).")
def roles(dialect: str, database: str, nodes: tuple[str, ...]) -> None:
    """Print the SQL that creates the database roles and grants each the least it needs: the
    owner (the schema, admin commands), pal_placer (the placement daemon) and pal_node (the GPU
    nodes, each writing only its own rows); what sql/roles-*.sql hold.

    \b
    Run it as the server's administrator after `pal db upgrade`, and again after every
    upgrade (new tables get their grants); docs/admin-guide.md, "Database". Logins get no
    password here: set each at the client's prompt (psql's \\password), never on a command line.
    """
    from pal_slurm.db.roles import role_sql

    click.echo(role_sql(dialect, database=database, nodes=nodes), nl=False)  # type: ignore[arg-type]
