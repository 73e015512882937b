"""Use cases behind the CLI: each opens what it needs, does one job, returns plain data.

Click commands call these and render the result; daemons and tests call them directly.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from sqlalchemy import Engine

from pal_slurm.config import PalConfig
from pal_slurm.db import classification_store as cstore
from pal_slurm.db.engine import make_engine, session_scope
from pal_slurm.db.migrate import require_current
from pal_slurm.db.measurement_store import ImportResult, import_records, load_group_runs
from pal_slurm.errors import InputError, PalError
from pal_slurm.ingest.records import ProfileRecord

if TYPE_CHECKING:
    from pal_slurm.classify import ClassifyParams
    from pal_slurm.jobs.history_store import HistoryImport

log = logging.getLogger(__name__)

ImportFormat = Literal["pal-artifact", "jsonl"]


def open_engine(cfg: PalConfig, *, create: bool = True) -> Engine:
    """The configured database; create=False refuses a SQLite file that does not exist."""
    return make_engine(cfg.db_url, echo=cfg.database.echo, connect_timeout_s=cfg.database.connect_timeout_s,
                       create=create)


def read_profile_file(path: Path, fmt: ImportFormat, *, benchmark: str | None, model: str | None,
                      unit: str | None, notes: list[str] | None = None) -> list[ProfileRecord]:
    """Parse one file (no database): the artifact CSV needs --benchmark and --model.

    `notes` receives what the parser wants the user told (e.g. a device column it ignores)."""
    if fmt == "pal-artifact":
        from pal_slurm.ingest.artifact_csv import parse_file as parse_artifact_file

        if not benchmark or not model:
            raise InputError("--format pal-artifact needs --benchmark NAME and --model NAME (the CSV has neither)")
        return parse_artifact_file(path, benchmark=benchmark, model=model, unit=unit or "ms", notes=notes)
    if fmt == "jsonl":
        from pal_slurm.ingest.jsonl import parse_file as parse_jsonl_file

        if benchmark or model:
            raise InputError("--benchmark/--model are for --format pal-artifact; JSON-lines files carry both")
        return parse_jsonl_file(path)
    raise InputError(f"unknown format {fmt!r}")


@dataclass(frozen=True)
class FileImport:
    path: str
    result: ImportResult


def import_files(engine: Engine, paths: Sequence[Path], fmt: ImportFormat, *, benchmark: str | None = None,
                 model: str | None = None, unit: str | None = None, max_factor: float | None = None,
                 keep_suspect: bool = False) -> list[FileImport]:
    """Each file is parsed whole first, then written in its own transaction (all or nothing).

    A suspect score is left out (or quarantined with `keep_suspect`) and the import goes on;
    `max_factor` defaults to pal_slurm.ingest.validate.DEFAULT_MAX_FACTOR. What the user should
    hear about each file is in its result's `warnings` ("FILE:LINE: reason")."""
    from pal_slurm.ingest.validate import DEFAULT_MAX_FACTOR

    require_current(engine)
    done = []
    for path in paths:
        notes: list[str] = []
        records = read_profile_file(path, fmt, benchmark=benchmark, model=model, unit=unit, notes=notes)
        if not records:  # "0 runs" would read as an import that worked
            raise InputError("no runs in the file (it is empty, or only blank lines): nothing imported",
                             source=str(path))
        with session_scope(engine) as session:
            result = import_records(session, records, keep_suspect=keep_suspect,
                                    max_factor=DEFAULT_MAX_FACTOR if max_factor is None else max_factor)
        result.warnings[:0] = notes
        log.info("%s: %d runs read, %d added, %d already present", path, result.records, result.added,
                 result.already_present)
        done.append(FileImport(str(path), result))
    return done


def identity_summary(engine: Engine) -> dict[str, int]:
    """How the stored GPUs are identified (pal_slurm.db.measurement_store.IdentityCounts), for the import summary."""
    from pal_slurm.db.measurement_store import identity_counts

    with session_scope(engine) as session:
        return identity_counts(session).as_dict()


def import_records_now(engine: Engine, records: Sequence[ProfileRecord]) -> ImportResult:
    require_current(engine)
    with session_scope(engine) as session:
        return import_records(session, records)


