"""Writing and reading measurements: the only code that maps profile records to rows.

Imports are idempotent (a run's `run_key` is unique) and atomic (the caller's
session is one transaction: a file is imported whole or not at all). They check every new
score (pal_slurm.ingest.validate) and resolve every GPU name to one row per physical GPU
(`_Identity`; the rules are in docs/import-formats.md, "GPU identity").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import UniqueConstraint, case, delete, func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from pal_slurm.classification.classify_fleet import GroupRuns
from pal_slurm.db.models import Base, Benchmark, Gpu, Node, ProfileRun, utcnow
from pal_slurm.errors import GpuMoveRefused, InputError
from pal_slurm.ingest.records import SLOT_PREFIX, GpuInfo, ProfileRecord, slot_key
from pal_slurm.ingest.validate import DEFAULT_MAX_FACTOR, find_suspects

_CHUNK = 500


@dataclass
class ImportResult:
    records: int = 0
    added: int = 0
    already_present: int = 0
    new_gpus: int = 0  # net: how many rows the gpus table grew by (a merge takes one away)
    new_nodes: int = 0
    benchmarks: set[str] = field(default_factory=set)
    rejected: int = 0  # suspect scores left out (FILE:LINE in warnings)
    quarantined: int = 0  # suspect scores stored with profile_runs.quarantine set (--keep-suspect)
    merged_gpus: int = 0  # slot identities (slot:NODE:DEV) merged into the GPU's real UUID
    resolved_runs: int = 0  # runs of a slot-named row stored on the GPU known at that slot
    conflicts: int = 0  # identity conflicts reported, never merged
    model_conflicts: int = 0  # GPUs stored as another model than --model says (the stored one is kept)
    moved_gpus: int = 0  # GPUs put on another node than the one they were recorded on (allow_move only)
    warnings: list[str] = field(default_factory=list)  # "FILE:LINE: reason", for stderr

    def merge(self, other: "ImportResult") -> None:
        for name in ("records", "added", "already_present", "new_gpus", "new_nodes", "rejected", "quarantined",
                     "merged_gpus", "resolved_runs", "conflicts", "model_conflicts", "moved_gpus"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.benchmarks |= other.benchmarks
        self.warnings.extend(other.warnings)


def _chunks(items: Sequence[Any], size: int = _CHUNK) -> Iterable[Sequence[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _at(rec: ProfileRecord) -> str:
    return f"{rec.source_file}:{rec.line}"


def _ensure_benchmarks(session: Session, records: Sequence[ProfileRecord]) -> dict[str, Benchmark]:
    wanted: dict[str, ProfileRecord] = {}
    for rec in records:
        first = wanted.setdefault(rec.benchmark, rec)
        if first.lower_is_better != rec.lower_is_better:
            raise InputError(
                f"benchmark {rec.benchmark!r}: lower_is_better is {rec.lower_is_better} here "
                f"but {first.lower_is_better} at line {first.line}",
                source=rec.source_file,
                line=rec.line,
            )
    existing = {b.name: b for b in session.scalars(select(Benchmark).where(Benchmark.name.in_(list(wanted))))}
    for name, rec in wanted.items():
        bench = existing.get(name)
        if bench is None:
            bench = existing[name] = create_benchmark(session, name, rec.unit, rec.lower_is_better)
        if bench.lower_is_better != rec.lower_is_better:
            raise InputError(
                f"benchmark {name!r} is stored with lower_is_better={bench.lower_is_better}, "
                f"this file says {rec.lower_is_better}: use another --benchmark name",
                source=rec.source_file,
                line=rec.line,
            )
    session.flush()
    return existing


def create_benchmark(session: Session, name: str, unit: str, lower_is_better: bool) -> Benchmark:
    """A new benchmark row, or the one another import committed meanwhile.

    Why: benchmark rows are shared by every node, and `pal profile submit` starts one import
    per node at the same moment; on a fresh database two of them both find the benchmark
    missing and both insert it. The insert runs in a savepoint, so the loser's unique-key
    error undoes only that insert, and it reads the winner's row instead of failing its
    whole import."""
    try:
        with session.begin_nested():
            bench = Benchmark(name=name, unit=unit, lower_is_better=lower_is_better, description="")
            session.add(bench)
        return bench
    except IntegrityError:
        # a locking read: it sees the winner's committed row where the transaction's own
        # snapshot would not (MariaDB's REPEATABLE READ); SQLite has no such clause and needs none
        found = session.scalar(select(Benchmark).where(Benchmark.name == name).with_for_update(read=True))
        if found is None:
            raise
        return found


def _ensure_nodes(session: Session, names: set[str], now: datetime, result: ImportResult) -> dict[str, Node]:
    nodes: dict[str, Node] = {}
    for chunk in _chunks(sorted(names)):
        nodes.update({n.name: n for n in session.scalars(select(Node).where(Node.name.in_(chunk)))})
    for name in sorted(names - nodes.keys()):
        nodes[name] = Node(name=name, first_seen=now, last_seen=now)
        session.add(nodes[name])
        result.new_nodes += 1
    session.flush()
    return nodes


# -- identity: one physical GPU is one row ---------------------------------------------------------


def _is_slot(uuid: str) -> bool:
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
                rows = [r for chunk in _chunks(ids) for r in session.execute(
                    select(table.c.id, col, *other).where(col.in_(chunk)))]
                kept = {(gid, *k) for _rid, gid, *k in rows if gid not in target}
                clash = [rid for rid, gid, *k in rows if gid in target and (target[gid], *k) in kept]
                for chunk in _chunks(clash):
                    session.execute(delete(table).where(table.c.id.in_(chunk)))
            olds = sorted(target)
            for chunk in _chunks(olds):
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
        for chunk in _chunks(sorted(keys)):
            self.by_uuid.update({g.uuid: g for g in session.scalars(select(Gpu).where(Gpu.uuid.in_(chunk)))})
        node_ids = [n.id for n in nodes.values()]
        for chunk in _chunks(node_ids):
            self.by_uuid.update({g.uuid: g for g in session.scalars(select(Gpu).where(Gpu.node_id.in_(chunk)))})
        self.node_name = {n.id: name for name, n in nodes.items()}
        elsewhere = sorted({g.node_id for g in self.by_uuid.values() if g.node_id is not None} - set(self.node_name))
        for chunk in _chunks(elsewhere):  # stored GPUs on nodes this file does not name: their slot is still known
            self.node_name.update((i, n) for i, n in session.execute(select(Node.id, Node.name).where(Node.id.in_(chunk))))
        self.created: set[str] = set()  # GPUs this import added
        self.merges: list[tuple[Gpu, Gpu]] = []  # (slot identity, the real GPU it is)
        self.slots: dict[tuple[int | None, int | None], dict[str, Gpu]] = {}  # real GPUs by (node_id, index)
        for g in self.by_uuid.values():
            if not _is_slot(g.uuid):
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
        self.result.warnings.append(f"{_at(rec)}: {text}")

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
        real = not _is_slot(gpu.uuid)
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
        slots = {(r.gpu.node, r.gpu.nvml_index): r for r in recs if r.gpu.node is not None}
        located = {k: r for k, r in slots.items() if k[1] is not None}
        if len(located) > 1 or len({k[0] for k in slots}) > 1:
            (a, ra), (b, rb) = sorted(slots.items(), key=lambda kv: kv[1].line)[:2]
            self.warn(rb, f"GPU {uuid} is at {_slot_text(*b)} here but at {_slot_text(*a)} on line {ra.line}: "
                          "one UUID at two slots (not merged; the latest measurement's slot is kept)")
        gpu = self.by_uuid.get(uuid)
        if gpu is None:
            gpu = self.create(recs[0], latest, span)
        else:
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
                self.result.warnings.append(f"{_at(first_here)}: GPU {uuid} moved from {_slot_text(*stored)} to "
                                            f"{_slot_text(*here)} (--allow-move)")
            elif stored[0] is not None and here[0] is not None and (
                    stored[0] != here[0] or (stored[1] is not None and here[1] is not None and stored[1] != here[1])):
                self.warn(first_here, f"GPU {uuid} is at {_slot_text(*here)} here but stored at {_slot_text(*stored)}: "
                                  "one UUID at two slots (not merged; the latest measurement's slot is kept)")
            if newer:
                self._apply(gpu, latest.gpu)
            elif stored[1] is None and here[0] == stored[0]:
                self._apply(gpu, dataclasses.replace(latest.gpu, node=None))
        node, index = (self.node_name.get(gpu.node_id) if gpu.node_id is not None else None), gpu.nvml_index
        if node is None or index is None or node not in self.nodes:
            return gpu  # a slot this file does not name: nothing here to check against or merge
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
                f"{_at(min(recs, key=lambda r: r.line))}: GPU {uuid} (model {gpu.model}) is at "
                f"{_slot_text(node, index)}, where GPU {slot_gpu.uuid} is stored as model {slot_gpu.model}: "
                "not merged (a GPU's model does not change; check --model)")
            return gpu
        if slot_gpu is not None and not others:
            self.merges.append((slot_gpu, gpu))  # moved in bulk by finish()
            gpu.first_seen = min(gpu.first_seen, slot_gpu.first_seen)
            gpu.last_seen = max(gpu.last_seen, slot_gpu.last_seen)
            del self.by_uuid[slot_gpu.uuid]
            self.result.merged_gpus += 1
            if uuid in self.created or slot_gpu.uuid in self.created:
                self.result.new_gpus -= 1  # one physical GPU: the table did not grow
        return gpu

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


def _resolve_gpus(session: Session, records: Sequence[ProfileRecord], nodes: dict[str, Node],
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


def _extend_seen(resolved: dict[int, Gpu], records: Sequence[ProfileRecord]) -> None:
    """first/last seen follow the measurements, so historical imports keep their dates."""
    for r in records:
        gpu = resolved[id(r)]
        if r.started_at < gpu.first_seen:
            gpu.first_seen = r.started_at
        if r.started_at > gpu.last_seen:
            gpu.last_seen = r.started_at


def _check_models(session: Session, records: Sequence[ProfileRecord], present: set[str],
                  resolved: dict[int, Gpu], result: ImportResult) -> None:
    """--model naming another model than a GPU is stored as: warn, keep the stored model."""
    stored: dict[str, tuple[str, str]] = {}  # run_key -> (gpu uuid, model), for runs already present
    keys = [r.run_key for r in records if r.run_key in present]
    for chunk in _chunks(keys):
        stored.update((k, (u, m)) for k, u, m in session.execute(
            select(ProfileRun.run_key, Gpu.uuid, Gpu.model).join(Gpu, Gpu.id == ProfileRun.gpu_id)
            .where(ProfileRun.run_key.in_(chunk))))
    clash: dict[str, tuple[str, str, ProfileRecord]] = {}
    for r in records:
        if not r.gpu.model:
            continue
        if r.run_key in stored:
            uuid, model = stored[r.run_key]
        elif id(r) in resolved:
            uuid, model = resolved[id(r)].uuid, resolved[id(r)].model
        else:
            continue
        if model != r.gpu.model and uuid not in clash:
            clash[uuid] = (model, r.gpu.model, r)
    if not clash:
        return
    result.model_conflicts += len(clash)
    by_pair: dict[tuple[str, str], list[tuple[str, ProfileRecord]]] = {}
    for uuid, (model, given, r) in clash.items():
        by_pair.setdefault((model, given), []).append((uuid, r))
    for (model, given), items in sorted(by_pair.items()):
        uuid, first = items[0]
        more = f" and {len(items) - 1} more GPUs" if len(items) > 1 else ""
        result.warnings.append(f"{_at(first)}: GPU {uuid}{more} stored as model {model}, this import says {given}: "
                               f"kept {model} (a GPU's model does not change; check --model)")


def _stored_models(session: Session, records: Sequence[ProfileRecord]) -> dict[int, str]:
    """Record index -> the model its GPU is stored as, where that differs from the record's
    (a GPU's model does not change: its scores are judged within the stored model's group)."""
    by_uuid: dict[str, str] = {}
    for chunk in _chunks(sorted({r.gpu.uuid for r in records})):
        by_uuid.update((u, m) for u, m in session.execute(select(Gpu.uuid, Gpu.model).where(Gpu.uuid.in_(chunk))))
    by_slot: dict[tuple[str, int], str] = {}
    names = sorted({r.gpu.node for r in records if r.gpu.provisional and r.gpu.node})
    for chunk in _chunks(names):
        by_slot.update(((n, i), m) for n, i, m in session.execute(
            select(Node.name, Gpu.nvml_index, Gpu.model).join(Node, Node.id == Gpu.node_id)
            .where(Node.name.in_(chunk), Gpu.nvml_index.is_not(None))))
    out: dict[int, str] = {}
    for i, r in enumerate(records):
        model = by_uuid.get(r.gpu.uuid)
        if model is None and r.gpu.provisional and r.gpu.node is not None and r.gpu.nvml_index is not None:
            model = by_slot.get((r.gpu.node, r.gpu.nvml_index))
        if model is not None and model != r.gpu.model:
            out[i] = model
    return out


def _stored_scores(session: Session, records: Sequence[ProfileRecord],
                   model_of: dict[int, str]) -> dict[tuple[str, str], list[float]]:
    """The scores already stored per (model, benchmark) of the records' groups (not quarantined)."""
    models = sorted({model_of.get(i) or r.gpu.model for i, r in enumerate(records) if model_of.get(i) or r.gpu.model})
    benches = sorted({r.benchmark for r in records})
    out: dict[tuple[str, str], list[float]] = {}
    if not models:
        return out
    stmt = (select(Gpu.model, Benchmark.name, ProfileRun.score)
            .join(ProfileRun, ProfileRun.gpu_id == Gpu.id)
            .join(Benchmark, Benchmark.id == ProfileRun.benchmark_id)
            .where(Gpu.model.in_(models), Benchmark.name.in_(benches), ProfileRun.quarantine.is_(None)))
    for model, bench, score in session.execute(stmt):
        out.setdefault((model, bench), []).append(score)
    return out


