"""sql/ holds the schema for DBAs; it must be exactly what the migrations emit."""

from __future__ import annotations

import pytest

from conftest import REPO
from pal_slurm.db.migrate import offline_sql


@pytest.mark.parametrize("dialect", ["postgresql", "mysql", "sqlite"])
def test_sql_files_match_migrations(dialect: str) -> None:
    path = REPO / "sql" / f"schema-{dialect}.sql"
    assert path.exists(), f"{path} is missing: run `make sql`"
    assert path.read_text() == offline_sql(dialect), f"{path} drifted from the migrations: run `make sql`"
