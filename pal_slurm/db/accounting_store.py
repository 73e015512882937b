"""The `job_accounting` table: the placer's per-job tax records in, `pal report savings`'s rows out.

Why a sink with a buffer (as the placements' audit sink): accounting must never stop
placement. While the database is down the records wait in a bounded in-memory queue (the
oldest dropped and counted) and are written when it answers again.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime

from sqlalchemy import String, and_, case, func, insert, literal, select
from sqlalchemy.engine import Engine

from pal_slurm.db.engine import session_scope
from pal_slurm.db.models import JobAccounting
from pal_slurm.savings import Cell, JobAccount, PaceCell

log = logging.getLogger(__name__)


class AccountingSink:
    """The finished jobs' records waiting for the database; `flush` may run on the placer's
    database thread while the cycle adds (see pal_slurm.placer.audit.AuditSink)."""

    def __init__(self, engine_factory: Callable[[], Engine] | None, max_pending: int = 50_000) -> None:
        self._engine_factory = engine_factory
        self.max_pending = max_pending
        self.pending: deque[JobAccount] = deque()
        self.dropped = 0
        self.last_error: str | None = None
        self._lock = threading.Lock()

    def add(self, records: list[JobAccount]) -> None:
        with self._lock:
            self.pending.extend(records)
            self._trim()

    def _trim(self) -> None:
        while len(self.pending) > self.max_pending:
            self.pending.popleft()
            self.dropped += 1

    def flush(self, *, raise_errors: bool = False) -> int:
        """Write what is pending in one bulk INSERT; on failure keep it for the next flush
        (and raise it with `raise_errors`)."""
        if self._engine_factory is None:
            return 0
        with self._lock:
            if not self.pending:
                return 0
            batch = list(self.pending)
            self.pending.clear()
        try:
            with session_scope(self._engine_factory()) as session:
                session.execute(insert(JobAccounting), [_row(r) for r in batch])
        except Exception as exc:  # noqa: BLE001 - the database being down must not stop placement
            with self._lock:
                self.pending.extendleft(reversed(batch))
                self._trim()
            self.last_error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
            log.warning("accounting: %d job record(s) kept in memory (%s)", len(batch), self.last_error)
            if raise_errors:
                raise
            return 0
        self.last_error = None
        return len(batch)


def _row(r: JobAccount) -> dict[str, object]:
    return {"slurm_job_id": r.job_id, "mode": r.mode, "job_class": r.job_class, "partition": r.partition[:128],
            "account": r.account[:128], "user": r.user[:128],
            "gpus": [{"node": n, "minor": m, "slowdown": None if f is None else round(f, 6)} for n, m, f in r.gpus],
            "n_gpus": len(r.gpus), "slowest_gpus": r.slowest_text(), "started_at": r.started_at,
            "ended_at": r.ended_at, "runtime_s": r.runtime_s, "slowdown": r.factor, "tax_gpu_h": r.tax_gpu_h,
            "alternative": r.alternative, "alternative_slowdown": r.alternative_factor,
            "saved_gpu_h": r.saved_gpu_h, "classification_version": r.version, "fingerprint": r.fingerprint,
            "time_limit_s": r.time_limit_s}


def load_cells(engine: Engine, since: datetime | None = None,
               by: str | None = None) -> tuple[list[Cell], list[PaceCell]]:
    """The savings report's sums of every job that ended at or after `since` (all with None),
    aggregated by the database: per group (`by`), mode and accounted-or-not, and the loss per
    set of pace-setting GPUs (100,000 jobs in a fraction of a second)."""
    t = JobAccounting.__table__
    key = {"partition": t.c.partition, "account": t.c.account, "user": t.c.user, "class": t.c.job_class,
           None: literal("", String)}[by]
    accounted = and_(t.c.slowdown.is_not(None), t.c.tax_gpu_h.is_not(None))
    acc = case((accounted, 1), else_=0)
    compared = and_(accounted, t.c.saved_gpu_h.is_not(None))
    sums = (func.count(), func.sum(t.c.n_gpus * t.c.runtime_s),
            func.sum(case((t.c.tax_gpu_h > 0, t.c.tax_gpu_h), else_=0.0)),
            func.sum(func.coalesce(t.c.tax_gpu_h, 0.0)),
            func.sum(case((compared, t.c.saved_gpu_h), else_=0.0)),
            func.sum(case((compared, 1), else_=0)))
    groups = (t.c.mode, acc) if by is None else (key, t.c.mode, acc)
    stmt = select(key, t.c.mode, acc, *sums).group_by(*groups)
    pace = (select(t.c.slowest_gpus, func.sum(t.c.tax_gpu_h), func.count())
            .where(t.c.tax_gpu_h > 0, t.c.slowest_gpus != "").group_by(t.c.slowest_gpus))
    with engine.connect() as conn:
        # a window that holds every row needs no filter: with it, a database without
        # statistics (SQLite) walks the ended_at index row by row, twice as slow as a scan
        oldest = conn.execute(select(func.min(t.c.ended_at))).scalar() if since is not None else None
        if since is not None and (oldest is None or _naive(oldest) < _naive(since)):
            stmt = stmt.where(t.c.ended_at >= since)
            pace = pace.where(t.c.ended_at >= since)
        cells = [Cell(str(g), str(m), bool(a), int(n), float(h or 0) / 3600.0, float(lost or 0), float(net or 0),
                      float(saved or 0), int(cmp or 0))
                 for g, m, a, n, h, lost, net, saved, cmp in conn.execute(stmt)]
        paces = [PaceCell(str(k), float(v or 0), int(n)) for k, v, n in conn.execute(pace)]
    return cells, paces


def _naive(at: datetime) -> datetime:
    """`at` without its zone, as UTC (what the column stores; SQLite and MariaDB give it back naive)."""
    return at.astimezone(UTC).replace(tzinfo=None) if at.tzinfo is not None else at


__all__ = ["AccountingSink", "load_cells"]
