"""Alembic environment: run by pal_slurm.db.migrate, never by the alembic CLI with an ini file."""

from __future__ import annotations

from alembic import context

from pal_slurm.db.models import Base

config = context.config
target_metadata = Base.metadata


def run_offline() -> None:
    """Emit SQL for a dialect without a server (how sql/*.sql are generated)."""
    context.configure(
        url=config.get_main_option("sqlalchemy.url"),
        target_metadata=target_metadata,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
        render_as_batch=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    connection = config.attributes["connection"]
    context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
