"""A classification run and what it gives: the job classes and their benchmarks, each run's
parameters, bins, per-GPU results and the per-class factors the placement policies read.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    Double,
    ForeignKey,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column

from pal_slurm.db.models.base import Base, UtcDateTime, utcnow


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


class GpuPassiveSpeed(Base):
    """One GPU's slowdown for a job class as its finished jobs' run times give it (`pal gpus
    learn`, migration 0008): the passive estimate beside the benchmark factor, with its
    evidence and uncertainty. One row per physical GPU and class, replaced by each learn."""

    __tablename__ = "gpu_passive_speed"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    gpu_id: Mapped[int] = mapped_column(ForeignKey("gpus.id"), index=True)
    job_class: Mapped[str] = mapped_column(String(16))
    factor: Mapped[float] = mapped_column(Double)
    #: the uncertainty interval (pal_slurm.classification.passive says which)
    low: Mapped[float] = mapped_column(Double)
    high: Mapped[float] = mapped_column(Double)
    #: finished jobs that ran on it, and those whose pace it is taken to have set
    jobs: Mapped[int] = mapped_column(Integer)
    paced: Mapped[int] = mapped_column(Integer)
    gpu_hours: Mapped[float] = mapped_column(Double)
    computed_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)

    __table_args__ = (UniqueConstraint("gpu_id", "job_class"),)
