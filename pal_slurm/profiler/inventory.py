"""Store an inventory scan: upsert nodes and GPUs by UUID; a vanished GPU is marked missing.

A GPU is identified by its UUID, never by node and slot: a GPU moved to another node
keeps its history, a replaced one is a new row. A scan does not move a GPU recorded on
another node by itself: that takes an admin's `--allow-move` (GpuMoveRefused otherwise), since
each GPU node stores its own scans and must not take over another node's GPUs. A GPU that a scan of its node no longer
shows is marked `state='missing'` (never deleted: its measurements and classes stay
auditable) and becomes `present` again when a scan sees it. A GPU that answered with an
error but told its UUID is neither refreshed nor marked missing: it is there, but broken.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from pal_slurm.db.models import Gpu, Node, utcnow
from pal_slurm.errors import GpuMoveRefused
from pal_slurm.gpu.interface import GpuFault, GpuInventory, InventoryScan

__all__ = ["InventoryResult", "store_inventory"]

log = logging.getLogger(__name__)

_FIELDS = ("nvml_index", "minor_number", "pci_bus_id", "serial", "memory_mib", "power_limit_w", "driver_version",
           "cuda_version", "vbios_version", "ecc_corrected", "ecc_uncorrected", "retired_pages")


@dataclass
class InventoryResult:
    nodes: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)  # UUIDs seen for the first time
    updated: list[str] = field(default_factory=list)  # UUIDs already known
    returned: list[str] = field(default_factory=list)  # were missing, seen again
    missing: list[str] = field(default_factory=list)  # newly marked missing by this scan
    moved: list[str] = field(default_factory=list)  # recorded on another node, moved here (allow_move)
    faults: list[GpuFault] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return {"nodes": self.nodes, "added": self.added, "updated": self.updated, "returned": self.returned,
                "missing": self.missing, "moved": self.moved,
                "faults": [{"index": f.index, "uuid": f.uuid, "lost": f.lost, "error": f.error} for f in self.faults]}


def _node(session: Session, name: str, now: datetime) -> Node:
    node = session.scalars(select(Node).where(Node.name == name)).one_or_none()
    if node is None:
        node = Node(name=name, first_seen=now, last_seen=now)
        session.add(node)
        session.flush()
    node.last_seen = max(node.last_seen, now)
    return node


def _apply(gpu: Gpu, inv: GpuInventory, node: Node, now: datetime) -> None:
    gpu.node = node
    gpu.model = inv.name
    for attr in _FIELDS:
        setattr(gpu, attr, getattr(inv, attr))  # the scan is the truth now, None included
    gpu.state = "present"
    gpu.last_seen = max(gpu.last_seen, now)
    gpu.inventoried_at = now


def store_inventory(session: Session, scan: InventoryScan, now: datetime | None = None, *,
                    allow_move: bool = False) -> InventoryResult:
    """Upsert `scan` in the caller's transaction; returns what changed. A GPU recorded on
    another node than the scan's raises GpuMoveRefused (nothing stored) unless `allow_move`."""
    now = now or utcnow()
    result = InventoryResult(nodes=list(scan.nodes), faults=list(scan.faults))
    nodes = {name: _node(session, name, now) for name in scan.nodes}
    for inv in scan.gpus:
        if inv.node not in nodes:
            nodes[inv.node] = _node(session, inv.node, now)
    uuids = [g.uuid for g in scan.gpus]
    known = {g.uuid: g for g in session.scalars(select(Gpu).where(Gpu.uuid.in_(uuids)))} if uuids else {}
    for inv in scan.gpus:
        gpu = known.get(inv.uuid)
        if gpu is None:
            gpu = Gpu(uuid=inv.uuid, model=inv.name, first_seen=now, last_seen=now, state="present")
            session.add(gpu)
            result.added.append(inv.uuid)
        else:
            (result.returned if gpu.state == "missing" else result.updated).append(inv.uuid)
            here = nodes[inv.node]
            if gpu.node_id is not None and gpu.node_id != here.id:
                recorded = gpu.node.name if gpu.node is not None else f"id {gpu.node_id}"
                if not allow_move:
                    raise GpuMoveRefused(inv.uuid, recorded, inv.node)
                result.moved.append(inv.uuid)
                log.warning("GPU %s moved from node %s to %s (--allow-move)", inv.uuid, recorded, inv.node)
        _apply(gpu, inv, nodes[inv.node], now)
    session.flush()
    seen = set(uuids) | {f.uuid for f in scan.faults if f.uuid}
    node_ids = [n.id for n in nodes.values() if n.name in scan.nodes]
    if node_ids:
        stale = session.scalars(select(Gpu).where(Gpu.node_id.in_(node_ids), Gpu.state != "missing"))
        for gpu in stale:
            if gpu.uuid not in seen:
                gpu.state = "missing"
                result.missing.append(gpu.uuid)
                log.warning("GPU %s (%s) is no longer on node %s: marked missing", gpu.uuid, gpu.model,
                            gpu.node.name if gpu.node else "?")
    for uuid in result.returned:
        log.info("GPU %s is back: marked present", uuid)
    return result
