"""One physical GPU is one row: each imported record resolved to its GPU, and how well the stored
GPUs are identified.

A GPU's identity is its UUID; a row that names a GPU only by its slot gets the slot identity
``slot:<node>:<device>`` until the GPU's real UUID is imported there, and is then merged into it.
Conflicts (one UUID at two slots, two UUIDs at one slot at overlapping times, another model at
a slot) are reported, never merged. The rules: docs/import-formats.md, "GPU identity".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import UniqueConstraint, case, delete, func, select, update
from sqlalchemy.orm import Session

from pal_slurm.db.batches import chunks
from pal_slurm.db.import_result import ImportResult, record_at
from pal_slurm.db.models import Base, Gpu, Node
from pal_slurm.errors import GpuMoveRefused, InputError
from pal_slurm.ingest.records import SLOT_PREFIX, GpuInfo, ProfileRecord, slot_key

__all__ = ["IdentityCounts", "identity_counts", "is_slot", "resolve_gpus"]


def is_slot(uuid: str) -> bool:
    return uuid.startswith(SLOT_PREFIX)


def _overlap(a: tuple[datetime, datetime], b: tuple[datetime, datetime]) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


def _reassign(session: Session, merges: Sequence[tuple[Gpu, Gpu]]) -> None:
    """Every row that points at an `old` GPU points at its `new` one (the merges, in bulk: one
    statement per table); where a unique key would then hold twice (both were classified in
    one run), `old`'s row goes: `new` is the GPU."""
    if not merges:
        return
    session.flush()
    target = {old.id: new.id for old, new in merges}
    for table in Base.metadata.sorted_tables:
        for fk in table.foreign_keys:
            if fk.column.table.name != "gpus" or fk.column.name != "id":
                continue
            col = fk.parent
            keys = [[c for c in uc.columns if c.name != col.name] for uc in table.constraints
                    if isinstance(uc, UniqueConstraint) and col.name in [c.name for c in uc.columns]]
            for other in keys:
                ids = sorted(set(target) | set(target.values()))
                rows = [r for chunk in chunks(ids) for r in session.execute(
                    select(table.c.id, col, *other).where(col.in_(chunk)))]
                kept = {(gid, *k) for _rid, gid, *k in rows if gid not in target}
                clash = [rid for rid, gid, *k in rows if gid in target and (target[gid], *k) in kept]
                for chunk in chunks(clash):
                    session.execute(delete(table).where(table.c.id.in_(chunk)))
            olds = sorted(target)
            for chunk in chunks(olds):
                session.execute(update(table).where(col.in_(chunk))
                                .values({col.name: case({o: target[o] for o in chunk}, value=col)}))


