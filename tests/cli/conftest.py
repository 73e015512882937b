"""The CLI tests' shared databases: a profile file of a two-tier fleet, and a database that holds
it, imported and classified, for the commands that read one."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.support.fleetgen import records, two_tier_fleet
from tests.support.pal_cli import run
from pal_slurm.ingest.jsonl import dump_jsonl


@pytest.fixture
def fleet_file(tmp_path: Path) -> Path:
    recs = records(two_tier_fleet(), benchmark="resnet50") + records(two_tier_fleet(), benchmark="pagerank", tag="p")
    path = tmp_path / "fleet.jsonl"
    path.write_text(dump_jsonl(recs))
    return path


@pytest.fixture
def loaded(runner: CliRunner, sqlite_url: str, fleet_file: Path) -> str:
    run(runner, sqlite_url, "db", "upgrade")
    run(runner, sqlite_url, "profile", "import", str(fleet_file))
    run(runner, sqlite_url, "classify", "--allow-partial")  # no bert runs: classes B and C unprofiled
    return sqlite_url
