"""Storing classification runs and reading them back for reports and placement.

A run is never changed after it is written; each `pal classify` adds a new version,
so any placement can be explained with the classes it used.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, aliased

from pal_slurm.db.models import (
    Benchmark,
    ClassificationBin,
    ClassificationResult,
    ClassificationRun,
    Gpu,
    GpuClass,
    JobClass,
    Node,
    ProfileRun,
)
from pal_slurm.classification.model import Bin, GpuOutcome
from pal_slurm.classification.classify_fleet import ClassAssignment, GroupClassification, PreviousSlowdowns


def sync_job_classes(session: Session, class_benchmarks: Mapping[str, tuple[str, str]]) -> None:
    """Make the job_classes table match the configuration (name -> (benchmark, description)).

    A class whose benchmark has no runs yet keeps benchmark_id NULL until it has.
    """
    benches = {b.name: b.id for b in session.scalars(select(Benchmark))}
    existing = {jc.name: jc for jc in session.scalars(select(JobClass))}
    for name, (bench, description) in class_benchmarks.items():
        jc = existing.get(name) or JobClass(name=name)
        jc.benchmark_id = benches.get(bench)
        jc.description = description
        session.add(jc)
    session.flush()


def gpus_by_model(session: Session) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for model, uuid in session.execute(select(Gpu.model, Gpu.uuid).order_by(Gpu.model, Gpu.uuid)):
        out.setdefault(model, []).append(uuid)
    return out


def latest_run(session: Session) -> ClassificationRun | None:
    return session.scalars(select(ClassificationRun).order_by(ClassificationRun.version.desc()).limit(1)).first()


def get_run(session: Session, version: int | None) -> ClassificationRun | None:
    if version is None:
        return latest_run(session)
    return session.scalars(select(ClassificationRun).where(ClassificationRun.version == version)).first()


def previous_slowdowns(session: Session, run: ClassificationRun) -> PreviousSlowdowns:
    """(model, benchmark) -> uuid -> slowdown, from a stored run, as hysteresis input."""
    out: dict[tuple[str, str], dict[str, float]] = {}
    stmt = (
        select(Gpu.model, Benchmark.name, Gpu.uuid, ClassificationResult.slowdown)
        .join(Gpu, Gpu.id == ClassificationResult.gpu_id)
        .join(Benchmark, Benchmark.id == ClassificationResult.benchmark_id)
        .where(ClassificationResult.run_id == run.id, ClassificationResult.slowdown.is_not(None))
    )
    for model, bench, uuid, sf in session.execute(stmt):
        out.setdefault((model, bench), {})[uuid] = sf
    return out


def save_classification(
    session: Session,
    classified: Sequence[GroupClassification],
    assignments: Sequence[ClassAssignment],
    *,
    params: dict[str, Any],
    previous_version: int | None,
    note: str = "",
) -> ClassificationRun:
    """Write one classification run with its bins, per-benchmark results and per-class rows."""
    version = (session.scalar(select(func.max(ClassificationRun.version))) or 0) + 1
    run = ClassificationRun(version=version, params=params, previous_version=previous_version, note=note)
    session.add(run)
    session.flush()
    bench_ids = {b.name: b.id for b in session.scalars(select(Benchmark))}
    gpu_ids = {u: i for u, i in session.execute(select(Gpu.uuid, Gpu.id))}
    bins, results = [], []
    for grp in classified:
        bid = bench_ids[grp.benchmark]
        for b in grp.result.bins:
            bins.append(
                {"run_id": run.id, "model": grp.model, "benchmark_id": bid, "bin": b.index, "centroid": b.centroid,
                 "slowdown": b.slowdown, "gpus": b.gpus, "outlier": b.outlier, "low": b.low, "high": b.high}
            )
        for g in grp.result.gpus:
            results.append(
                {"run_id": run.id, "gpu_id": gpu_ids[g.uuid], "benchmark_id": bid, "runs": g.runs,
                 "median_score": g.median_score, "perfvar": g.perfvar, "bin": g.bin, "slowdown": g.slowdown,
                 "outlier": g.outlier, "profiled": g.profiled}
            )
    classes = [
        {"run_id": run.id, "gpu_id": gpu_ids[a.uuid], "job_class": a.job_class,
         "benchmark_id": bench_ids.get(a.benchmark), "bin": a.bin, "slowdown": a.slowdown,
         "outlier": a.outlier, "profiled": a.profiled}
        for a in assignments
        if a.benchmark in bench_ids
    ]
    for table, rows in ((ClassificationBin, bins), (ClassificationResult, results), (GpuClass, classes)):
        if rows:
            session.execute(table.__table__.insert(), rows)
    return run


@dataclass(frozen=True, kw_only=True)
class ResultRow(GpuOutcome):
    """One GPU x benchmark of a stored run (its `GpuOutcome`; `fast` from `is_fast_outlier`),
    joined with what a report shows next to it."""

    node: str | None
    model: str
    benchmark: str
    median_sm_clock_mhz: float | None = None
    last_profiled: datetime | None = None
    run_spread: float | None = None  # interquartile range / median of the GPU's stored runs (with_clocks only)
    ecc_uncorrected: int | None = None  # from the node inventory, when it has run
    retired_pages: int | None = None
    #: the GPU's slot on its node (device minor number, else NVML index), None when no import
    #: placed it in one (a UUID measured without its slot); Slurm schedules GPUs at slots
    slot: int | None = None


@dataclass(frozen=True, kw_only=True)
class BinRow(Bin):
    """One bin of a stored run: its `Bin` (`fast` from `is_fast_outlier`), of a model and benchmark."""

    model: str
    benchmark: str


def is_fast_outlier(outlier: bool, slowdown: float | None) -> bool:
    """Whether a stored outlier is a *fast* one (a measurement to check), from its factor.

    No column is needed: classification gives a fast outlier the typical GPU's factor,
    exactly 1.0, while a slow outlier is slower than every regular GPU, so its factor
    (centroid over a mean of regular PerfVars) is above 1. Runs stored before fast
    outliers existed have only slow ones, which this reads correctly too.
    """
    return bool(outlier) and slowdown is not None and slowdown <= 1.0


@dataclass(frozen=True)
class StoredClassification:
    version: int
    created_at: datetime
    params: dict[str, Any]
    results: tuple[ResultRow, ...]
    bins: tuple[BinRow, ...]
    job_classes: dict[str, str]  # class name -> benchmark name


def load_classification(session: Session, run: ClassificationRun, *, with_clocks: bool = False) -> StoredClassification:
    node = aliased(Node)
    stmt = (
        select(
            Gpu.uuid, node.name, Gpu.model, Benchmark.name, ClassificationResult.runs,
            ClassificationResult.median_score, ClassificationResult.perfvar, ClassificationResult.bin,
            ClassificationResult.slowdown, ClassificationResult.outlier, ClassificationResult.profiled,
            Gpu.id, Benchmark.id, Gpu.ecc_uncorrected, Gpu.retired_pages, Gpu.minor_number, Gpu.nvml_index,
        )
        .join(Gpu, Gpu.id == ClassificationResult.gpu_id)
        .outerjoin(node, node.id == Gpu.node_id)
        .join(Benchmark, Benchmark.id == ClassificationResult.benchmark_id)
        .where(ClassificationResult.run_id == run.id)
        .order_by(Gpu.model, Benchmark.name, Gpu.uuid)
    )
    extra: dict[tuple[int, int], tuple[float | None, datetime | None, float | None]] = {}
    if with_clocks:
        extra = _clock_and_last(session, _run_ratio(run))
    results = []
    for (uuid, nname, model, bench, runs, med, pv, b, sf, outl, prof, gid, bid, ecc, retired, minor,
         index) in session.execute(stmt):
        clock, last, spread = extra.get((gid, bid), (None, None, None))
        results.append(ResultRow(uuid, runs, med, pv, b, sf, bool(outl), bool(prof), is_fast_outlier(outl, sf),
                                 node=nname, model=model, benchmark=bench, median_sm_clock_mhz=clock,
                                 last_profiled=last, run_spread=spread, ecc_uncorrected=ecc, retired_pages=retired,
                                 slot=minor if minor is not None else index))
    bins = [
        BinRow(r.bin, r.centroid, r.slowdown, r.gpus, bool(r.outlier), r.low, r.high,
               is_fast_outlier(r.outlier, r.slowdown), model=m, benchmark=bn)
        for r, m, bn in session.execute(
            select(ClassificationBin, ClassificationBin.model, Benchmark.name)
            .join(Benchmark, Benchmark.id == ClassificationBin.benchmark_id)
            .where(ClassificationBin.run_id == run.id)
            .order_by(ClassificationBin.model, Benchmark.name, ClassificationBin.bin)
        )
    ]
    classes = {
        name: bench
        for name, bench in session.execute(
            select(GpuClass.job_class, Benchmark.name)
            .join(Benchmark, Benchmark.id == GpuClass.benchmark_id)
            .where(GpuClass.run_id == run.id)
            .distinct()
        )
    }
    configured = run.params.get("job_classes") if isinstance(run.params, dict) else None
    if isinstance(configured, dict):  # includes classes whose benchmark has no runs (all unprofiled)
        classes = {str(k): str(v) for k, v in configured.items()}
    return StoredClassification(run.version, run.created_at, dict(run.params), tuple(results), tuple(bins),
                                dict(sorted(classes.items())))


def _run_ratio(run: ClassificationRun) -> float:
    """The run_ratio this classification used (stored with its params); the default for a run
    saved before run_ratio existed."""
    from pal_slurm.classification.model import ClassifyParams

    value = run.params.get("run_ratio") if isinstance(run.params, dict) else None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return ClassifyParams().run_ratio


def _clock_and_last(session: Session, run_ratio: float,
                    ) -> dict[tuple[int, int], tuple[float | None, datetime | None, float | None]]:
    """Per GPU and benchmark: the median of the runs' SM clocks, the time of the last run and
    the runs' spread (interquartile range / median of the finite positive scores; None below 2
    runs), which the outlier actions use to tell a noisy measurement from a slow GPU. The IQR,
    not max - min: one bad run must not make a GPU "noisy", and it does not grow with the
    number of runs; and runs classification drops as broken (more than `run_ratio`, the one
    the classification used, off the GPU's own median) are left out, as there.

    The medians are computed here (portable across dialects) from one scan.
    """
    import math
    import statistics

    clocks: dict[tuple[int, int], list[float]] = {}
    scores: dict[tuple[int, int], list[float]] = {}
    last: dict[tuple[int, int], datetime] = {}
    stmt = select(ProfileRun.gpu_id, ProfileRun.benchmark_id, ProfileRun.sm_clock_mhz, ProfileRun.started_at,
                  ProfileRun.score).where(ProfileRun.quarantine.is_(None))  # suspect runs count for nothing
    for gid, bid, clk, ts, score in session.execute(stmt):
        key = (gid, bid)
        if clk is not None:
            clocks.setdefault(key, []).append(clk)
        if score is not None and math.isfinite(score) and score > 0:
            scores.setdefault(key, []).append(score)
        if key not in last or ts > last[key]:
            last[key] = ts

    from pal_slurm.classification.stats import robust_median

    def spread(values: list[float] | None) -> float | None:
        if not values or len(values) < 2:
            return None
        # without the runs classification drops as broken, as it does: one bad run is not noise
        _, kept = robust_median(sorted(values), run_ratio)
        if len(kept) < 2:
            return None
        q1, _, q3 = statistics.quantiles(kept, n=4, method="inclusive")
        return (q3 - q1) / statistics.median(kept)

    return {k: (statistics.median(clocks[k]) if k in clocks else None, last[k], spread(scores.get(k))) for k in last}
