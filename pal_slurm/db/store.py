"""Writing and reading measurements: the only code that maps profile records to rows.

Imports are idempotent (a run's `run_key` is unique) and atomic (the caller's
session is one transaction: a file is imported whole or not at all).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from pal_slurm.db.models import Benchmark, Gpu, Node, ProfileRun, utcnow
from pal_slurm.errors import InputError
from pal_slurm.fleet import GroupRuns
from pal_slurm.ingest.records import GpuInfo, ProfileRecord

_CHUNK = 500


@dataclass
class ImportResult:
    records: int = 0
    added: int = 0
    already_present: int = 0
    new_gpus: int = 0
    new_nodes: int = 0
    benchmarks: set[str] = field(default_factory=set)

    def merge(self, other: "ImportResult") -> None:
        self.records += other.records
        self.added += other.added
        self.already_present += other.already_present
        self.new_gpus += other.new_gpus
        self.new_nodes += other.new_nodes
        self.benchmarks |= other.benchmarks


def _chunks(items: Sequence[str], size: int = _CHUNK) -> Iterable[Sequence[str]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


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
            bench = Benchmark(name=name, unit=rec.unit, lower_is_better=rec.lower_is_better, description="")
            session.add(bench)
            existing[name] = bench
        elif bench.lower_is_better != rec.lower_is_better:
            raise InputError(
                f"benchmark {name!r} is stored with lower_is_better={bench.lower_is_better}, "
                f"this file says {rec.lower_is_better}: use another --benchmark name",
                source=rec.source_file,
                line=rec.line,
            )
    session.flush()
    return existing


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


def _apply_gpu_info(gpu: Gpu, info: GpuInfo, node: Node | None) -> None:
    """Newer information wins field by field; what a file does not say is kept."""
    if node is not None:
        gpu.node = node
    for attr in ("nvml_index", "minor_number", "pci_bus_id", "serial", "memory_mib"):
        value = getattr(info, attr)
        if value is not None:
            setattr(gpu, attr, value)
    if info.model:
        gpu.model = info.model


def _ensure_gpus(
    session: Session, records: Sequence[ProfileRecord], nodes: dict[str, Node], now: datetime, result: ImportResult
) -> dict[str, Gpu]:
    infos: dict[str, GpuInfo] = {}
    first_run: dict[str, ProfileRecord] = {}
    for rec in records:  # the last record about a GPU carries the freshest identity
        infos[rec.gpu.uuid] = rec.gpu
        first_run.setdefault(rec.gpu.uuid, rec)
    gpus: dict[str, Gpu] = {}
    for chunk in _chunks(sorted(infos)):
        gpus.update({g.uuid: g for g in session.scalars(select(Gpu).where(Gpu.uuid.in_(chunk)))})
    for uuid, info in infos.items():
        node = nodes.get(info.node) if info.node else None
        gpu = gpus.get(uuid)
        if gpu is None:
            rec = first_run[uuid]
            if not info.model:
                raise InputError(f"GPU {uuid}: no model name (use --model)", source=rec.source_file, line=rec.line)
            gpu = Gpu(uuid=uuid, model=info.model, first_seen=rec.started_at, last_seen=rec.started_at, state="present")
            session.add(gpu)
            gpus[uuid] = gpu
            result.new_gpus += 1
        _apply_gpu_info(gpu, info, node)
    session.flush()
    return gpus


def _extend_seen(gpus: dict[str, Gpu], records: Sequence[ProfileRecord]) -> None:
    """first/last seen follow the measurements, so historical imports keep their dates."""
    span: dict[str, tuple[datetime, datetime]] = {}
    for r in records:
        lo, hi = span.get(r.gpu.uuid, (r.started_at, r.started_at))
        span[r.gpu.uuid] = (min(lo, r.started_at), max(hi, r.started_at))
    for uuid, (lo, hi) in span.items():
        gpu = gpus[uuid]
        gpu.first_seen = min(gpu.first_seen, lo)
        gpu.last_seen = max(gpu.last_seen, hi)


def import_records(session: Session, records: Sequence[ProfileRecord]) -> ImportResult:
    """Add the records' runs that are not stored yet; create nodes, GPUs and benchmarks as needed.

    Runs the caller's transaction only (no commit): the CLI commits once per file.
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
    if not new:
        return result
    benches = _ensure_benchmarks(session, new)
    nodes = _ensure_nodes(session, {r.gpu.node for r in new if r.gpu.node}, now, result)
    gpus = _ensure_gpus(session, new, nodes, now, result)
    rows = [
        {
            "run_key": r.run_key,
            "gpu_id": gpus[r.gpu.uuid].id,
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
        }
        for r in new
    ]
    session.execute(ProfileRun.__table__.insert(), rows)
    _extend_seen(gpus, new)
    result.added = len(new)
    return result


def load_group_runs(session: Session, *, models: Sequence[str] | None = None) -> list[GroupRuns]:
    """Scores per GPU, grouped by model and benchmark, in a deterministic order."""
    stmt = (
        select(Gpu.model, Benchmark.name, Benchmark.lower_is_better, Gpu.uuid, ProfileRun.score)
        .join(ProfileRun, ProfileRun.gpu_id == Gpu.id)
        .join(Benchmark, Benchmark.id == ProfileRun.benchmark_id)
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
