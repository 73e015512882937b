"""The report use cases: a stored classification loaded for `pal report`, `pal gpus`, the HTML
page and the savings report (docs/report-json.md), each returning plain data to render.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine

from pal_slurm.classification.actions import GpuAction
from pal_slurm.config import PalConfig
from pal_slurm.db import classification_store as cstore
from pal_slurm.db.engine import session_scope
from pal_slurm.db.migrate import require_current
from pal_slurm.errors import PalError
from pal_slurm.services.ingest import identity_summary

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
    from pal_slurm.report.data import build_report

    stored = _stored(engine, version)
    report = build_report(stored, policy=cfg.report.policy(), identity=identity_summary(engine))
    return {**report, "passive": _passive_part(engine, stored, cfg)}


def _passive_part(engine: Engine, stored: cstore.StoredClassification, cfg: PalConfig) -> dict[str, Any]:
    """The report's `passive`: each GPU's passive factors set beside the classification shown."""
    from pal_slurm.report.data import gpu_rows, passive_summary

    return passive_summary(with_passive(engine, gpu_rows(stored), cfg))


def load_actions(engine: Engine, cfg: PalConfig, version: int | None = None) -> list[GpuAction]:
    """The graded action of every outlier GPU (latest classification, or `version`), as objects:
    what `pal gpus drain` plans from and the savings report names GPUs by."""
    from datetime import UTC, datetime

    from pal_slurm.report.data import grade_outliers

    return list(grade_outliers(_stored(engine, version), cfg.report.policy(), datetime.now(UTC)).values())


def load_gpu_rows(engine: Engine, version: int | None = None, cfg: PalConfig | None = None) -> list[dict[str, Any]]:
    """One row per GPU; with `cfg`, each outlier GPU's graded action and reason too."""
    from datetime import UTC, datetime

    from pal_slurm.report.data import gpu_rows, grade_outliers

    stored = _stored(engine, version)
    actions = None if cfg is None else grade_outliers(stored, cfg.report.policy(), datetime.now(UTC))
    return with_passive(engine, gpu_rows(stored, actions), cfg)


def with_passive(engine: Engine, rows: list[dict[str, Any]], cfg: PalConfig | None = None) -> list[dict[str, Any]]:
    """Each GPU row with its passive estimates (`passive`: class -> factor, interval, evidence and
    `disagrees`: slower/faster than the benchmark beyond both uncertainties, or None) and its open
    flags (`flags`: kind -> detail; the agent's clock drift, passive fail-slow)."""
    from pal_slurm.classification.failslow import disagreement
    from pal_slurm.db.passive_store import load_passive, open_flags

    noise = cfg.classification.benchmark_noise if cfg is not None else 0.02
    with session_scope(engine) as session:
        passive, flags = load_passive(session), open_flags(session)
    for r in rows:
        mine = passive.get(r["uuid"], {})
        r["passive"] = {}
        for cls, p in sorted(mine.items()):
            bench = (r["classes"].get(cls) or {}).get("slowdown")
            r["passive"][cls] = {**p.as_dict(), "benchmark": bench,
                                 "disagrees": None if bench is None else
                                 disagreement(p, bench * (1 - noise), bench * (1 + noise))}
        r["flags"] = dict(sorted(flags.get(r["uuid"], {}).items()))
    return rows


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
    from pal_slurm.report.data import build_report

    stored = _stored(engine, version)
    report = build_report(stored, policy=cfg.report.policy(), identity=identity_summary(engine))
    report = {**report, "passive": _passive_part(engine, stored, cfg)}
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
        actions = load_actions(engine, cfg)
    except PalError:
        return {}, {}
    return names, {a.uuid: {"action": a.action, "reason": a.reason} for a in actions}