def import_records(session: Session, records: Sequence[ProfileRecord], *,
                   max_factor: float = DEFAULT_MAX_FACTOR, keep_suspect: bool = False,
                   allow_move: bool = False) -> ImportResult:
    """Add the records' runs that are not stored yet; create nodes, GPUs and benchmarks as needed.

    A suspect score (pal_slurm.ingest.validate) is left out with a FILE:LINE warning, or,
    with `keep_suspect`, stored quarantined (never classified); a non-finite one is always
    left out. GPUs are resolved by identity (a slot-named row joins the GPU known at its
    slot). A GPU recorded on one node whose newest measurement here is on another is refused
    (GpuMoveRefused, nothing stored) unless `allow_move` (an admin's `pal profile import
    --allow-move`): the GPU nodes write their own measurements, and one must not take over
    another node's GPUs. Runs the caller's transaction only (no commit): the CLI commits once
    per file.
    """
    result = ImportResult(records=len(records))
    if not records:
        return result
    now = utcnow()
    seen: dict[str, ProfileRecord] = {}
    for rec in records:
        if rec.run_key in seen:
            raise InputError(
                f"run {rec.run_key[:12]}... appears twice (also at line {seen[rec.run_key].line})",
                source=rec.source_file,
                line=rec.line,
            )
        seen[rec.run_key] = rec
    present: set[str] = set()
    for chunk in _chunks(list(seen)):
        present.update(session.scalars(select(ProfileRun.run_key).where(ProfileRun.run_key.in_(chunk))))
    new = [r for r in records if r.run_key not in present]
    result.already_present = len(records) - len(new)
    result.benchmarks = {r.benchmark for r in records}
    quarantine: dict[int, str] = {}
    if new:
        model_of = _stored_models(session, new)
        suspects = find_suspects(new, _stored_scores(session, new, model_of), max_factor=max_factor,
                                 model_of=model_of)
        drop: set[int] = set()
        for s in suspects:
            rec = new[s.index]
            if keep_suspect and s.storable:
                quarantine[id(rec)] = s.reason[:255]
                result.quarantined += 1
                result.warnings.append(f"{_at(rec)}: {s.reason}: stored quarantined (not classified)")
            else:
                drop.add(s.index)
                result.rejected += 1
                hint = "" if keep_suspect or not s.storable else " (--keep-suspect stores it quarantined)"
                result.warnings.append(f"{_at(rec)}: {s.reason}: rejected{hint}")
        if drop:
            new = [r for i, r in enumerate(new) if i not in drop]
    resolved: dict[int, Gpu] = {}
    if new:
        benches = _ensure_benchmarks(session, new)
        nodes = _ensure_nodes(session, {r.gpu.node for r in new if r.gpu.node}, now, result)
        resolved = _resolve_gpus(session, new, nodes, result, allow_move)
    _check_models(session, records, present, resolved, result)
    if not new:
        return result
    rows = [
        {
            "run_key": r.run_key,
            "gpu_id": resolved[id(r)].id,
            "benchmark_id": benches[r.benchmark].id,
            "started_at": r.started_at,
            "duration_s": r.duration_s,
            "score": r.score,
            "unit": r.unit,
            "lower_is_better": r.lower_is_better,
            "repeats": r.repeats,
            "spread": r.spread,
            "sm_clock_mhz": r.sm_clock_mhz,
            "mem_clock_mhz": r.mem_clock_mhz,
            "power_w": r.power_w,
            "temperature_c": r.temperature_c,
            "throttle_reasons": r.throttle_reasons,
            "driver_version": r.driver_version,
            "cuda_version": r.cuda_version,
            "source": r.source,
            "imported_at": now,
            "quarantine": quarantine.get(id(r)),
        }
        for r in new
    ]
    session.execute(ProfileRun.__table__.insert(), rows)
    _extend_seen(resolved, new)
    result.added = len(new)
    return result


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
                c[1] += _is_slot(uuid)
    spare = sum(max(0, named - only) for _, named, only in per_node.values())  # slot-named GPUs left unclaimed
    unlocated = sum(1 for _, n, _i in rows if n is None)
    return IdentityCounts(
        gpus=len(rows), nodes=nodes, at_slot=sum(c[0] for c in per_node.values()),
        slot_named=sum(c[1] for c in per_node.values()), node_only=sum(c[2] for c in per_node.values()),
        unlocated=unlocated,
        physical_min=sum(at + max(0, only - named) for at, named, only in per_node.values())
        + max(0, unlocated - spare),
    )


def load_group_runs(session: Session, *, models: Sequence[str] | None = None) -> list[GroupRuns]:
    """Scores per GPU, grouped by model and benchmark, in a deterministic order."""
    stmt = (
        select(Gpu.model, Benchmark.name, Benchmark.lower_is_better, Gpu.uuid, ProfileRun.score)
        .join(ProfileRun, ProfileRun.gpu_id == Gpu.id)
        .join(Benchmark, Benchmark.id == ProfileRun.benchmark_id)
        .where(ProfileRun.quarantine.is_(None))
        .order_by(Gpu.model, Benchmark.name, Gpu.uuid, ProfileRun.id)
    )
    if models:
        stmt = stmt.where(Gpu.model.in_(list(models)))
    groups: dict[tuple[str, str], GroupRuns] = {}
    for model, bench, lib, uuid, score in session.execute(stmt):
        grp = groups.get((model, bench))
        if grp is None:
            grp = groups[(model, bench)] = GroupRuns(model=model, benchmark=bench, lower_is_better=lib, runs={})
        grp.runs.setdefault(uuid, []).append(score)
    return list(groups.values())
