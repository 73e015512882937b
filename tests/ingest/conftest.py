"""The ingest tests' databases: a migrated SQLite file made once per module, copied for each test."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pal_slurm.db import migrate
from pal_slurm.db.engine import make_engine


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One migrated SQLite file, copied by each test that needs a fresh one (migrating is the slow part)."""
    path = tmp_path_factory.mktemp("template") / "pal.db"
    eng = make_engine(f"sqlite:///{path}")
    migrate.upgrade(eng)
    eng.dispose()
    return path


@pytest.fixture
def fresh(template: Path, tmp_path: Path):
    """fresh(name) -> the URL of a new, migrated SQLite database."""
    def make(name: str = "pal.db") -> str:
        shutil.copyfile(template, tmp_path / name)
        return f"sqlite:///{tmp_path / name}"
    return make
