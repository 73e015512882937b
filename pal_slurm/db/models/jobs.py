"""What is learned about jobs (pal agent, pal jobs; migration 0003): job profiles, identities,
learned sensitivity, the sacct history, the admins' class rules, and the agent's GPU flags.

Utilisation-like figures are percent (0-100), as NVML and DCGM report them.
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
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column

from pal_slurm.db.models.base import Base, UtcDateTime, utcnow


class JobProfile(Base):
    """What one Slurm job did on the GPUs of one node, written by `pal agent` when the job ends.

    Aggregated on the node (running sums, no per-sample rows), so a week-long job costs one
    row. (slurm_job_id, node, started_at) is unique so that a write retried after a lost
    commit does not count a job twice; job ids are reused after a controller reset, the
    start time tells those apart.
    """

    __tablename__ = "job_profiles"
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    slurm_job_id: Mapped[str] = mapped_column(String(64), index=True)
    node: Mapped[str] = mapped_column(String(255))
    user: Mapped[str | None] = mapped_column(String(128))
    gpu_uuids: Mapped[list[Any]] = mapped_column(JSON)
    gpus: Mapped[int] = mapped_column(Integer)
    started_at: Mapped[datetime] = mapped_column(UtcDateTime)
    ended_at: Mapped[datetime] = mapped_column(UtcDateTime)
    duration_s: Mapped[float] = mapped_column(Double)
    samples: Mapped[int] = mapped_column(Integer)
    gpu_util_mean: Mapped[float | None] = mapped_column(Double)
    gpu_util_p95: Mapped[float | None] = mapped_column(Double)
    sm_active_mean: Mapped[float | None] = mapped_column(Double)
    mem_bw_util_mean: Mapped[float | None] = mapped_column(Double)
    power_w_mean: Mapped[float | None] = mapped_column(Double)
    sm_clock_mhz_mean: Mapped[float | None] = mapped_column(Double)
    fingerprint: Mapped[str | None] = mapped_column(String(16), index=True)
    recorded_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)

    __table_args__ = (UniqueConstraint("slurm_job_id", "node", "started_at"),)


class JobIdentity(Base):
    """Who submitted a GPU job and what it runs, filled by the placement daemon for every GPU job.

    The fingerprint (pal_slurm.jobs.fingerprint) is what survives resubmission: the same
    user, job name and command give the same fingerprint under a new job id.
    """

    __tablename__ = "job_identities"
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    slurm_job_id: Mapped[str] = mapped_column(String(64), unique=True)
    user: Mapped[str] = mapped_column(String(128))
    name: Mapped[str] = mapped_column(String(255))
    command: Mapped[str] = mapped_column(Text)
    fingerprint: Mapped[str] = mapped_column(String(16), index=True)
    first_seen: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)


class JobSensitivity(Base):
    """The class learned for one job fingerprint (`pal jobs learn`) and the evidence behind it."""

    __tablename__ = "job_sensitivity"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    fingerprint: Mapped[str] = mapped_column(String(16), unique=True)
    user: Mapped[str] = mapped_column(String(128))
    name: Mapped[str] = mapped_column(String(255))
    job_class: Mapped[str] = mapped_column(String(16))
    compute_score: Mapped[float] = mapped_column(Double)
    jobs: Mapped[int] = mapped_column(Integer)
    samples: Mapped[int] = mapped_column(BigInteger)
    gpu_util_mean: Mapped[float | None] = mapped_column(Double)
    sm_active_mean: Mapped[float | None] = mapped_column(Double)
    mem_bw_util_mean: Mapped[float | None] = mapped_column(Double)
    power_w_mean: Mapped[float | None] = mapped_column(Double)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)


class JobHistory(Base):
    """One finished Slurm job from an `sacct -P` export (`pal jobs import-history`, migration
    0007): what the placer learns runtimes from by (user, job name) when no job profile knows
    the job's fingerprint (sacct has no command line). Only COMPLETED and TIMEOUT runs are
    learned from (pal_slurm.jobs.runtimes.LEARNED_STATES); the other ended states are kept.

    (source, slurm_job_id, started_at) is unique, so importing the same export again adds
    nothing; `source` is the cluster's name (or another label), as job ids are per cluster,
    and the start tells apart the ids a cluster reuses after its state is reset."""

    __tablename__ = "job_history"
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    source: Mapped[str] = mapped_column(String(128))
    slurm_job_id: Mapped[str] = mapped_column(String(64))
    user: Mapped[str] = mapped_column(String(128))
    name: Mapped[str] = mapped_column(String(255))
    started_at: Mapped[datetime] = mapped_column(UtcDateTime, index=True)
    elapsed_s: Mapped[float] = mapped_column(Double)
    #: sacct's state code (COMPLETED, TIMEOUT, FAILED, CANCELLED, ...)
    state: Mapped[str] = mapped_column(String(32))
    #: from AllocTRES; NULL when the export had no AllocTRES
    gpus: Mapped[int | None] = mapped_column(Integer)
    #: from NNodes or NodeList; NULL when the export had neither
    nodes: Mapped[int | None] = mapped_column(Integer)
    #: the NodeList, a Slurm hostlist (migration 0008): passive speed reads a job that took whole
    #: nodes; NULL when the export had none (or it was longer than 1024 characters)
    node_list: Mapped[str | None] = mapped_column(String(1024))
    imported_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)

    __table_args__ = (UniqueConstraint("source", "slurm_job_id", "started_at"),)


class ClassRule(Base):
    """An admin override: jobs matching every non-NULL field get `job_class` (exact string equality)."""

    __tablename__ = "class_rules"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user: Mapped[str | None] = mapped_column(String(128))
    name: Mapped[str | None] = mapped_column(String(255))
    account: Mapped[str | None] = mapped_column(String(128))
    partition: Mapped[str | None] = mapped_column(String(128))
    job_class: Mapped[str] = mapped_column(String(16))
    note: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)


class GpuFlag(Base):
    """A GPU the agent saw running below its class under load: a request to re-profile it.

    Open while cleared_at is NULL; the agent opens at most one open flag per (GPU, kind)
    and the profiler (or an admin) clears it after re-profiling.
    """

    __tablename__ = "gpu_flags"
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    gpu_uuid: Mapped[str] = mapped_column(String(128), index=True)
    node: Mapped[str] = mapped_column(String(255))
    kind: Mapped[str] = mapped_column(String(32))  # clock_drift
    expected_mhz: Mapped[float | None] = mapped_column(Double)
    observed_mhz: Mapped[float | None] = mapped_column(Double)
    detail: Mapped[str] = mapped_column(Text, default="")
    flagged_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    cleared_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
