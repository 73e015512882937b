"""Inventory in the database, on every backend: upsert by UUID, missing never deleted, back when seen."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select

from pal_slurm.db.engine import session_scope
from pal_slurm.db.models import Gpu, Node
from pal_slurm.gpu.interface import GpuFault, InventoryScan, scan_inventory
from pal_slurm.gpu.simulated import SimBackend
from pal_slurm.gpu.simulated_fleet import make_fleet
from pal_slurm.profiler.inventory import store_inventory
from pal_slurm.profiler.run_store import save_inventory

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _gpus(engine) -> dict[str, Gpu]:
    with session_scope(engine) as s:
        rows = s.scalars(select(Gpu)).all()
        for g in rows:
            _ = g.node.name if g.node else None
        s.expunge_all()
        return {g.uuid: g for g in rows}


def _store(engine, scan: InventoryScan, when: datetime, *, allow_move: bool = False):
    with session_scope(engine) as s:
        return store_inventory(s, scan, now=when, allow_move=allow_move)


def test_first_scan_stores_every_field(engine) -> None:
    fleet = make_fleet(nodes=2, gpus_per_node=4, seed=7, bad_fraction=0.25)
    result = save_inventory(engine, scan_inventory(SimBackend(fleet, ["gpu001"])))
    assert len(result.added) == 4 and not result.updated and not result.missing
    gpus = _gpus(engine)
    assert set(gpus) == {g.uuid for g in fleet.gpus[:4]}
    for sim in fleet.gpus[:4]:
        row = gpus[sim.uuid]
        assert (row.node.name, row.model, row.minor_number, row.nvml_index) == ("gpu001", sim.model.name, sim.slot,
                                                                                 sim.slot)
        assert (row.serial, row.pci_bus_id, row.memory_mib) == (sim.serial, sim.pci_bus_id, sim.model.memory_mib)
        assert row.power_limit_w == pytest.approx(sim.power_limit_w, abs=0.05)
        assert row.driver_version == "550.54.15" and row.cuda_version == "12.4" and row.vbios_version
        assert row.ecc_corrected == (17 if sim.is_bad else 0) and row.ecc_uncorrected == 0
        assert row.retired_pages == (2 if sim.is_bad else 0)
        assert row.state == "present" and row.inventoried_at is not None and row.inventoried_at.tzinfo is not None
    assert any(fleet.gpus[i].is_bad for i in range(4)), "the fleet should show a bad GPU's counters"


def test_missing_gpu_is_marked_never_deleted_and_comes_back(engine) -> None:
    fleet = make_fleet(nodes=2, gpus_per_node=4, seed=7)
    full = scan_inventory(SimBackend(fleet, ["gpu001"]))
    other_node = scan_inventory(SimBackend(fleet, ["gpu002"]))
    _store(engine, full, T0)
    _store(engine, other_node, T0)
    gone = full.gpus[2].uuid
    partial = dataclasses.replace(full, gpus=tuple(g for g in full.gpus if g.uuid != gone))
    res = _store(engine, partial, T0 + timedelta(hours=1))
    assert res.missing == [gone] and len(res.updated) == 3
    gpus = _gpus(engine)
    assert len(gpus) == 8, "nothing deleted"
    assert gpus[gone].state == "missing" and gpus[gone].last_seen == T0
    assert all(g.state == "present" for u, g in gpus.items() if u != gone), "other node untouched"
    again = _store(engine, partial, T0 + timedelta(hours=2))
    assert again.missing == [], "already missing: reported once"
    back = _store(engine, full, T0 + timedelta(hours=3))
    assert back.returned == [gone] and not back.missing
    assert _gpus(engine)[gone].state == "present" and _gpus(engine)[gone].last_seen == T0 + timedelta(hours=3)


def test_lost_gpu_without_uuid_is_missing_with_uuid_is_kept(engine) -> None:
    fleet = make_fleet(nodes=1, gpus_per_node=4, seed=2)
    _store(engine, scan_inventory(SimBackend(fleet)), T0)
    lost_scan = scan_inventory(SimBackend(fleet, lost=[1]))
    assert lost_scan.faults[0].lost and lost_scan.faults[0].uuid is None
    res = _store(engine, lost_scan, T0 + timedelta(minutes=5))
    assert res.missing == [fleet.gpus[1].uuid] and res.faults[0].index == 1
    # A GPU that failed after telling its UUID is there but broken: not marked missing.
    fault = GpuFault(index=3, error="GPU 3: NVML error", uuid=fleet.gpus[3].uuid)
    known = dataclasses.replace(lost_scan, gpus=tuple(g for g in lost_scan.gpus if g.index != 3), faults=(fault,))
    res2 = _store(engine, known, T0 + timedelta(minutes=10))
    assert fleet.gpus[3].uuid not in res2.missing
    assert _gpus(engine)[fleet.gpus[3].uuid].state == "present"


def test_gpu_moved_to_another_node_keeps_its_row(engine) -> None:
    fleet = make_fleet(nodes=2, gpus_per_node=2, seed=4)
    scan1 = scan_inventory(SimBackend(fleet, ["gpu001"]))
    _store(engine, scan1, T0)
    moved = dataclasses.replace(scan1.gpus[0], node="gpu002", index=0)
    scan2 = InventoryScan(backend="sim", nodes=("gpu002",), gpus=(moved,))
    res = _store(engine, scan2, T0 + timedelta(days=1), allow_move=True)  # an admin's move (tests/ingest/test_gpu_move.py)
    assert res.updated == [moved.uuid] and res.missing == [] and res.moved == [moved.uuid]
    row = _gpus(engine)[moved.uuid]
    assert row.node.name == "gpu002" and row.first_seen == T0
    # The old node's next scan no longer shows it, but it is not the old node's GPU any more.
    res3 = _store(engine, dataclasses.replace(scan1, gpus=scan1.gpus[1:]), T0 + timedelta(days=2))
    assert res3.missing == []
    with session_scope(engine) as s:
        assert {n.name for n in s.scalars(select(Node))} == {"gpu001", "gpu002"}
