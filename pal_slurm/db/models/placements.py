"""The placer's ledger: each placement decision (`pal explain`) and each finished job's
variability tax and saving (`pal report savings`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Double,
    Integer,
    String,
    Text,
)
from sqlalchemy.orm import Mapped, mapped_column

from pal_slurm.db.models.base import Base, UtcDateTime, utcnow


class Placement(Base):
    """One placement decision of the placement daemon, for `pal explain` and audits."""

    __tablename__ = "placements"
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    slurm_job_id: Mapped[str] = mapped_column(String(64), index=True)
    policy: Mapped[str] = mapped_column(String(64))
    job_class: Mapped[str | None] = mapped_column(String(16))
    classification_version: Mapped[int | None] = mapped_column(Integer)
    gpus: Mapped[list[Any]] = mapped_column(JSON)
    alternatives: Mapped[list[Any] | None] = mapped_column(JSON)
    reason: Mapped[str] = mapped_column(Text)
    #: applied | released-unchanged | failed | observe | waiting | replanned | restored; an
    #: administrator's GPU action (policy `admin`, `pal gpus quarantine`): quarantined | quarantine-released
    outcome: Mapped[str] = mapped_column(String(32))
    decided_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    applied_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    # who and when (migration 0004): `pal report fairness` reads these
    user: Mapped[str | None] = mapped_column(String(128))
    account: Mapped[str | None] = mapped_column(String(128))
    submitted_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    started_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    ended_at: Mapped[datetime | None] = mapped_column(UtcDateTime)


class JobAccounting(Base):
    """One finished GPU job's variability tax and the other choice's saving (migration 0006):
    `pal report savings` reads these (pal_slurm.placer.ledger says how each is computed).
    `slowdown` NULL: the job is unaccounted (its GPUs or their factors were unknown)."""

    __tablename__ = "job_accounting"
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    slurm_job_id: Mapped[str] = mapped_column(String(64), index=True)
    #: observe | enforce: the placer's mode when the job ran
    mode: Mapped[str] = mapped_column(String(16))
    job_class: Mapped[str] = mapped_column(String(16))
    partition: Mapped[str] = mapped_column(String(128))
    account: Mapped[str] = mapped_column(String(128))
    user: Mapped[str] = mapped_column(String(128))
    #: [{"node", "minor", "slowdown"}] of the GPUs it ran on
    gpus: Mapped[list[Any]] = mapped_column(JSON)
    n_gpus: Mapped[int] = mapped_column(Integer)
    #: "node:minor,..." of the GPU(s) that set its pace (the slowest): the report's per-GPU loss
    #: reads this column, not the JSON (100,000 jobs in well under 2 s)
    slowest_gpus: Mapped[str] = mapped_column(String(1024))
    started_at: Mapped[datetime] = mapped_column(UtcDateTime)
    ended_at: Mapped[datetime] = mapped_column(UtcDateTime, index=True)
    runtime_s: Mapped[float] = mapped_column(Double)
    slowdown: Mapped[float | None] = mapped_column(Double)
    tax_gpu_h: Mapped[float | None] = mapped_column(Double)
    #: placer (observe: what pal-slurm would have chosen) | first-fit (enforce: what Slurm would have given)
    alternative: Mapped[str | None] = mapped_column(String(16))
    alternative_slowdown: Mapped[float | None] = mapped_column(Double)
    saved_gpu_h: Mapped[float | None] = mapped_column(Double)
    classification_version: Mapped[int | None] = mapped_column(Integer)
    #: the job's fingerprint (pal_slurm.jobs.fingerprint) and time limit (migration 0008): what
    #: passive speed (pal_slurm.classification.passive) compares runs of the same work by, and
    #: the limit beyond which a run time is impossible; NULL in rows written before 0008
    fingerprint: Mapped[str | None] = mapped_column(String(16))
    time_limit_s: Mapped[float | None] = mapped_column(Double)
