"""The `job_accounting` table: the placer's per-job tax records in, `pal report savings`'s rows out.

Why a sink with a buffer (as the placements' audit sink): accounting must never stop
placement. While the database is down the records wait in a bounded in-memory queue (the
oldest dropped and counted) and are written when it answers again.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import insert, select
from sqlalchemy.engine import Engine

from pal_slurm.db.engine import session_scope
from pal_slurm.db.models import JobAccounting
from pal_slurm.placer.ledger import JobAccount

log = logging.getLogger(__name__)


class AccountingSink:
    def __init__(self, engine_factory: Callable[[], Engine] | None, max_pending: int = 50_000) -> None:
        self._engine_factory = engine_factory
        self.pending: deque[JobAccount] = deque(maxlen=max_pending)
        self.dropped = 0
        self.last_error: str | None = None

    def add(self, records: list[JobAccount]) -> None:
        for r in records:
            if len(self.pending) == self.pending.maxlen:
                self.dropped += 1
            self.pending.append(r)

    def flush(self) -> int:
        """Write what is pending in one bulk INSERT; on failure keep it for the next cycle."""
        if not self.pending or self._engine_factory is None:
            return 0
        batch = list(self.pending)
        try:
            with session_scope(self._engine_factory()) as session:
                session.execute(insert(JobAccounting), [_row(r) for r in batch])
        except Exception as exc:  # noqa: BLE001 - the database being down must not stop placement
            self.last_error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
            log.warning("accounting: %d job record(s) kept in memory (%s)", len(batch), self.last_error)
            return 0
        for _ in batch:
            self.pending.popleft()
        self.last_error = None
        return len(batch)


def _row(r: JobAccount) -> dict[str, object]:
    return {"slurm_job_id": r.job_id, "mode": r.mode, "job_class": r.job_class, "partition": r.partition[:128],
            "account": r.account[:128], "user": r.user[:128],
            "gpus": [{"node": n, "minor": m, "slowdown": None if f is None else round(f, 6)} for n, m, f in r.gpus],
            "n_gpus": len(r.gpus), "started_at": r.started_at, "ended_at": r.ended_at, "runtime_s": r.runtime_s,
            "slowdown": r.factor, "tax_gpu_h": r.tax_gpu_h, "alternative": r.alternative,
            "alternative_slowdown": r.alternative_factor, "saved_gpu_h": r.saved_gpu_h,
            "classification_version": r.version}


@dataclass(frozen=True)
class AccountRow:
    """What the savings report reads of one record (plain columns: 100,000 of them load fast)."""

    job_id: str
    mode: str
    job_class: str
    partition: str
    account: str
    user: str
    gpus: list[dict[str, object]]
    n_gpus: int
    ended_at: datetime
    runtime_s: float
    slowdown: float | None
    tax_gpu_h: float | None
    alternative: str | None
    saved_gpu_h: float | None


def load_accounts(engine: Engine, since: datetime | None = None) -> list[AccountRow]:
    """Every record whose job ended at or after `since` (all with None), oldest first."""
    cols = (JobAccounting.slurm_job_id, JobAccounting.mode, JobAccounting.job_class, JobAccounting.partition,
            JobAccounting.account, JobAccounting.user, JobAccounting.gpus, JobAccounting.n_gpus,
            JobAccounting.ended_at, JobAccounting.runtime_s, JobAccounting.slowdown, JobAccounting.tax_gpu_h,
            JobAccounting.alternative, JobAccounting.saved_gpu_h)
    stmt = select(*cols).order_by(JobAccounting.ended_at, JobAccounting.id)
    if since is not None:
        stmt = stmt.where(JobAccounting.ended_at >= since)
    with session_scope(engine) as session:
        return [AccountRow(*row) for row in session.execute(stmt)]


__all__ = ["AccountRow", "AccountingSink", "load_accounts"]
