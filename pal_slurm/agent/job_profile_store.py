"""The agent's database side: write finished job profiles and GPU flags, read what it exports.

Writes are idempotent, because a retry after a lost commit must not count a job twice:
a job profile with the same (job id, node, start) is skipped, and a GPU already holding
an open flag of the same kind gets no second one. Reads fetch only this node's GPUs.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from pal_slurm.agent.aggregate import JobProfileRecord
from pal_slurm.db.models import (
    Benchmark,
    ClassificationRun,
    Gpu,
    GpuClass,
    GpuFlag,
    JobProfile,
    ProfileRun,
)

__all__ = ["ClassFact", "GpuFlagRecord", "NodeFacts", "ScoreFact", "load_node_facts", "write_items"]

EXPECTED_CLOCK_RUNS = 5  # newest profile runs per benchmark behind a GPU's expected clock


@dataclass(frozen=True, slots=True)
class GpuFlagRecord:
    """A GPU flagged for re-profiling (one gpu_flags row)."""

    gpu_uuid: str
    node: str
    kind: str
    expected_mhz: float | None
    observed_mhz: float | None
    detail: str
    flagged_at: datetime

    def to_dict(self) -> dict[str, object]:
        out = {f: getattr(self, f) for f in self.__slots__}  # type: ignore[attr-defined]
        out["flagged_at"] = self.flagged_at.timestamp()
        return out

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> GpuFlagRecord:
        data = dict(data)
        data["flagged_at"] = datetime.fromtimestamp(float(data["flagged_at"]), UTC)  # type: ignore[arg-type]
        return cls(**data)  # type: ignore[arg-type]


WriteItem = JobProfileRecord | GpuFlagRecord


@dataclass(frozen=True, slots=True)
class WriteResult:
    profiles: int = 0
    profiles_skipped: int = 0
    flags: int = 0
    flags_skipped: int = 0


def write_items(session: Session, items: Sequence[WriteItem]) -> WriteResult:
    """Insert the batch in the caller's transaction (all or nothing)."""
    profiles = flags = p_skip = f_skip = 0
    for item in items:
        if isinstance(item, JobProfileRecord):
            exists = session.scalar(select(JobProfile.id).where(
                JobProfile.slurm_job_id == item.slurm_job_id, JobProfile.node == item.node,
                JobProfile.started_at == item.started_at))
            if exists is not None:
                p_skip += 1
                continue
            session.add(JobProfile(
                slurm_job_id=item.slurm_job_id, node=item.node, user=item.user, gpu_uuids=list(item.gpu_uuids),
                gpus=len(item.gpu_uuids), started_at=item.started_at, ended_at=item.ended_at,
                duration_s=item.duration_s, samples=item.samples, gpu_util_mean=item.gpu_util_mean,
                gpu_util_p95=item.gpu_util_p95, sm_active_mean=item.sm_active_mean,
                mem_bw_util_mean=item.mem_bw_util_mean, power_w_mean=item.power_w_mean,
                sm_clock_mhz_mean=item.sm_clock_mhz_mean,
            ))
            profiles += 1
        else:
            open_flag = session.scalar(select(GpuFlag.id).where(
                GpuFlag.gpu_uuid == item.gpu_uuid, GpuFlag.kind == item.kind, GpuFlag.cleared_at.is_(None)))
            if open_flag is not None:
                f_skip += 1
                continue
            session.add(GpuFlag(gpu_uuid=item.gpu_uuid, node=item.node, kind=item.kind,
                                expected_mhz=item.expected_mhz, observed_mhz=item.observed_mhz,
                                detail=item.detail, flagged_at=item.flagged_at))
            flags += 1
        session.flush()
    return WriteResult(profiles, p_skip, flags, f_skip)


@dataclass(frozen=True, slots=True)
class ClassFact:
    job_class: str
    bin: int | None
    slowdown: float | None
    outlier: bool


@dataclass(frozen=True, slots=True)
class ScoreFact:
    benchmark: str
    score: float
    unit: str
    at: datetime


@dataclass(frozen=True)
class NodeFacts:
    """What the database says about this node's GPUs (by UUID), for metrics and drift checks."""

    classification_version: int | None = None
    classes: dict[str, tuple[ClassFact, ...]] = field(default_factory=dict)
    scores: dict[str, tuple[ScoreFact, ...]] = field(default_factory=dict)
    expected_clock: dict[str, float] = field(default_factory=dict)
    open_flags: frozenset[str] = frozenset()


def load_node_facts(session: Session, uuids: Sequence[str]) -> NodeFacts:
    """Classes from the latest classification run, last scores, expected clocks, open flags."""
    if not uuids:
        return NodeFacts()
    gpu_ids = dict(session.execute(select(Gpu.id, Gpu.uuid).where(Gpu.uuid.in_(list(uuids)))).all())
    run = session.scalars(select(ClassificationRun).order_by(ClassificationRun.version.desc()).limit(1)).first()
    classes: dict[str, list[ClassFact]] = {}
    if run is not None and gpu_ids:
        stmt = (select(GpuClass.gpu_id, GpuClass.job_class, GpuClass.bin, GpuClass.slowdown, GpuClass.outlier)
                .where(GpuClass.run_id == run.id, GpuClass.gpu_id.in_(list(gpu_ids)))
                .order_by(GpuClass.gpu_id, GpuClass.job_class))
        for gid, job_class, bin_, sf, outlier in session.execute(stmt):
            classes.setdefault(gpu_ids[gid], []).append(ClassFact(job_class, bin_, sf, bool(outlier)))
    scores: dict[str, list[ScoreFact]] = {}
    clocks: dict[tuple[str, str], list[float]] = {}
    if gpu_ids:
        stmt = (select(ProfileRun.gpu_id, Benchmark.name, ProfileRun.score, ProfileRun.unit, ProfileRun.started_at,
                       ProfileRun.sm_clock_mhz)
                .join(Benchmark, Benchmark.id == ProfileRun.benchmark_id)
                .where(ProfileRun.gpu_id.in_(list(gpu_ids)), ProfileRun.quarantine.is_(None))
                .order_by(ProfileRun.gpu_id, Benchmark.name, ProfileRun.started_at.desc()))
        for gid, bench, score, unit, at, clock in session.execute(stmt):
            uuid = gpu_ids[gid]
            mine = scores.setdefault(uuid, [])
            if not mine or mine[-1].benchmark != bench:
                mine.append(ScoreFact(bench, score, unit, at))
            runs = clocks.setdefault((uuid, bench), [])
            if clock is not None and len(runs) < EXPECTED_CLOCK_RUNS:
                runs.append(clock)
    expected: dict[str, float] = {}
    for (uuid, _bench), values in clocks.items():
        if values:
            med = statistics.median(values)
            expected[uuid] = min(expected.get(uuid, med), med)
    flagged = frozenset(session.scalars(select(GpuFlag.gpu_uuid).where(
        GpuFlag.gpu_uuid.in_(list(uuids)), GpuFlag.cleared_at.is_(None))))
    return NodeFacts(classification_version=None if run is None else run.version,
                     classes={k: tuple(v) for k, v in classes.items()},
                     scores={k: tuple(v) for k, v in scores.items()}, expected_clock=expected, open_flags=flagged)
