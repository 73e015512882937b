"""The classification use case: every stored run classified into a new versioned classification
(docs/classification.md), with the parameters from the configuration.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine

from pal_slurm.config import PalConfig
from pal_slurm.db import classification_store as cstore
from pal_slurm.db.engine import session_scope
from pal_slurm.db.measurement_store import load_group_runs
from pal_slurm.db.migrate import require_current
from pal_slurm.errors import InputError, PalError

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from pal_slurm.classification.classify_fleet import GroupClassification, GroupRuns
    from pal_slurm.classification.model import ClassifyParams

log = logging.getLogger(__name__)

def classify_params(cfg: PalConfig, *, hysteresis: float | None = None, min_runs: int | None = None,
                    method: str | None = None) -> ClassifyParams:
    from pal_slurm.classification.model import ClassifyParams

    c = cfg.classification
    try:
        return ClassifyParams(
            min_runs=c.min_runs if min_runs is None else min_runs,
            max_bins=c.max_bins,
            outlier_z=c.outlier_z,
            outlier_min_excess=c.outlier_min_excess,
            hysteresis=c.hysteresis if hysteresis is None else hysteresis,
            min_bin_gap=c.min_bin_gap,
            method=c.method if method is None else method,
            run_ratio=c.run_ratio,
        )
    except ValueError as exc:
        raise InputError(str(exc)) from exc


@dataclass(frozen=True)
class ClassCoverage:
    """How many GPUs one job class can be placed by: those classified on its benchmark."""

    job_class: str
    benchmark: str
    classified: int
    gpus: int

    def as_dict(self) -> dict[str, Any]:
        return {"job_class": self.job_class, "benchmark": self.benchmark, "classified": self.classified,
                "gpus": self.gpus}


@dataclass(frozen=True)
class ClassifySummary:
    version: int
    previous_version: int | None
    groups: list[dict[str, Any]]
    coverage: list[ClassCoverage]
    partial: bool  # stored with --allow-partial although a class got no GPU


def class_coverage(assignments: Sequence[Any]) -> list[ClassCoverage]:
    """Per job class, the GPUs it has a slowdown factor on, out of all it was assigned."""
    seen: dict[str, tuple[str, int, int]] = {}
    for a in assignments:
        bench, done, total = seen.get(a.job_class, (a.benchmark, 0, 0))
        seen[a.job_class] = (bench, done + (1 if a.profiled else 0), total + 1)
    return [ClassCoverage(c, b, done, total) for c, (b, done, total) in sorted(seen.items())]


def _measured(groups: Sequence[Any], classified: Sequence[Any], min_runs: int) -> str:
    """'gemm-fp16 (64 GPUs, 64 with >= 3 runs), stream (...)': what the database holds."""
    done = {(c.model, c.benchmark): sum(1 for g in c.result.gpus if g.profiled) for c in classified}
    per_bench: dict[str, list[int]] = {}
    for g in groups:
        acc = per_bench.setdefault(g.benchmark, [0, 0])
        acc[0] += len(g.runs)
        acc[1] += done.get((g.model, g.benchmark), 0)
    return ", ".join(f"{b} ({n} GPUs, {k} with >= {min_runs} runs)" for b, (n, k) in sorted(per_bench.items()))


def refuse_empty_classes(coverage: Sequence[ClassCoverage], measured: str, *, allow_partial: bool) -> bool:
    """Nothing succeeds on nothing: a classification in which a job class gets no GPU would let
    the placer place that class by nothing, in silence. Raises PalError naming the classes, what
    was measured and the fix; with `allow_partial`, returns True (the caller says it stored it)."""
    empty = [c for c in coverage if c.classified == 0]
    if not empty:
        return False
    if allow_partial:
        return True
    names = "; ".join(f"class {c.job_class} reads {c.benchmark!r}" for c in empty)
    what = "no GPU is classified" if all(c.classified == 0 for c in coverage) else \
        f"job class{'es' if len(empty) > 1 else ''} {', '.join(c.job_class for c in empty)} would get no GPU"
    raise PalError(f"nothing stored: {what} ({names}; measured: {measured or 'nothing'}): profile the GPUs with "
                   "the missing benchmarks (`pal profile run --benchmarks NAME` on the GPU nodes, or `pal profile "
                   "submit`), lower --min-runs, or point [job_classes] at measured benchmarks; "
                   "`pal classify --allow-partial` stores it anyway")


def run_classification(engine: Engine, cfg: PalConfig, *, hysteresis: float | None = None,
                       min_runs: int | None = None, models: Sequence[str] | None = None,
                       note: str = "", method: str | None = None, allow_partial: bool = False) -> ClassifySummary:
    """Classify every (model, benchmark) from all stored runs and store a new versioned run.

    Refused (PalError, nothing stored) when a job class would get no GPU, unless `allow_partial`."""
    from pal_slurm.classification.classify_fleet import assign_job_classes, classify_fleet

    require_current(engine)
    params = classify_params(cfg, hysteresis=hysteresis, min_runs=min_runs, method=method)
    class_benchmarks = {name: jc.benchmark for name, jc in cfg.job_classes.items()}
    with session_scope(engine) as session:
        groups = _stored_runs(session, models)
        prev_run = cstore.latest_run(session)
        previous = cstore.previous_slowdowns(session, prev_run) if prev_run and params.hysteresis > 0 else None
        classified = classify_fleet(groups, params, previous)
        all_gpus = cstore.gpus_by_model(session)
        if models:
            all_gpus = {m: g for m, g in all_gpus.items() if m in models}
        assignments = assign_job_classes(classified, class_benchmarks, all_gpus)
        coverage = class_coverage(assignments)
        partial = refuse_empty_classes(coverage, _measured(groups, classified, params.min_runs),
                                       allow_partial=allow_partial)
        cstore.sync_job_classes(session, {n: (jc.benchmark, jc.description) for n, jc in cfg.job_classes.items()})
        run = cstore.save_classification(
            session, classified, assignments,
            params={**params.as_dict(), "job_classes": class_benchmarks, "models": list(models or [])},
            previous_version=prev_run.version if prev_run else None, note=note,
        )
        summary = ClassifySummary(
            version=run.version,
            previous_version=prev_run.version if prev_run else None,
            groups=[_group_summary(c) for c in classified],
            coverage=coverage,
            partial=partial,
        )
    missing = sorted(set(class_benchmarks.values()) - {c.benchmark for c in classified})
    for bench in missing:
        log.warning("no runs of benchmark %r: job classes measured by it are unprofiled", bench)
    return summary


def _stored_runs(session: Session, models: Sequence[str] | None) -> list[GroupRuns]:
    """Every stored run grouped by (model, benchmark), of `models` only when given; refused (and
    nothing classified) when there is none, or when a model named has none: that model would be
    classified as nothing, in silence."""
    groups = load_group_runs(session, models=models)
    if models:
        missing = sorted(set(models) - {g.model for g in groups})
        if missing:
            from sqlalchemy import select

            from pal_slurm.db.models import Gpu, ProfileRun

            have = sorted(set(session.scalars(select(Gpu.model).join(ProfileRun, ProfileRun.gpu_id == Gpu.id))))
            raise InputError(f"no profile runs of model {', '.join(map(repr, missing))}; models with runs: "
                             f"{', '.join(have) or 'none (import some with `pal profile import`)'}")
    if not groups:
        raise PalError("no profile runs in the database: import some with `pal profile import` first")
    return groups


def _group_summary(c: GroupClassification) -> dict[str, Any]:
    """One (model, benchmark) line of the summary `pal classify` prints."""
    return {"model": c.model, "benchmark": c.benchmark, "gpus": sum(1 for g in c.result.gpus if g.profiled),
            "unprofiled": sum(1 for g in c.result.gpus if not g.profiled), "k": c.result.k_regular,
            # regular bins, as every report counts them; each outlier's own bin is an outlier
            "bins": sum(1 for b in c.result.bins if not b.outlier),
            "outliers": sum(1 for g in c.result.gpus if g.outlier),
            "fast_outliers": sum(1 for g in c.result.gpus if g.fast),
            "criterion": c.result.criterion}
