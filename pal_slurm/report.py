"""The variability report: pure functions from a stored classification to plain data.

The JSON shape is a contract for scripts (docs/report-json.md); the table, CSV and
HTML renderers only format what `build_report` returns.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pal_slurm.classify import percentile_summary
from pal_slurm.db.classification_store import BinRow, ResultRow, StoredClassification

REPORT_FORMAT = "pal-report/1"
#: what to do about a suspiciously fast outlier (its factor is already the typical GPU's)
FAST_OUTLIER_ACTION = "fast: check the measurement (re-profile it; placement treats it as a typical GPU)"


def _group_item(model: str, benchmark: str, rows: Sequence[ResultRow], bins: Sequence[BinRow],
                outlier_action: str) -> dict[str, Any]:
    profiled = [r for r in rows if r.profiled and r.perfvar is not None]
    outliers = sorted((r for r in profiled if r.outlier), key=lambda r: (-(r.perfvar or 0), r.uuid))
    return {
        "model": model,
        "benchmark": benchmark,
        "gpus": len(profiled),
        "unprofiled": len(rows) - len(profiled),
        "perfvar": percentile_summary([r.perfvar for r in profiled]) if profiled else None,
        "bins": [
            {"bin": b.bin, "slowdown": b.slowdown, "gpus": b.gpus, "outlier": b.outlier, "fast": b.fast,
             "centroid": b.centroid, "low": b.low, "high": b.high}
            for b in bins
        ],
        "outliers": [r.uuid for r in outliers],
        "outlier_details": [
            {"uuid": r.uuid, "node": r.node, "perfvar": r.perfvar, "slowdown": r.slowdown, "fast": r.fast,
             "recommendation": FAST_OUTLIER_ACTION if r.fast else outlier_action}
            for r in outliers
        ],
    }


def build_report(stored: StoredClassification, *, outlier_action: str) -> dict[str, Any]:
    """Per model x benchmark and per model x job class: counts, PerfVar spread, bins, outliers."""
    rows: dict[tuple[str, str], list[ResultRow]] = {}
    for r in stored.results:
        rows.setdefault((r.model, r.benchmark), []).append(r)
    bins: dict[tuple[str, str], list[BinRow]] = {}
    for b in stored.bins:
        bins.setdefault((b.model, b.benchmark), []).append(b)
    benchmarks = [
        _group_item(model, bench, grp, bins.get((model, bench), []), outlier_action)
        for (model, bench), grp in sorted(rows.items())
    ]
    by_key = {(i["model"], i["benchmark"]): i for i in benchmarks}
    models = sorted({m for m, _ in rows})
    job_classes = []
    for model in models:
        for job_class, bench in stored.job_classes.items():
            item = by_key.get((model, bench))
            if item is not None:
                job_classes.append({"job_class": job_class, **item})
    return {
        "format": REPORT_FORMAT,
        "classification": {
            "version": stored.version,
            "created_at": stored.created_at.isoformat(),
            "params": stored.params,
        },
        "benchmarks": benchmarks,
        "job_classes": job_classes,
    }


def gpu_rows(stored: StoredClassification) -> list[dict[str, Any]]:
    """One row per GPU: node, model and, per job class, bin and slowdown; the last profile time."""
    per_gpu: dict[str, dict[str, Any]] = {}
    by_bench: dict[tuple[str, str], ResultRow] = {(r.uuid, r.benchmark): r for r in stored.results}
    for r in stored.results:
        row = per_gpu.setdefault(r.uuid, {"uuid": r.uuid, "node": r.node, "model": r.model, "classes": {},
                                          "outlier": False, "last_profiled": None})
        if r.last_profiled is not None:
            prev = row["last_profiled"]
            row["last_profiled"] = r.last_profiled if prev is None or r.last_profiled > prev else prev
    for uuid, row in per_gpu.items():
        for job_class, bench in stored.job_classes.items():
            r = by_bench.get((uuid, bench))
            if r is None or not r.profiled:
                row["classes"][job_class] = {"bin": None, "slowdown": None, "outlier": False, "perfvar": None}
            else:
                row["classes"][job_class] = {"bin": r.bin, "slowdown": r.slowdown, "outlier": r.outlier,
                                             "perfvar": r.perfvar}
                row["outlier"] = row["outlier"] or r.outlier
        if row["last_profiled"] is not None:
            row["last_profiled"] = row["last_profiled"].isoformat()
    return sorted(per_gpu.values(), key=lambda x: (x["model"], x["node"] or "", x["uuid"]))