def classify_params(cfg: PalConfig, *, hysteresis: float | None = None, min_runs: int | None = None,
                    method: str | None = None) -> ClassifyParams:
    from pal_slurm.classify import ClassifyParams

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
class ClassifySummary:
    version: int
    previous_version: int | None
    groups: list[dict[str, Any]]


def run_classification(engine: Engine, cfg: PalConfig, *, hysteresis: float | None = None,
                       min_runs: int | None = None, models: Sequence[str] | None = None,
                       note: str = "", method: str | None = None) -> ClassifySummary:
    """Classify every (model, benchmark) from all stored runs and store a new versioned run."""
    from pal_slurm.classify_fleet import assign_job_classes, classify_fleet

    require_current(engine)
    params = classify_params(cfg, hysteresis=hysteresis, min_runs=min_runs, method=method)
    class_benchmarks = {name: jc.benchmark for name, jc in cfg.job_classes.items()}
    with session_scope(engine) as session:
        groups = load_group_runs(session, models=models)
        if models:  # a model named that has no runs would be classified as nothing, in silence
            missing = sorted(set(models) - {g.model for g in groups})
            if missing:
                from sqlalchemy import select

                from pal_slurm.db.models import Gpu, ProfileRun

                have = sorted(set(session.scalars(select(Gpu.model).join(ProfileRun, ProfileRun.gpu_id == Gpu.id))))
                raise InputError(f"no profile runs of model {', '.join(map(repr, missing))}; models with runs: "
                                 f"{', '.join(have) or 'none (import some with `pal profile import`)'}")
        if not groups:
            raise PalError("no profile runs in the database: import some with `pal profile import` first")
        prev_run = cstore.latest_run(session)
        previous = cstore.previous_slowdowns(session, prev_run) if prev_run and params.hysteresis > 0 else None
        classified = classify_fleet(groups, params, previous)
        all_gpus = cstore.gpus_by_model(session)
        if models:
            all_gpus = {m: g for m, g in all_gpus.items() if m in models}
        assignments = assign_job_classes(classified, class_benchmarks, all_gpus)
        cstore.sync_job_classes(session, {n: (jc.benchmark, jc.description) for n, jc in cfg.job_classes.items()})
        run = cstore.save_classification(
            session, classified, assignments,
            params={**params.as_dict(), "job_classes": class_benchmarks, "models": list(models or [])},
            previous_version=prev_run.version if prev_run else None, note=note,
        )
        summary = ClassifySummary(
            version=run.version,
            previous_version=prev_run.version if prev_run else None,
            groups=[
                {"model": c.model, "benchmark": c.benchmark, "gpus": sum(1 for g in c.result.gpus if g.profiled),
                 "unprofiled": sum(1 for g in c.result.gpus if not g.profiled), "k": c.result.k_regular,
                 # regular bins, as every report counts them; each outlier's own bin is an outlier
                 "bins": sum(1 for b in c.result.bins if not b.outlier),
                 "outliers": sum(1 for g in c.result.gpus if g.outlier),
                 "fast_outliers": sum(1 for g in c.result.gpus if g.fast),
                 "criterion": c.result.criterion}
                for c in classified
            ],
        )
    missing = sorted(set(class_benchmarks.values()) - {c.benchmark for c in classified})
    for bench in missing:
        log.warning("no runs of benchmark %r: job classes measured by it are unprofiled", bench)
    return summary


def _stored(engine: Engine, version: int | None) -> cstore.StoredClassification:
    """A stored classification with its GPUs' clocks (every report reads them)."""
    require_current(engine)
    with session_scope(engine) as session:
        run = cstore.get_run(session, version)
        if run is None:
            if version is None:
                raise PalError("no classification yet: run `pal classify` first")
            raise PalError(f"classification version {version} does not exist")
        return cstore.load_classification(session, run, with_clocks=True)


def load_report(engine: Engine, cfg: PalConfig, version: int | None = None) -> dict[str, Any]:
    from pal_slurm.report import build_report

    return build_report(_stored(engine, version), policy=cfg.report.policy(), identity=identity_summary(engine))