class _Identity:
    """Resolves each record to its Gpu row (see docs/import-formats.md, "GPU identity")."""

    def __init__(self, session: Session, records: Sequence[ProfileRecord], nodes: dict[str, Node],
                 result: ImportResult, allow_move: bool = False) -> None:
        self.session, self.nodes, self.result = session, nodes, result
        self.allow_move = allow_move
        keys = {r.gpu.uuid for r in records}
        for r in records:  # the slot identity a real UUID may have to absorb
            if not r.gpu.provisional and r.gpu.node is not None and r.gpu.nvml_index is not None:
                keys.add(slot_key(r.gpu.node, r.gpu.nvml_index))
        self.by_uuid: dict[str, Gpu] = {}
        for chunk in chunks(sorted(keys)):
            self.by_uuid.update({g.uuid: g for g in session.scalars(select(Gpu).where(Gpu.uuid.in_(chunk)))})
        node_ids = [n.id for n in nodes.values()]
        for chunk in chunks(node_ids):
            self.by_uuid.update({g.uuid: g for g in session.scalars(select(Gpu).where(Gpu.node_id.in_(chunk)))})
        self.node_name = {n.id: name for name, n in nodes.items()}
        elsewhere = sorted({g.node_id for g in self.by_uuid.values() if g.node_id is not None} - set(self.node_name))
        for chunk in chunks(elsewhere):  # stored GPUs on nodes this file does not name: their slot is still known
            self.node_name.update((i, n) for i, n in session.execute(select(Node.id, Node.name).where(Node.id.in_(chunk))))
        self.created: set[str] = set()  # GPUs this import added
        self.merges: list[tuple[Gpu, Gpu]] = []  # (slot identity, the real GPU it is)
        self.slots: dict[tuple[int | None, int | None], dict[str, Gpu]] = {}  # real GPUs by (node_id, index)
        for g in self.by_uuid.values():
            if not is_slot(g.uuid):
                self.slots.setdefault((g.node_id, g.nvml_index), {})[g.uuid] = g

    def finish(self) -> None:
        """Carry out the merges: move the slot identities' rows, then delete them."""
        _reassign(self.session, self.merges)
        for old, _new in self.merges:
            self.session.delete(old)
        self.merges.clear()

    def real_at(self, node: str, index: int) -> list[Gpu]:
        return sorted(self.slots.get((self.nodes[node].id, index), {}).values(), key=lambda g: g.uuid)

    def warn(self, rec: ProfileRecord, text: str) -> None:
        self.result.conflicts += 1
        self.result.warnings.append(f"{record_at(rec)}: {text}")

    def create(self, rec: ProfileRecord, latest: ProfileRecord, span: tuple[datetime, datetime]) -> Gpu:
        if not rec.gpu.model:
            raise InputError(f"GPU {rec.gpu.uuid}: no model name (use --model)", source=rec.source_file, line=rec.line)
        gpu = Gpu(uuid=rec.gpu.uuid, model=rec.gpu.model, first_seen=span[0], last_seen=span[1], state="present")
        self.session.add(gpu)
        self.by_uuid[gpu.uuid] = gpu
        self.created.add(gpu.uuid)
        self.result.new_gpus += 1
        self._apply(gpu, latest.gpu)
        return gpu

    def _apply(self, gpu: Gpu, info: GpuInfo) -> None:
        real = not is_slot(gpu.uuid)
        if real:
            self.slots.get((gpu.node_id, gpu.nvml_index), {}).pop(gpu.uuid, None)
        if info.node is not None:
            gpu.node_id = self.nodes[info.node].id  # the id, not the relationship: no load of node.gpus
        for attr in ("nvml_index", "minor_number", "pci_bus_id", "serial", "memory_mib"):
            value = getattr(info, attr)
            if value is not None:
                setattr(gpu, attr, value)
        if real:
            self.slots.setdefault((gpu.node_id, gpu.nvml_index), {})[gpu.uuid] = gpu

    def resolve_real(self, uuid: str, recs: list[ProfileRecord]) -> Gpu:
        """A GPU named by its UUID: the UUID is the identity; its slot is checked, not trusted."""
        latest = max(recs, key=lambda r: r.started_at)
        span = (min(r.started_at for r in recs), latest.started_at)
        self._check_one_slot(uuid, recs)
        gpu = self.by_uuid.get(uuid)
        if gpu is None:
            gpu = self.create(recs[0], latest, span)
        else:
            self._update_stored(gpu, uuid, recs, latest)
        node, index = (self.node_name.get(gpu.node_id) if gpu.node_id is not None else None), gpu.nvml_index
        if node is None or index is None or node not in self.nodes:
            return gpu  # a slot this file does not name: nothing here to check against or merge
        self._claim_slot(gpu, uuid, recs, span, node, index)
        return gpu

    def _check_one_slot(self, uuid: str, recs: list[ProfileRecord]) -> None:
        """Warn when this file puts one UUID at two slots (or on two nodes)."""
        slots = {(r.gpu.node, r.gpu.nvml_index): r for r in recs if r.gpu.node is not None}
        located = {k: r for k, r in slots.items() if k[1] is not None}
        if len(located) > 1 or len({k[0] for k in slots}) > 1:
            (a, ra), (b, rb) = sorted(slots.items(), key=lambda kv: kv[1].line)[:2]
            self.warn(rb, f"GPU {uuid} is at {_slot_text(*b)} here but at {_slot_text(*a)} on line {ra.line}: "
                          "one UUID at two slots (not merged; the latest measurement's slot is kept)")

    def _update_stored(self, gpu: Gpu, uuid: str, recs: list[ProfileRecord], latest: ProfileRecord) -> None:
        """A stored GPU measured again: its newest measurement's slot is kept; a move to another
        node is refused (GpuMoveRefused) unless `allow_move`, another slot than stored is warned of."""
        stored = (self.node_name.get(gpu.node_id) if gpu.node_id is not None else None, gpu.nvml_index)
        here = (latest.gpu.node, latest.gpu.nvml_index)
        newer = latest.started_at >= gpu.last_seen or stored[0] is None
        first_here = min((r for r in recs if (r.gpu.node, r.gpu.nvml_index) == here), key=lambda r: r.line)
        if newer and stored[0] is not None and here[0] is not None and stored[0] != here[0]:
            # the newest measurement would move the GPU to another node: only an admin may
            if not self.allow_move:
                raise GpuMoveRefused(uuid, stored[0], here[0], source=first_here.source_file,
                                     line=first_here.line)
            self.result.moved_gpus += 1
            self.result.warnings.append(f"{record_at(first_here)}: GPU {uuid} moved from {_slot_text(*stored)} to "
                                        f"{_slot_text(*here)} (--allow-move)")
        elif stored[0] is not None and here[0] is not None and (
                stored[0] != here[0] or (stored[1] is not None and here[1] is not None and stored[1] != here[1])):
            self.warn(first_here, f"GPU {uuid} is at {_slot_text(*here)} here but stored at {_slot_text(*stored)}: "
                              "one UUID at two slots (not merged; the latest measurement's slot is kept)")
        if newer:
            self._apply(gpu, latest.gpu)
        elif stored[1] is None and here[0] == stored[0]:
            self._apply(gpu, dataclasses.replace(latest.gpu, node=None))

    def _claim_slot(self, gpu: Gpu, uuid: str, recs: list[ProfileRecord], span: tuple[datetime, datetime],
                    node: str, index: int) -> None:
        """The GPU at its slot: other real UUIDs there at overlapping times are warned of; the slot
        identity there is merged into it (by `finish`), unless it is stored as another model."""
        others = [g for g in self.real_at(node, index) if g is not gpu]
        for other in others:
            if _overlap((other.first_seen, other.last_seen), span):
                self.warn(min(recs, key=lambda r: r.line),
                          f"GPU {uuid} and GPU {other.uuid} are both at {_slot_text(node, index)} at overlapping "
                          f"times ({_day(span[0])}..{_day(span[1])} and {_day(other.first_seen)}.."
                          f"{_day(other.last_seen)}): two UUIDs at one slot (not merged)")
        slot_gpu = self.by_uuid.get(slot_key(node, index))
        if slot_gpu is not None and slot_gpu.model != gpu.model:
            self.result.model_conflicts += 1  # a GPU's model does not change: which --model is wrong is not known
            self.result.warnings.append(
                f"{record_at(min(recs, key=lambda r: r.line))}: GPU {uuid} (model {gpu.model}) is at "
                f"{_slot_text(node, index)}, where GPU {slot_gpu.uuid} is stored as model {slot_gpu.model}: "
                "not merged (a GPU's model does not change; check --model)")
            return
        if slot_gpu is not None and not others:
            self.merges.append((slot_gpu, gpu))  # moved in bulk by finish()
            gpu.first_seen = min(gpu.first_seen, slot_gpu.first_seen)
            gpu.last_seen = max(gpu.last_seen, slot_gpu.last_seen)
            del self.by_uuid[slot_gpu.uuid]
            self.result.merged_gpus += 1
            if uuid in self.created or slot_gpu.uuid in self.created:
                self.result.new_gpus -= 1  # one physical GPU: the table did not grow

    def resolve_slot(self, key: str, recs: list[ProfileRecord]) -> dict[int, Gpu]:
        """Runs of a GPU known only by its slot: the real GPU known there, else the slot identity."""
        node, index = recs[0].gpu.node, recs[0].gpu.nvml_index
        assert node is not None and index is not None
        real = self.real_at(node, index)
        out: dict[int, Gpu] = {}
        if real:
            for r in recs:  # the GPU whose measurements are nearest in time (a replaced GPU)
                out[id(r)] = min(real, key=lambda g: (_distance(g, r.started_at), g.uuid))
            self.result.resolved_runs += len(recs)
            return out
        gpu = self.by_uuid.get(key)
        latest = max(recs, key=lambda r: r.started_at)
        if gpu is None:
            gpu = self.create(recs[0], latest, (min(r.started_at for r in recs), latest.started_at))
        return {id(r): gpu for r in recs}


