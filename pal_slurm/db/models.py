"""The schema, as SQLAlchemy 2 declarative models.

Changes to these models ship only through an Alembic migration
(pal_slurm/db/migrations/versions); a test compares the two and fails on drift.
Identity of a GPU is its UUID: nodes and slots change, the UUID does not. A GPU that
a file names only by its slot has the uuid ``slot:<node>:<device>`` until its real UUID is
imported; `pal_slurm.db.measurement_store` then merges the two (docs/import-formats.md, "GPU identity").
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Double,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.dialects import mysql
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship
from sqlalchemy.types import TypeDecorator

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class UtcDateTime(TypeDecorator[datetime]):
    """Timestamps stored as naive UTC everywhere, returned timezone-aware.

    SQLite and MariaDB have no time zones; storing UTC and attaching it on read keeps
    the three dialects identical.
    """

    impl = DateTime
    cache_ok = True

    def load_dialect_impl(self, dialect: Any) -> Any:
        # MariaDB/MySQL DATETIME drops fractions of a second unless asked for them.
        if dialect.name in ("mysql", "mariadb"):
            return dialect.type_descriptor(mysql.DATETIME(fsp=6))
        return dialect.type_descriptor(DateTime())

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the database; use timezone-aware UTC")
        return value.astimezone(timezone.utc).replace(tzinfo=None)

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        return None if value is None else value.replace(tzinfo=timezone.utc)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class Node(Base):
    __tablename__ = "nodes"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(255), unique=True)
    first_seen: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    last_seen: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    gpus: Mapped[list[Gpu]] = relationship(back_populates="node")


class Gpu(Base):
    __tablename__ = "gpus"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    uuid: Mapped[str] = mapped_column(String(128), unique=True)
    node_id: Mapped[int | None] = mapped_column(ForeignKey("nodes.id"), index=True)
    nvml_index: Mapped[int | None] = mapped_column(Integer)
    minor_number: Mapped[int | None] = mapped_column(Integer)
    pci_bus_id: Mapped[str | None] = mapped_column(String(32))
    model: Mapped[str] = mapped_column(String(128), index=True)
    serial: Mapped[str | None] = mapped_column(String(64))
    memory_mib: Mapped[int | None] = mapped_column(Integer)
    first_seen: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    last_seen: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    state: Mapped[str] = mapped_column(String(16), default="present")  # present | missing
    # Inventory (pal profile inventory, migration 0002): what NVML said at inventoried_at.
    power_limit_w: Mapped[float | None] = mapped_column(Double)
    driver_version: Mapped[str | None] = mapped_column(String(32))
    cuda_version: Mapped[str | None] = mapped_column(String(32))
    vbios_version: Mapped[str | None] = mapped_column(String(64))
    ecc_corrected: Mapped[int | None] = mapped_column(BigInteger)
    ecc_uncorrected: Mapped[int | None] = mapped_column(BigInteger)
    retired_pages: Mapped[int | None] = mapped_column(Integer)
    inventoried_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    node: Mapped[Node | None] = relationship(back_populates="gpus")


class Benchmark(Base):
    __tablename__ = "benchmarks"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    unit: Mapped[str] = mapped_column(String(32))
    lower_is_better: Mapped[bool] = mapped_column(Boolean)
    description: Mapped[str] = mapped_column(Text, default="")


class ProfileRun(Base):
    __tablename__ = "profile_runs"
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    run_key: Mapped[str] = mapped_column(String(64), unique=True)
    gpu_id: Mapped[int] = mapped_column(ForeignKey("gpus.id"))
    benchmark_id: Mapped[int] = mapped_column(ForeignKey("benchmarks.id"))
    started_at: Mapped[datetime] = mapped_column(UtcDateTime)
    duration_s: Mapped[float | None] = mapped_column(Double)
    score: Mapped[float] = mapped_column(Double)
    unit: Mapped[str] = mapped_column(String(32))
    lower_is_better: Mapped[bool] = mapped_column(Boolean)
    repeats: Mapped[int | None] = mapped_column(Integer)
    spread: Mapped[float | None] = mapped_column(Double)
    sm_clock_mhz: Mapped[float | None] = mapped_column(Double)
    mem_clock_mhz: Mapped[float | None] = mapped_column(Double)
    power_w: Mapped[float | None] = mapped_column(Double)
    temperature_c: Mapped[float | None] = mapped_column(Double)
    throttle_reasons: Mapped[int | None] = mapped_column(BigInteger)
    driver_version: Mapped[str | None] = mapped_column(String(32))
    cuda_version: Mapped[str | None] = mapped_column(String(32))
    source: Mapped[str] = mapped_column(String(32))
    imported_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    # Migration 0005: why the score failed the import's plausibility check (NULL: it passed).
    # Such a run is kept for the record (`pal profile import --keep-suspect`); classification,
    # placement and reports never read it.
    quarantine: Mapped[str | None] = mapped_column(String(255))

    __table_args__ = (Index("ix_profile_runs_gpu_bench", "gpu_id", "benchmark_id"),)


class BenchmarkFailure(Base):
    """A benchmark that produced no score on a GPU (crashed, timed out, skipped, GPU busy).

    Kept apart from profile_runs so that every profile run has a score and classification
    never sees a failure; the failures are what an admin reads to see why a GPU is unprofiled.
    """

    __tablename__ = "benchmark_failures"
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    run_key: Mapped[str] = mapped_column(String(64), unique=True)
    gpu_id: Mapped[int] = mapped_column(ForeignKey("gpus.id"), index=True)
    benchmark: Mapped[str] = mapped_column(String(64))
    started_at: Mapped[datetime] = mapped_column(UtcDateTime)
    duration_s: Mapped[float | None] = mapped_column(Double)
    status: Mapped[str] = mapped_column(String(16))  # failed | timeout | skipped | busy
    error: Mapped[str] = mapped_column(Text)
    source: Mapped[str] = mapped_column(String(32))
    recorded_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)


class JobClass(Base):
    """A job class (A-D by default) and the benchmark that measures GPUs for it."""

    __tablename__ = "job_classes"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(16), unique=True)
    benchmark_id: Mapped[int | None] = mapped_column(ForeignKey("benchmarks.id"))
    description: Mapped[str] = mapped_column(Text, default="")


class ClassificationRun(Base):
    """One `pal classify`: versioned, with the parameters it used, never overwritten."""

    __tablename__ = "classification_runs"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    version: Mapped[int] = mapped_column(Integer, unique=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    params: Mapped[dict[str, Any]] = mapped_column(JSON)
    previous_version: Mapped[int | None] = mapped_column(Integer)
    note: Mapped[str] = mapped_column(Text, default="")


class ClassificationBin(Base):
    """A bin of one (model, benchmark) group in a classification run."""

    __tablename__ = "classification_bins"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("classification_runs.id", ondelete="CASCADE"))
    model: Mapped[str] = mapped_column(String(128))
    benchmark_id: Mapped[int] = mapped_column(ForeignKey("benchmarks.id"))
    bin: Mapped[int] = mapped_column(Integer)
    centroid: Mapped[float] = mapped_column(Double)
    slowdown: Mapped[float] = mapped_column(Double)
    gpus: Mapped[int] = mapped_column(Integer)
    outlier: Mapped[bool] = mapped_column(Boolean)
    low: Mapped[float] = mapped_column(Double)
    high: Mapped[float] = mapped_column(Double)

    __table_args__ = (UniqueConstraint("run_id", "model", "benchmark_id", "bin"),)


class ClassificationResult(Base):
    """Per GPU and benchmark: its median, PerfVar, bin and slowdown (or unprofiled)."""

    __tablename__ = "classification_results"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("classification_runs.id", ondelete="CASCADE"))
    gpu_id: Mapped[int] = mapped_column(ForeignKey("gpus.id"))
    benchmark_id: Mapped[int] = mapped_column(ForeignKey("benchmarks.id"))
    runs: Mapped[int] = mapped_column(Integer)
    median_score: Mapped[float | None] = mapped_column(Double)
    perfvar: Mapped[float | None] = mapped_column(Double)
    bin: Mapped[int | None] = mapped_column(Integer)
    slowdown: Mapped[float | None] = mapped_column(Double)
    outlier: Mapped[bool] = mapped_column(Boolean, default=False)
    profiled: Mapped[bool] = mapped_column(Boolean)

    __table_args__ = (UniqueConstraint("run_id", "gpu_id", "benchmark_id"),)


class GpuClass(Base):
    """Per GPU and job class: what the placement policies read (bin and slowdown factor)."""

    __tablename__ = "gpu_classes"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("classification_runs.id", ondelete="CASCADE"))
    gpu_id: Mapped[int] = mapped_column(ForeignKey("gpus.id"))
    job_class: Mapped[str] = mapped_column(String(16))
    benchmark_id: Mapped[int] = mapped_column(ForeignKey("benchmarks.id"))
    bin: Mapped[int | None] = mapped_column(Integer)
    slowdown: Mapped[float | None] = mapped_column(Double)
    outlier: Mapped[bool] = mapped_column(Boolean, default=False)
    profiled: Mapped[bool] = mapped_column(Boolean)

    __table_args__ = (UniqueConstraint("run_id", "gpu_id", "job_class"),)


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
    #: applied | released-unchanged | failed | observe | waiting | replanned | restored
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


# --- Job profiles and job sensitivity (pal agent, pal jobs; migration 0003) -------------------
# Utilisation-like figures are percent (0-100), as NVML and DCGM report them.


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
