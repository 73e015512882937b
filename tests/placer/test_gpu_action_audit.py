"""An administrator's GPU action (`pal gpus quarantine`/`release --apply`) is a row of the placements
table, beside the placer's decisions: `pal placements` lists it, the fairness report does not count it."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import create_engine

from pal_slurm.cli.main import cli
from pal_slurm.placer.audit import Record, placed_jobs, record_now


def test_gpu_actions_are_placement_rows_of_policy_admin(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'pal.db'}"
    assert CliRunner().invoke(cli, ["--db", url, "db", "upgrade"], env={"PAL_CONFIG": ""}).exit_code == 0
    engine = create_engine(url)
    gpu = {"node": "pal-n4", "minor": 3, "type": "v100_g3"}
    at = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
    record_now(engine, Record.gpu_action("1353", "quarantined", gpu=gpu, reason="ECC errors", at=at, user="alice"))
    record_now(engine, Record.gpu_action("1353", "quarantine-released", gpu=gpu, reason="released", at=at,
                                         user="alice"))
    res = CliRunner().invoke(cli, ["--db", url, "placements", "--json"], env={"PAL_CONFIG": ""})
    rows = json.loads(res.stdout)
    assert [(r["job_id"], r["outcome"], r["policy"], r["gpus"], r["reason"]) for r in rows] == [
        ("1353", "quarantine-released", "admin", [gpu], "released"),
        ("1353", "quarantined", "admin", [gpu], "ECC errors")]
    assert placed_jobs(engine) == []  # no user's job: nothing for fairness to count
    with pytest.raises(ValueError, match="not a GPU action outcome"):
        Record.gpu_action("1", "applied", gpu=gpu, reason="", at=at, user="")
