"""Schema operations for the migrations that a rerun can repeat: each does nothing when what it
would create is there already.

Why: MariaDB and MySQL commit every DDL statement on its own, so a migration that fails (a
lost connection, a lock timeout, a full disk) after its first statement leaves the tables it
created or the columns it added behind, while the database is still stamped with the revision
before it. A rerun of `pal db upgrade` then runs the whole migration again; with these guards it
skips what is there and completes the rest. SQLite through Python's sqlite3 behaves the same
(the driver opens no transaction before DDL). On PostgreSQL a migration is one transaction and
a failure leaves nothing; the guards cost a catalogue read there.

Offline (`pal db sql`, sql/schema-*.sql) there is no database to ask: every statement is emitted.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import context, op

__all__ = ["add_column", "create_index", "create_table", "has_column", "has_index", "has_table"]


def _inspector() -> sa.Inspector | None:
    """A fresh inspector on the migration's connection (fresh: inspectors cache, and each
    guard must see the statements run since); None when emitting SQL offline."""
    if context.is_offline_mode():
        return None
    return sa.inspect(op.get_bind())


def has_table(name: str) -> bool:
    insp = _inspector()
    return insp is not None and insp.has_table(name)


def has_column(table: str, column: str) -> bool:
    insp = _inspector()
    return insp is not None and insp.has_table(table) and any(c["name"] == column for c in insp.get_columns(table))


def has_index(table: str, name: str) -> bool:
    insp = _inspector()
    return insp is not None and insp.has_table(table) and any(i["name"] == name for i in insp.get_indexes(table))


def create_table(name: str, *columns: Any, **kw: Any) -> None:
    """op.create_table unless the table exists (a CREATE TABLE is atomic: it is there whole or not at all)."""
    if not has_table(name):
        op.create_table(name, *columns, **kw)


def add_column(batch_op: Any, table: str, column: sa.Column[Any]) -> None:
    """batch_op.add_column unless `table` has the column already."""
    if not has_column(table, column.name):
        batch_op.add_column(column)


def create_index(batch_op: Any, table: str, name: str, columns: list[str], **kw: Any) -> None:
    """batch_op.create_index unless `table` has an index of that name already."""
    if not has_index(table, name):
        batch_op.create_index(name, columns, **kw)