def _distance(gpu: Gpu, when: datetime) -> float:
    if gpu.first_seen <= when <= gpu.last_seen:
        return 0.0
    return min(abs((gpu.first_seen - when).total_seconds()), abs((when - gpu.last_seen).total_seconds()))


def _slot_text(node: str | None, index: int | None) -> str:
    return f"{node or '?'} device {'?' if index is None else index}"


def _day(when: datetime) -> str:
    return when.date().isoformat()


def resolve_gpus(session: Session, records: Sequence[ProfileRecord], nodes: dict[str, Node],
                  result: ImportResult, allow_move: bool = False) -> dict[int, Gpu]:
    """id(record) -> its Gpu. Real UUIDs first (they claim slots), then the slot-named rows:
    so the result is the same in whichever order files (or rows) come."""
    ident = _Identity(session, records, nodes, result, allow_move)
    real: dict[str, list[ProfileRecord]] = {}
    slots: dict[str, list[ProfileRecord]] = {}
    for r in records:
        (slots if r.gpu.provisional else real).setdefault(r.gpu.uuid, []).append(r)
    out: dict[int, Gpu] = {}
    for uuid in sorted(real):
        gpu = ident.resolve_real(uuid, real[uuid])
        out.update((id(r), gpu) for r in real[uuid])
    ident.finish()
    session.flush()
    for key in sorted(slots):
        out.update(ident.resolve_slot(key, slots[key]))
    session.flush()
    return out


