"""Writing and reading measurements: the only code that maps profile records to rows.

Imports are idempotent (a run's `run_key` is unique) and atomic (the caller's
session is one transaction: a file is imported whole or not at all). They check every new
score (pal_slurm.ingest.validate) and resolve every GPU name to one row per physical GPU
(`db/gpu_identity`; the rules are in docs/import-formats.md, "GPU identity").
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from pal_slurm.classification.classify_fleet import GroupRuns
from pal_slurm.db.batches import chunks
from pal_slurm.db.gpu_identity import resolve_gpus
from pal_slurm.db.import_result import ImportResult, record_at
from pal_slurm.db.models import Benchmark, Gpu, Node, ProfileRun, utcnow
from pal_slurm.errors import InputError
from pal_slurm.ingest.records import ProfileRecord
from pal_slurm.ingest.validate import DEFAULT_MAX_FACTOR, find_suspects


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
    for chunk in chunks(sorted(names)):
        nodes.update({n.name: n for n in session.scalars(select(Node).where(Node.name.in_(chunk)))})
    for name in sorted(names - nodes.keys()):
        nodes[name] = Node(name=name, first_seen=now, last_seen=now)
        session.add(nodes[name])
        result.new_nodes += 1
    session.flush()
    return nodes


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
    for chunk in chunks(keys):
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
        result.warnings.append(f"{record_at(first)}: GPU {uuid}{more} stored as model {model}, this import says "
                               f"{given}: kept {model} (a GPU's model does not change; check --model)")


def _stored_models(session: Session, records: Sequence[ProfileRecord]) -> dict[int, str]:
    """Record index -> the model its GPU is stored as, where that differs from the record's
    (a GPU's model does not change: its scores are judged within the stored model's group)."""
    by_uuid: dict[str, str] = {}
    for chunk in chunks(sorted({r.gpu.uuid for r in records})):
        by_uuid.update((u, m) for u, m in session.execute(select(Gpu.uuid, Gpu.model).where(Gpu.uuid.in_(chunk))))
    by_slot: dict[tuple[str, int], str] = {}
    names = sorted({r.gpu.node for r in records if r.gpu.provisional and r.gpu.node})
    for chunk in chunks(names):
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
    present = _present_keys(session, _run_keys(records))
    new = [r for r in records if r.run_key not in present]
    result.already_present = len(records) - len(new)
    result.benchmarks = {r.benchmark for r in records}
    quarantine: dict[int, str] = {}
    if new:
        new, quarantine = _screen_scores(session, new, result, max_factor=max_factor, keep_suspect=keep_suspect)
    resolved: dict[int, Gpu] = {}
    if new:
        benches = _ensure_benchmarks(session, new)
        nodes = _ensure_nodes(session, {r.gpu.node for r in new if r.gpu.node}, now, result)
        resolved = resolve_gpus(session, new, nodes, result, allow_move)
    _check_models(session, records, present, resolved, result)
    if not new:
        return result
    session.execute(ProfileRun.__table__.insert(), _run_rows(new, resolved, benches, quarantine, now))
    _extend_seen(resolved, new)
    result.added = len(new)
    return result


def _run_keys(records: Sequence[ProfileRecord]) -> list[str]:
    """The records' run keys, in order; a key twice in one import is refused (InputError at its
    second line): one run is one measurement."""
    seen: dict[str, ProfileRecord] = {}
    for rec in records:
        if rec.run_key in seen:
            raise InputError(
                f"run {rec.run_key[:12]}... appears twice (also at line {seen[rec.run_key].line})",
                source=rec.source_file,
                line=rec.line,
            )
        seen[rec.run_key] = rec
    return list(seen)


def _present_keys(session: Session, keys: list[str]) -> set[str]:
    """The run keys stored already: those runs are not added again."""
    present: set[str] = set()
    for chunk in chunks(keys):
        present.update(session.scalars(select(ProfileRun.run_key).where(ProfileRun.run_key.in_(chunk))))
    return present


def _screen_scores(session: Session, new: list[ProfileRecord], result: ImportResult, *, max_factor: float,
                   keep_suspect: bool) -> tuple[list[ProfileRecord], dict[int, str]]:
    """The new records without their rejected suspect scores, and id(record) -> why, for the
    suspects kept quarantined; each with its FILE:LINE warning in `result`."""
    quarantine: dict[int, str] = {}
    model_of = _stored_models(session, new)
    suspects = find_suspects(new, _stored_scores(session, new, model_of), max_factor=max_factor,
                             model_of=model_of)
    drop: set[int] = set()
    for s in suspects:
        rec = new[s.index]
        if keep_suspect and s.storable:
            quarantine[id(rec)] = s.reason[:255]
            result.quarantined += 1
            result.warnings.append(f"{record_at(rec)}: {s.reason}: stored quarantined (not classified)")
        else:
            drop.add(s.index)
            result.rejected += 1
            hint = "" if keep_suspect or not s.storable else " (--keep-suspect stores it quarantined)"
            result.warnings.append(f"{record_at(rec)}: {s.reason}: rejected{hint}")
    if drop:
        new = [r for i, r in enumerate(new) if i not in drop]
    return new, quarantine


def _run_rows(new: Sequence[ProfileRecord], resolved: dict[int, Gpu], benches: dict[str, Benchmark],
              quarantine: dict[int, str], now: datetime) -> list[dict[str, Any]]:
    """The profile_runs rows of the new records, for one bulk insert."""
    return [
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