def load_gpu_rows(engine: Engine, version: int | None = None, cfg: PalConfig | None = None) -> list[dict[str, Any]]:
    """One row per GPU; with `cfg`, each outlier GPU's graded action and reason too."""
    from datetime import UTC, datetime

    from pal_slurm.report import gpu_rows, grade_outliers

    stored = _stored(engine, version)
    actions = None if cfg is None else grade_outliers(stored, cfg.report.policy(), datetime.now(UTC))
    return gpu_rows(stored, actions)


def load_stored(engine: Engine, version: int | None = None) -> cstore.StoredClassification:
    """The stored classification (latest, or `version`), for views that read it whole (`pal gpus --explain`)."""
    return _stored(engine, version)


def fleet_names(engine: Engine) -> tuple[list[str], list[str]]:
    """(node names, GPU models) in the database, sorted: what a filter that matched nothing lists."""
    from sqlalchemy import select

    from pal_slurm.db.models import Gpu, Node

    require_current(engine)
    with session_scope(engine) as session:
        nodes = sorted(session.scalars(select(Node.name)))
        models = sorted(set(session.scalars(select(Gpu.model))))
    return nodes, models


def load_for_html(engine: Engine, cfg: PalConfig,
                  version: int | None = None) -> tuple[cstore.StoredClassification, dict[str, Any]]:
    """The stored classification (with clocks, for the plots) and the report built from it."""
    from pal_slurm.report import build_report

    stored = _stored(engine, version)
    report = build_report(stored, policy=cfg.report.policy(), identity=identity_summary(engine))
    tax = load_savings(engine, cfg, since="7d", by="partition")
    return stored, report if tax is None else {**report, "savings": tax}


def load_savings(engine: Engine, cfg: PalConfig, *, since: str = "7d", by: str | None = None,
                 top: int = 10) -> dict[str, Any] | None:
    """`pal report savings`' data for the jobs that ended in the last `since` (an age: 7d, 12h);
    None when no job was ever accounted (the HTML report then says so instead of plotting zeros)."""
    import re
    from datetime import UTC, datetime, timedelta

    from pal_slurm.db.accounting_store import load_cells
    from pal_slurm.savings import savings

    m = re.fullmatch(r"(\d+)([dhms])", since)
    if m is None:
        raise ValueError(f"since: an age like 7d, not {since!r}")
    unit = {"d": "days", "h": "hours", "m": "minutes", "s": "seconds"}[m.group(2)]
    cells, pace = load_cells(engine, datetime.now(UTC) - timedelta(**{unit: int(m.group(1))}), by)
    if not cells and not load_cells(engine, None, None)[0]:
        return None
    names, actions = gpu_context(engine, cfg) if pace and top else ({}, {})
    return savings(cells, pace, by=by, since=since, gpu_names=names, actions=actions, top=top)


def gpu_context(engine: Engine, cfg: PalConfig) -> tuple[dict[tuple[str, int], str], dict[str, dict[str, Any]]]:
    """(node, minor) -> UUID and UUID -> graded action from the latest classification, for
    naming the GPUs the savings report blames; empty when there is no classification."""
    from pal_slurm.db.engine import session_scope
    from pal_slurm.db.variability_store import load_variability

    try:
        with session_scope(engine) as session:
            stored = load_variability(session, list(cfg.job_classes))
        names = {(str(v.node), int(v.minor)): str(v.uuid) for v in stored.gpus
                 if v.node is not None and v.minor is not None and v.uuid is not None}
        data = load_report(engine, cfg)
    except PalError:
        return {}, {}
    return names, {a["uuid"]: {"action": a["action"], "reason": a["reason"]} for a in data["actions"]}


def import_history_file(engine: Engine, path: Path, source: str) -> HistoryImport:
    """Import one `sacct -P` export into the runtime history (pal_slurm.jobs.sacct_history
    reads it whole first; then one transaction). Returns the jobs' HistoryImport."""
    from pal_slurm.jobs.history_store import check_source, import_history
    from pal_slurm.jobs.sacct_history import read_history

    check_source(source)
    require_current(engine)
    try:
        text = Path(path).read_text(encoding="utf-8-sig")  # -sig: a BOM from spreadsheet tools
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read the export: {exc}", source=str(path)) from exc
    history = read_history(text.splitlines(keepends=True), source=str(path))
    with session_scope(engine) as session:
        result = import_history(session, history, source)
    log.info("%s: %d jobs, %d added, %d already present", path, result.jobs, result.added, result.already_present)
    return result
