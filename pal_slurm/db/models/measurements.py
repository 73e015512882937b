"""The fleet and its measurements: nodes, GPUs (one row per physical GPU, identified by UUID),
benchmarks, the profile runs that score them and the benchmarks that produced no score.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    BigInteger,
    Boolean,
    Double,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
)
from sqlalchemy.orm import Mapped, mapped_column, relationship

from pal_slurm.db.models.base import Base, UtcDateTime, utcnow


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
