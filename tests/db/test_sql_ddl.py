"""sql/ holds the schema and the database roles for DBAs; each must be exactly what the migrations
and pal_slurm/db/roles.py emit."""

from __future__ import annotations

import pytest

from conftest import REPO
from pal_slurm.db.migrate import offline_sql


@pytest.mark.parametrize("dialect", ["postgresql", "mysql", "sqlite"])
def test_sql_files_match_migrations(dialect: str) -> None:
    path = REPO / "sql" / f"schema-{dialect}.sql"
    assert path.exists(), f"{path} is missing: run `make sql`"
    assert path.read_text() == offline_sql(dialect), f"{path} drifted from the migrations: run `make sql`"


@pytest.mark.parametrize("dialect", ["postgresql", "mysql"])
def test_role_files_match_the_role_definitions(dialect: str) -> None:
    from pal_slurm.db.roles import role_sql

    path = REPO / "sql" / f"roles-{dialect}.sql"
    assert path.exists(), f"{path} is missing: run `make sql`"
    assert path.read_text() == role_sql(dialect), f"{path} drifted from pal_slurm/db/role_grants.py: run `make sql`"
