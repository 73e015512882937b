"""Every placement decision goes to the `placements` table; `pal explain` reads it back. So does
an administrator's GPU action (`pal gpus quarantine`/`release --apply`: `Record.gpu_action`,
written at once by `record_now`).

Why a sink with a buffer: auditing must never stop placement. When the database is down
the records wait in a bounded in-memory queue (oldest dropped, counted) and are written
when it comes back.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import insert, select, update
from sqlalchemy.engine import Engine

from pal_slurm.db.engine import session_scope
from pal_slurm.db.models import JobAccounting, Placement
from pal_slurm.report.fairness import PlacedJob
from pal_slurm.slurm.model import SlurmJob

log = logging.getLogger(__name__)

#: the outcomes of an administrator's action on a GPU slot (`Record.gpu_action`)
GPU_ACTIONS = ("quarantined", "quarantine-released")


def gpu_entry(node: str, minor: int, slowdown: float, gres_type: str | None = None) -> dict[str, Any]:
    """One GPU of a record, built the one way every outcome (and the demo's observe week) builds
    it: node, device minor, the slot's GRES type where the placer knows it, and the slowdown
    factor the decision ranked it by (what `pal explain` shows and the accounting sums)."""
    entry: dict[str, Any] = {"node": node, "minor": minor}
    if gres_type is not None:
        entry["type"] = gres_type
    entry["slowdown"] = round(float(slowdown), 4)
    return entry


@dataclass(frozen=True)
class Record:
    job_id: str
    policy: str
    job_class: str | None
    version: int | None
    gpus: list[dict[str, Any]]
    alternatives: list[Any] | None
    reason: str
    #: applied | released-unchanged | failed | observe | waiting | replanned | restored; an
    #: administrator's GPU action (policy `admin`): quarantined | quarantine-released
    outcome: str
    decided_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    applied_at: datetime | None = None
    user: str | None = None
    account: str | None = None
    submitted_at: datetime | None = None

    # One constructor per outcome, each from the job itself, so every record carries the job's
    # user, account and submit time (`pal report fairness` counts by them).
    @classmethod
    def _of(cls, job: SlurmJob, outcome: str, *, policy: str, job_class: str | None, reason: str,
            decided_at: datetime, applied_at: datetime | None = None, version: int | None = None,
            gpus: list[dict[str, Any]] | None = None, alternatives: list[Any] | None = None) -> Record:
        return cls(job_id=job.job_id, policy=policy, job_class=job_class, version=version, gpus=gpus or [],
                   alternatives=alternatives, reason=reason, outcome=outcome, decided_at=decided_at,
                   applied_at=applied_at, user=job.user or None, account=job.account or None,
                   submitted_at=datetime.fromtimestamp(job.submit_time, UTC) if job.submit_time else None)

    @classmethod
    def applied(cls, job: SlurmJob, *, policy: str, job_class: str, version: int | None,
                gpus: list[dict[str, Any]], alternatives: list[Any], reason: str, at: datetime) -> Record:
        """A placement decided and about to be written (`applied_at` is set once Slurm shows it)."""
        return cls._of(job, "applied", policy=policy, job_class=job_class, version=version, gpus=gpus,
                       alternatives=alternatives, reason=reason, decided_at=at)

    @classmethod
    def released(cls, job: SlurmJob, *, policy: str, job_class: str, reason: str, at: datetime) -> Record:
        """A held job released as its user submitted it."""
        return cls._of(job, "released-unchanged", policy=policy, job_class=job_class, reason=reason,
                       decided_at=at, applied_at=at)

    @classmethod
    def restored(cls, job: SlurmJob, *, policy: str, job_class: str, reason: str, at: datetime) -> Record:
        """A placed job that could not start, given its request back and released."""
        return cls._of(job, "restored", policy=policy, job_class=job_class, reason=reason, decided_at=at,
                       applied_at=at)

    @classmethod
    def replanned(cls, job: SlurmJob, *, policy: str, job_class: str, reason: str, at: datetime) -> Record:
        """A placed job that did not start, held again to be placed anew."""
        return cls._of(job, "replanned", policy=policy, job_class=job_class, reason=reason, decided_at=at)

    @classmethod
    def waiting(cls, job: SlurmJob, *, policy: str, job_class: str, gpus: list[dict[str, Any]], reason: str,
                at: datetime) -> Record:
        """A held job kept waiting on purpose for the GPUs in `gpus`."""
        return cls._of(job, "waiting", policy=policy, job_class=job_class, gpus=gpus, reason=reason, decided_at=at)

    @classmethod
    def observed(cls, job: SlurmJob, *, policy: str, job_class: str, version: int | None,
                 gpus: list[dict[str, Any]], reason: str, at: datetime) -> Record:
        """Observe mode: where the job would have been placed (nothing written)."""
        return cls._of(job, "observe", policy=policy, job_class=job_class, version=version, gpus=gpus,
                       reason=reason, decided_at=at)

    @classmethod
    def gpu_action(cls, job_id: str, outcome: str, *, gpu: dict[str, Any], reason: str, at: datetime,
                   user: str) -> Record:
        """An administrator's action on one GPU slot, not a placement (`pal gpus quarantine
        --apply`: outcome `quarantined`; `pal gpus release --apply`: `quarantine-released`):
        the holder job it went through, the slot, the reason, who."""
        if outcome not in GPU_ACTIONS:
            raise ValueError(f"not a GPU action outcome: {outcome!r}")
        return cls(job_id=job_id, policy="admin", job_class=None, version=None, gpus=[gpu], alternatives=None,
                   reason=reason, outcome=outcome, decided_at=at, applied_at=at, user=user or None)

    def confirmed(self, at: datetime) -> Record:
        """This placement, read back from Slurm as written."""
        return replace(self, applied_at=at)

    def failed(self, reason: str | None = None) -> Record:
        """This placement, not taken (`reason` replaces the record's when given)."""
        return replace(self, outcome="failed", reason=self.reason if reason is None else reason)


@dataclass(frozen=True)
class Mark:
    """A placed job started or ended: set on its applied record(s) where not set yet."""

    job_id: str
    column: str  # started_at | ended_at
    at: datetime


class AuditSink:
    """The placement records and start/end marks waiting for the database. `add` and `mark`
    come from the cycle; `flush` may run on the daemon's database thread at the same time
    (pal_slurm.placer.db_worker): it takes what is pending under the lock, writes it without
    the lock, and on failure puts it back in front of what came meanwhile."""

    def __init__(self, engine_factory: Callable[[], Engine] | None, max_pending: int = 10000) -> None:
        self._engine_factory = engine_factory
        self.max_pending = max_pending
        self.pending: deque[Record] = deque()
        self.marks: deque[Mark] = deque()
        self.dropped = 0
        self.last_error: str | None = None
        self._lock = threading.Lock()

    def add(self, record: Record) -> None:
        with self._lock:
            self.pending.append(record)
            self._trim()

    def mark(self, job_id: str, column: str, at: datetime) -> None:
        """Record that a placed job started (`started_at`) or ended (`ended_at`)."""
        if column not in ("started_at", "ended_at"):
            raise ValueError(f"not a mark column: {column!r}")
        with self._lock:
            self.marks.append(Mark(job_id, column, at))
            self._trim()

    def _trim(self) -> None:
        for queue in (self.pending, self.marks):
            while len(queue) > self.max_pending:
                queue.popleft()
                self.dropped += 1

    @property
    def waiting(self) -> bool:
        return bool(self.pending or self.marks)

    def flush(self, *, raise_errors: bool = False) -> int:
        """Write what is pending; on failure keep it for the next flush (and raise it with
        `raise_errors`, so the database thread backs off). Returns rows written."""
        if self._engine_factory is None:
            return 0
        with self._lock:
            if not self.pending and not self.marks:
                return 0
            batch, marks = list(self.pending), list(self.marks)
            self.pending.clear()
            self.marks.clear()
        try:
            with session_scope(self._engine_factory()) as session:
                # one bulk INSERT: a busy cycle records hundreds of decisions
                if batch:
                    session.execute(insert(Placement), [_row(r) for r in batch])
                for m in marks:
                    col = getattr(Placement, m.column)
                    session.execute(update(Placement).where(Placement.slurm_job_id == m.job_id,
                                                            Placement.outcome == "applied", col.is_(None))
                                    .values({m.column: m.at}))
        except Exception as exc:  # noqa: BLE001 - the database being down must not stop placement
            with self._lock:
                self.pending.extendleft(reversed(batch))
                self.marks.extendleft(reversed(marks))
                self._trim()
            self.last_error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
            log.warning("audit: %d placement record(s) kept in memory (%s)", len(batch) + len(marks),
                        self.last_error)
            if raise_errors:
                raise
            return 0
        self.last_error = None
        return len(batch)


def _row(r: Record) -> dict[str, Any]:
    """A record as its placements row."""
    return {"slurm_job_id": r.job_id, "policy": r.policy, "job_class": r.job_class,
            "classification_version": r.version, "gpus": r.gpus, "alternatives": r.alternatives,
            "reason": r.reason[:4000], "outcome": r.outcome, "decided_at": r.decided_at,
            "applied_at": r.applied_at, "user": (r.user or None) and r.user[:128],
            "account": (r.account or None) and r.account[:128], "submitted_at": r.submitted_at}


def record_now(engine: Engine, record: Record) -> None:
    """Write one record at once (a command's, not the daemon's: nothing waits in memory after
    the command ends); the database's error is raised."""
    with session_scope(engine) as session:
        session.execute(insert(Placement), [_row(record)])


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


def placed_jobs(engine: Engine, since: datetime | None = None) -> list[PlacedJob]:
    """The placement records fairness counts: each job's last applied or released-unchanged
    decision since `since` (by decision time)."""
    with session_scope(engine) as session:
        stmt = (select(Placement).where(Placement.outcome.in_(("applied", "released-unchanged")))
                .order_by(Placement.decided_at, Placement.id))
        if since is not None:
            stmt = stmt.where(Placement.decided_at >= since)
        last: dict[str, Placement] = {}
        for p in session.scalars(stmt):
            last[p.slurm_job_id] = p
        return [PlacedJob(job_id=p.slurm_job_id, user=p.user or "-", account=p.account or "-", outcome=p.outcome,
                          slowdowns=tuple(g.get("slowdown") for g in (p.gpus or [])) if p.outcome == "applied" else (),
                          submitted_at=p.submitted_at, released_at=p.applied_at, started_at=p.started_at,
                          ended_at=p.ended_at) for p in last.values()]


def observed_jobs(engine: Engine, since: datetime | None = None) -> list[PlacedJob]:
    """Observe mode's jobs for fairness: each finished job the ledger accounted in observe mode
    (ended since `since`), with the GPUs Slurm gave it and their factors for its class. The
    placer held none of them, so they add no wait."""
    with session_scope(engine) as session:
        stmt = select(JobAccounting).where(JobAccounting.mode == "observe").order_by(JobAccounting.id)
        if since is not None:
            stmt = stmt.where(JobAccounting.ended_at >= since)
        return [PlacedJob(job_id=a.slurm_job_id, user=a.user or "-", account=a.account or "-", outcome="observed",
                          slowdowns=tuple(g.get("slowdown") for g in (a.gpus or [])), submitted_at=None,
                          released_at=None, started_at=a.started_at, ended_at=a.ended_at)
                for a in session.scalars(stmt)]