@dataclass(frozen=True)
class IdentityCounts:
    """How well the stored GPUs are identified (what `pal profile import` prints at the end).

    `at_slot`: GPUs whose node and device are known (by real UUID or by slot name alone);
    `node_only`: a real UUID on a known node, device unknown (it may be one of that node's
    slot-named GPUs: nothing in the data says which); `unlocated`: no node known.
    """

    gpus: int
    nodes: int
    at_slot: int
    slot_named: int  # of at_slot: known only by their slot (no real UUID imported yet)
    node_only: int
    unlocated: int
    # The fewest physical GPUs the rows can be: on each node, a UUID whose slot is unknown may
    # be one of that node's slot-named GPUs (nothing says which, so they stay apart); and a GPU
    # with no node may be any slot-named one left. `gpus` is the most.
    physical_min: int

    def as_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)


def identity_counts(session: Session) -> IdentityCounts:
    rows = session.execute(select(Gpu.uuid, Gpu.node_id, Gpu.nvml_index)).all()
    nodes = session.scalar(select(func.count()).select_from(Node)) or 0
    per_node: dict[int, list[int]] = {}  # node -> [GPUs at a slot, of them slot-named, UUIDs without slot]
    for uuid, node, index in rows:
        if node is not None:
            c = per_node.setdefault(node, [0, 0, 0])
            if index is None:
                c[2] += 1
            else:
                c[0] += 1
                c[1] += is_slot(uuid)
    spare = sum(max(0, named - only) for _, named, only in per_node.values())  # slot-named GPUs left unclaimed
    unlocated = sum(1 for _, n, _i in rows if n is None)
    return IdentityCounts(
        gpus=len(rows), nodes=nodes, at_slot=sum(c[0] for c in per_node.values()),
        slot_named=sum(c[1] for c in per_node.values()), node_only=sum(c[2] for c in per_node.values()),
        unlocated=unlocated,
        physical_min=sum(at + max(0, only - named) for at, named, only in per_node.values())
        + max(0, unlocated - spare),
    )
