"""Every placement decision goes to the `placements` table; `pal explain` reads it back.

Why a sink with a buffer: auditing must never stop placement. When the database is down
the records wait in a bounded in-memory queue (oldest dropped, counted) and are written
when it comes back.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.engine import Engine

from pal_slurm.db.engine import session_scope
from pal_slurm.db.models import Placement

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Record:
    job_id: str
    policy: str
    job_class: str | None
    version: int | None
    gpus: list[dict[str, Any]]
    alternatives: list[Any] | None
    reason: str
    outcome: str  # applied | released-unchanged | failed | observe | replanned
    decided_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    applied_at: datetime | None = None


class AuditSink:
    def __init__(self, engine_factory: Callable[[], Engine] | None, max_pending: int = 10000) -> None:
        self._engine_factory = engine_factory
        self.pending: deque[Record] = deque(maxlen=max_pending)
        self.dropped = 0
        self.last_error: str | None = None

    def add(self, record: Record) -> None:
        if len(self.pending) == self.pending.maxlen:
            self.dropped += 1
        self.pending.append(record)

    def flush(self) -> int:
        """Write what is pending; on failure keep it for the next cycle. Returns rows written."""
        if not self.pending or self._engine_factory is None:
            return 0
        batch = list(self.pending)
        try:
            with session_scope(self._engine_factory()) as session:
                # one bulk INSERT: a busy cycle records hundreds of decisions
                session.execute(insert(Placement), [
                    {"slurm_job_id": r.job_id, "policy": r.policy, "job_class": r.job_class,
                     "classification_version": r.version, "gpus": r.gpus, "alternatives": r.alternatives,
                     "reason": r.reason[:4000], "outcome": r.outcome, "decided_at": r.decided_at,
                     "applied_at": r.applied_at} for r in batch])
        except Exception as exc:  # noqa: BLE001 - the database being down must not stop placement
            self.last_error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
            log.warning("audit: %d placement record(s) kept in memory (%s)", len(batch), self.last_error)
            return 0
        for _ in batch:
            self.pending.popleft()
        self.last_error = None
        return len(batch)


def placements_for(engine: Engine, job_id: str | None = None, limit: int = 50) -> list[dict[str, Any]]:
    """Newest first; one job's full history with `job_id`."""
    with session_scope(engine) as session:
        stmt = select(Placement).order_by(Placement.decided_at.desc(), Placement.id.desc())
        if job_id is not None:
            stmt = stmt.where(Placement.slurm_job_id == job_id)
        rows = session.scalars(stmt.limit(limit)).all()
        return [{"job_id": p.slurm_job_id, "policy": p.policy, "class": p.job_class,
                 "classification_version": p.classification_version, "gpus": p.gpus,
                 "alternatives": p.alternatives, "reason": p.reason, "outcome": p.outcome,
                 "decided_at": p.decided_at.isoformat() if p.decided_at else None,
                 "applied_at": p.applied_at.isoformat() if p.applied_at else None} for p in rows]
