"""Writing a profiling run to the database: inventory, scores, and the failures.

Scores go through the same import as `pal profile import` (pal_slurm.db.measurement_store), so a
run imported from its JSON-lines file later adds nothing twice. Failures (crash,
timeout, skipped, busy) go to `benchmark_failures`, keyed by run so they too are
stored once.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import Engine, select

from pal_slurm.db.engine import session_scope
from pal_slurm.db.import_result import ImportResult
from pal_slurm.db.migrate import require_current
from pal_slurm.db.models import BenchmarkFailure, Gpu, utcnow
from pal_slurm.db.measurement_store import import_records
from pal_slurm.ingest.jsonl import run_key_for
from pal_slurm.gpu.interface import InventoryScan
from pal_slurm.profiler.inventory import InventoryResult, store_inventory
from pal_slurm.profiler.runner import ProfileRunResult

__all__ = ["SavedRun", "save_inventory", "save_run"]

_ERROR_MAX = 2000


def save_inventory(engine: Engine, scan: InventoryScan, *, allow_move: bool = False) -> InventoryResult:
    """Store the scan in its own transaction; `allow_move`: see store_inventory."""
    require_current(engine)
    with session_scope(engine) as session:
        return store_inventory(session, scan, allow_move=allow_move)


@dataclass(frozen=True)
class SavedRun:
    inventory: InventoryResult
    imported: ImportResult
    failures_added: int


def save_run(engine: Engine, result: ProfileRunResult, *, now: datetime | None = None) -> SavedRun:
    """Inventory first (its own transaction: it stands even if the rest fails), then the
    scores and failures together (all or nothing)."""
    inventory = save_inventory(engine, result.scan)
    now = now or utcnow()
    with session_scope(engine) as session:
        imported = import_records(session, [o.record() for o in result.ok])
        rows = [(o.run_key, o.gpu.uuid, o.benchmark.name, o.started_at, o.duration_s, o.status, o.error or "",
                 o.source) for o in result.failed]
        stamp = now.astimezone(UTC).isoformat()
        rows += [(run_key_for(f"busy/{b.uuid}/{stamp}"), b.uuid, "*", now, None, "busy", b.describe(), "pal-profiler")
                 for b in result.busy]
        gpu_ids = dict(session.execute(select(Gpu.uuid, Gpu.id).where(Gpu.uuid.in_({r[1] for r in rows}))).all()) \
            if rows else {}
        present = set(session.scalars(select(BenchmarkFailure.run_key).where(
            BenchmarkFailure.run_key.in_([r[0] for r in rows])))) if rows else set()
        added = 0
        for key, uuid, bench, started, duration, status, error, source in rows:
            if key in present or uuid not in gpu_ids:
                continue
            session.add(BenchmarkFailure(run_key=key, gpu_id=gpu_ids[uuid], benchmark=bench, started_at=started,
                                         duration_s=duration, status=status, error=error[:_ERROR_MAX], source=source,
                                         recorded_at=now))
            added += 1
    return SavedRun(inventory, imported, added)
