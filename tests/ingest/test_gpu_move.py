"""A node's measurements never move a GPU to another node; an admin's --allow-move does.

On every backend (SQLite, and the real PostgreSQL and MariaDB servers): a profile file or an
inventory scan that puts a GPU recorded on node A on node B is refused whole, with an error
naming the GPU and both nodes, and nothing of it is stored; with allow_move the GPU moves and
keeps its history.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import func, select

from conftest import ARTIFACT_CONFIG
from tests.support.fleetgen import records
from pal_slurm.cli.main import cli
from pal_slurm.db.engine import session_scope
from pal_slurm.db.measurement_store import import_records
from pal_slurm.db.models import Gpu, Node, ProfileRun
from pal_slurm.errors import GpuMoveRefused
from pal_slurm.gpu.interface import InventoryScan, scan_inventory
from pal_slurm.gpu.simulated import SimBackend
from pal_slurm.gpu.simulated_fleet import make_fleet
from pal_slurm.ingest.jsonl import dump_jsonl
from pal_slurm.profiler.run_store import save_inventory

UUID = "GPU-moving-a"


def _on(node: str, *, later: timedelta = timedelta(0), tag: str = "") -> list:
    recs = records({UUID: 1.0, "GPU-steady-b": 1.0}, node_of={UUID: node, "GPU-steady-b": "node-s"}, tag=tag)
    return [dataclasses.replace(r, started_at=r.started_at + later) for r in recs]


def _node_of(engine, uuid: str) -> str | None:
    with session_scope(engine) as s:
        return s.scalar(select(Node.name).join(Gpu, Gpu.node_id == Node.id).where(Gpu.uuid == uuid))


def _runs(engine) -> int:
    with session_scope(engine) as s:
        return s.scalar(select(func.count()).select_from(ProfileRun))


def test_a_newer_measurement_on_another_node_is_refused_whole(engine) -> None:
    with session_scope(engine) as s:
        import_records(s, _on("node-1"))
    before = _runs(engine)
    with pytest.raises(GpuMoveRefused) as err:
        with session_scope(engine) as s:
            import_records(s, _on("node-2", later=timedelta(days=1), tag="later"))
    text = str(err.value)
    assert f"GPU {UUID} is recorded on node node-1, this measurement puts it on node node-2" in text
    assert "--allow-move" in text and text.startswith("<test>:")
    assert (err.value.uuid, err.value.recorded, err.value.new) == (UUID, "node-1", "node-2")
    assert _runs(engine) == before, "nothing of the refused file is stored"
    assert _node_of(engine, UUID) == "node-1"


def test_allow_move_moves_the_gpu_and_keeps_its_history(engine) -> None:
    with session_scope(engine) as s:
        import_records(s, _on("node-1"))
    before = _runs(engine)
    with session_scope(engine) as s:
        res = import_records(s, _on("node-2", later=timedelta(days=1), tag="later"), allow_move=True)
    assert res.moved_gpus == 1 and res.added == 8 and res.conflicts == 0
    assert any(f"GPU {UUID} moved from node-1 device 0 to node-2 device 0" in w for w in res.warnings), res.warnings
    assert _node_of(engine, UUID) == "node-2"
    assert _runs(engine) == before + 8
    with session_scope(engine) as s:
        assert s.scalar(select(func.count()).select_from(Gpu).where(Gpu.uuid == UUID)) == 1, "one row, not two"


def test_an_older_measurement_elsewhere_moves_nothing_and_is_not_refused(engine) -> None:
    """Only a move is refused: an older file from where the GPU used to be is a conflict to report."""
    with session_scope(engine) as s:
        import_records(s, _on("node-1", later=timedelta(days=2)))
    with session_scope(engine) as s:
        res = import_records(s, _on("node-0", tag="older"))
    assert res.moved_gpus == 0 and res.conflicts == 1 and "one UUID at two slots" in res.warnings[0]
    assert _node_of(engine, UUID) == "node-1"


def test_an_inventory_scan_on_another_node_is_refused_unless_allowed(engine) -> None:
    fleet = make_fleet(nodes=2, gpus_per_node=2, seed=4)
    first = scan_inventory(SimBackend(fleet, ["gpu001"]))
    save_inventory(engine, first)
    moved = dataclasses.replace(first.gpus[0], node="gpu002", index=0)
    scan = InventoryScan(backend="sim", nodes=("gpu002",), gpus=(moved,))
    with pytest.raises(GpuMoveRefused, match=f"GPU {moved.uuid} is recorded on node gpu001, this measurement "
                                             "puts it on node gpu002"):
        save_inventory(engine, scan)
    assert _node_of(engine, moved.uuid) == "gpu001"
    with session_scope(engine) as s:
        assert s.scalar(select(func.count()).select_from(Node).where(Node.name == "gpu002")) == 0, \
            "the refused scan stored nothing, not even its node"
    res = save_inventory(engine, scan, allow_move=True)
    assert res.moved == [moved.uuid] and res.updated == [moved.uuid]
    assert _node_of(engine, moved.uuid) == "gpu002"


def test_cli_import_refuses_a_move_and_allow_move_does_it(runner: CliRunner, db_url: str, tmp_path: Path) -> None:
    def pal(*args: str, code: int = 0):
        result = runner.invoke(cli, ["--db", db_url, *args], env={"PAL_CONFIG": ARTIFACT_CONFIG})
        assert result.exit_code == code, result.output
        assert "Traceback" not in result.output
        return result

    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    first.write_text(dump_jsonl(_on("node-1")))
    second.write_text(dump_jsonl(_on("node-2", later=timedelta(days=1), tag="later")))
    pal("db", "upgrade")
    pal("profile", "import", str(first))
    refused = pal("profile", "import", str(second), code=1)
    line = refused.output.strip()
    assert len(line.splitlines()) == 1 and f"{second}:" in line
    assert f"GPU {UUID} is recorded on node node-1, this measurement puts it on node node-2" in line
    data = json.loads(pal("profile", "import", "--allow-move", "--json", str(second)).stdout)
    assert data[0]["moved_gpus"] == 1 and data[0]["added"] == 8
