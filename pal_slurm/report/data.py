"""The variability report: pure functions from a stored classification to plain data.

The JSON shape is a contract for scripts (docs/report-json.md); the table, CSV and
HTML renderers only format what `build_report` returns.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from pal_slurm.classification.actions import ACTION_ORDER, ActionPolicy, Finding, GpuAction, grade_gpu
from pal_slurm.classification.stats import percentile_summary
from pal_slurm.db.classification_store import BinRow, ResultRow, StoredClassification
from pal_slurm.numfmt import DIGITS, fmt_num

__all__ = ["DIGITS", "PERFVAR_MEANING", "REPORT_FORMAT", "SLOWDOWN_MEANING", "bins_text", "build_report",
           "explain_gpu", "fmt_num", "gpu_rows", "grade_outliers", "group_summary", "identity_text", "regular_bins",
           "resolve_gpu"]

REPORT_FORMAT = "pal-report/1"
def regular_bins(item: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The bins placement chooses between; each outlier GPU's own bin is counted as an outlier."""
    return [b for b in item.get("bins", []) if not b.get("outlier")]


def bins_text(item: Mapping[str, Any], sep: str = " ") -> str:
    """Regular bins as `slowdown x GPUs`, fastest first: the same text in every renderer."""
    return sep.join(f"{fmt_num(b['slowdown'])}x{b['gpus']}" for b in regular_bins(item)) or "-"


def group_summary(item: Mapping[str, Any]) -> str:
    """One line per model x benchmark, e.g. `bert: 1 bin (1.000x62), 2 outliers` (the demo's summary)."""
    n = len(regular_bins(item))
    k = len(item.get("outliers", []))
    return (f"{item['benchmark']}: {n} bin{'' if n == 1 else 's'} ({bins_text(item)}), "
            f"{k} outlier{'' if k == 1 else 's'}")


def _group_item(model: str, benchmark: str, rows: Sequence[ResultRow], bins: Sequence[BinRow],
                actions: Mapping[str, GpuAction]) -> dict[str, Any]:
    profiled = [r for r in rows if r.profiled and r.perfvar is not None]
    outliers = sorted((r for r in profiled if r.outlier), key=lambda r: (-(r.perfvar or 0), r.uuid))
    return {
        "model": model,
        "benchmark": benchmark,
        "gpus": len(profiled),
        "unprofiled": len(rows) - len(profiled),
        "perfvar": percentile_summary([r.perfvar for r in profiled]) if profiled else None,
        "bins": [
            {"bin": b.index, "slowdown": b.slowdown, "gpus": b.gpus, "outlier": b.outlier, "fast": b.fast,
             "centroid": b.centroid, "low": b.low, "high": b.high}
            for b in bins
        ],
        "regular_bins": sum(1 for b in bins if not b.outlier),
        "outliers": [r.uuid for r in outliers],
        "outlier_details": [
            {"uuid": r.uuid, "node": r.node, "perfvar": r.perfvar, "slowdown": r.slowdown, "fast": r.fast,
             "action": actions[r.uuid].action, "reason": actions[r.uuid].reason,
             "recommendation": actions[r.uuid].text}
            for r in outliers
        ],
    }


def grade_outliers(stored: StoredClassification, policy: ActionPolicy, now: datetime) -> dict[str, GpuAction]:
    """uuid -> the one graded action of every GPU that is an outlier on at least one benchmark."""
    findings: dict[str, list[Finding]] = {}
    first: dict[str, ResultRow] = {}
    measured: dict[str, set[str]] = {}  # GPU -> the benchmarks it has a factor on
    for r in stored.results:
        if r.profiled:
            measured.setdefault(r.uuid, set()).add(r.benchmark)
        if r.profiled and r.outlier:
            findings.setdefault(r.uuid, []).append(Finding(r.benchmark, r.perfvar, r.last_profiled, r.run_spread))
            first.setdefault(r.uuid, r)
    return {
        uuid: grade_gpu(uuid, first[uuid].node, first[uuid].model, found, job_classes=stored.job_classes,
                        policy=policy, now=now, measured=frozenset(measured.get(uuid, ())),
                        ecc_uncorrected=first[uuid].ecc_uncorrected,
                        retired_pages=first[uuid].retired_pages)
        for uuid, found in sorted(findings.items())
    }


def build_report(stored: StoredClassification, *, policy: ActionPolicy | None = None, now: datetime | None = None,
                 outlier_action: str | None = None, identity: Mapping[str, int] | None = None) -> dict[str, Any]:
    """Per model x benchmark and per model x job class: counts, PerfVar spread, bins, outliers,
    and one graded action per outlier GPU (`actions`, strongest first); with `identity`
    (db/gpu_identity.IdentityCounts), how many physical GPUs the rows stand for.

    `outlier_action` (config `[report] outlier_action`) replaces the policy's diagnostics text;
    `now` defaults to the current time (staleness of the last run).
    """
    policy = policy or ActionPolicy()
    if outlier_action is not None:
        policy = replace(policy, diagnostics=outlier_action)
    actions = grade_outliers(stored, policy, now or datetime.now(UTC))
    rows: dict[tuple[str, str], list[ResultRow]] = {}
    for r in stored.results:
        rows.setdefault((r.model, r.benchmark), []).append(r)
    bins: dict[tuple[str, str], list[BinRow]] = {}
    for b in stored.bins:
        bins.setdefault((b.model, b.benchmark), []).append(b)
    benchmarks = [
        _group_item(model, bench, grp, bins.get((model, bench), []), actions)
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
    ordered = sorted(actions.values(), key=lambda a: (ACTION_ORDER.index(a.action), a.node or "", a.uuid))
    return {
        "format": REPORT_FORMAT,
        "classification": {
            "version": stored.version,
            "created_at": stored.created_at.isoformat(),
            "params": stored.params,
        },
        "benchmarks": benchmarks,
        "job_classes": job_classes,
        "actions": [a.as_dict() for a in ordered],
        **({"identity": dict(identity)} if identity is not None else {}),
    }


def identity_text(ids: Mapping[str, int]) -> str:
    """The database's GPUs by how well they are identified (db/gpu_identity.IdentityCounts; docs/import-formats.md,
    "GPU identity"): what the import prints last and `pal report` prints first."""
    parts = [f"{ids['at_slot']} at a known slot" + (f" ({ids['slot_named']} known only by it)" if ids["slot_named"]
                                                     else "")]
    if ids["node_only"]:
        parts.append(f"{ids['node_only']} on a known node, slot unknown")
    if ids["unlocated"]:
        parts.append(f"{ids['unlocated']} with no node")
    line = (f"{ids['gpus']} GPU{'s' * (ids['gpus'] != 1)} on {ids['nodes']} "
            f"node{'s' * (ids['nodes'] != 1)}: {', '.join(parts)}")
    if ids["physical_min"] < ids["gpus"]:
        line += (f"; at least {ids['physical_min']} physical GPUs (a GPU whose slot is unknown may be one "
                 "known only by its slot)")
    return line


def gpu_rows(stored: StoredClassification, actions: Mapping[str, GpuAction] | None = None) -> list[dict[str, Any]]:
    """One row per GPU: node, slot (None: the GPU holds no known slot), model and, per job class,
    bin, slowdown factor and PerfVar; the last profile time; with `actions` (from
    `grade_outliers`), an outlier GPU's action and reason."""
    per_gpu: dict[str, dict[str, Any]] = {}
    by_bench: dict[tuple[str, str], ResultRow] = {(r.uuid, r.benchmark): r for r in stored.results}
    for r in stored.results:
        row = per_gpu.setdefault(r.uuid, {"uuid": r.uuid, "node": r.node, "slot": r.slot if r.node else None,
                                          "model": r.model, "classes": {}, "outlier": False, "last_profiled": None})
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
        if actions is not None:
            act = actions.get(uuid)
            row["action"] = act.action if act else None
            row["reason"] = act.reason if act else None
    return sorted(per_gpu.values(), key=lambda x: (x["model"], x["node"] or "", x["uuid"]))


#: The two scales, named once: every view that shows either says which it is.
PERFVAR_MEANING = ("PerfVar: measured, the GPU's median benchmark time over the median GPU's of its model "
                   "(> 1 = slower)")
SLOWDOWN_MEANING = ("slowdown factor: what placement ranks by, from the GPU's bin, anchored so that the bin "
                    "of the model's median GPU is 1.000")


def resolve_gpu(stored: StoredClassification, text: str) -> str:
    """The UUID a user named: the full UUID, its first hex digits as tables show them (with or
    without `GPU-`), or NODE:SLOT; InputError listing what would match otherwise."""
    from pal_slurm.errors import InputError

    uuids = sorted({r.uuid for r in stored.results})
    want = text.strip()
    if want in uuids:
        return want
    slots = {f"{r.node}:{r.slot}": r.uuid for r in stored.results if r.node and r.slot is not None}
    if want in slots:
        return slots[want]
    low = want.lower().removeprefix("gpu-")
    hits = [u for u in uuids if low and u.lower().removeprefix("gpu-").startswith(low)] if len(low) >= 4 else []
    if len(hits) == 1:
        return hits[0]
    if len(hits) > 1:
        raise InputError(f"GPU {want!r} is ambiguous: {', '.join(hits[:5])}{' ...' if len(hits) > 5 else ''} "
                         f"({len(hits)} match); give more of its UUID")
    import difflib

    close = difflib.get_close_matches(want, [*uuids, *slots], n=3, cutoff=0.6)
    raise InputError(f"no GPU {want!r} in classification version {stored.version}: give its UUID, the first "
                     f"8 hex digits tables show, or NODE:SLOT (e.g. {next(iter(slots), 'c001-001:0')})"
                     + (f"; close: {', '.join(close)}" if close else ""))


def explain_gpu(stored: StoredClassification, uuid: str) -> dict[str, Any]:
    """One GPU on both scales, per benchmark: its measured PerfVar, its bin, the bin's factor and its
    own slowdown factor, with the rule that turned the one into the other (docs/classification.md,
    steps 5 and 6), and the job classes each benchmark measures."""
    method = str(stored.params.get("method", "shrink")) if isinstance(stored.params, dict) else "shrink"
    rows = [r for r in stored.results if r.uuid == uuid]
    bins: dict[tuple[str, str], list[BinRow]] = {}
    for b in stored.bins:
        bins.setdefault((b.model, b.benchmark), []).append(b)
    classes_of: dict[str, list[str]] = {}
    for job_class, bench in stored.job_classes.items():
        classes_of.setdefault(bench, []).append(job_class)
    items = []
    for r in sorted(rows, key=lambda x: x.benchmark):
        group = bins.get((r.model, r.benchmark), [])
        regular = [b for b in group if not b.outlier and b.slowdown]
        anchor = regular[0].centroid / regular[0].slowdown if regular else None
        own = next((b for b in group if b.index == r.bin), None)
        item: dict[str, Any] = {
            "benchmark": r.benchmark, "job_classes": classes_of.get(r.benchmark, []), "runs": r.runs,
            "perfvar": r.perfvar, "bin": r.bin, "bin_slowdown": own.slowdown if own else None,
            "bin_centroid": own.centroid if own else None, "slowdown": r.slowdown, "outlier": r.outlier,
            "fast": r.fast, "anchor": anchor, "profiled": r.profiled,
        }
        item["rule"] = _rule(item, method)
        items.append(item)
    first = rows[0] if rows else None
    last = max((r.last_profiled for r in rows if r.last_profiled), default=None)
    return {"uuid": uuid, "node": first.node if first else None, "slot": first.slot if first else None,
            "model": first.model if first else None, "classification_version": stored.version, "method": method,
            "last_profiled": last.isoformat() if last else None, "benchmarks": items,
            "scales": {"perfvar": PERFVAR_MEANING, "slowdown": SLOWDOWN_MEANING}}


def _rule(item: Mapping[str, Any], method: str) -> str:
    """How this GPU's slowdown factor came from its PerfVar, with its numbers."""
    pv, sf, anchor = item["perfvar"], item["slowdown"], item["anchor"]
    if not item["profiled"] or pv is None or sf is None:
        return "unprofiled (too few valid runs): no PerfVar, no factor; placement takes the class's worst"
    a = "the anchor" if anchor is None else f"the anchor {fmt_num(anchor)}"
    if item["fast"]:
        return ("fast outlier (more than 10 % faster than its siblings: check the measurement): factor 1.000, the "
                "typical GPU's, whatever its PerfVar")
    if item["outlier"]:
        return f"slow outlier, a bin of its own: factor = PerfVar / {a} = {fmt_num(pv)} / {fmt_num(anchor)} = " \
               f"{fmt_num(sf)}" if anchor is not None else f"slow outlier: factor = PerfVar / {a}"
    if method == "shrink" and anchor is not None:
        theta = sf * anchor
        return (f"PerfVar {fmt_num(pv)} shrunk by its run noise toward its bin's centroid "
                f"{fmt_num(item['bin_centroid'])} = {fmt_num(theta)}; factor = that / {a} = {fmt_num(sf)}")
    return (f"its bin's factor (method {method}): bin centroid {fmt_num(item['bin_centroid'])} / {a} = "
            f"{fmt_num(item['bin_slowdown'])}")


def passive_summary(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The report's `passive` part, from `pal gpus` rows with their passive estimates and flags
    (report.service.with_passive): how many GPU x class estimates there are and when they were
    learned; the GPUs whose passive factor disagrees with the benchmark beyond both uncertainties,
    slowest first; and the open flags (fail-slow, clock drift)."""
    estimates = [(r, c, p) for r in rows for c, p in (r.get("passive") or {}).items()]
    disagree = [{"uuid": r["uuid"], "node": r.get("node"), "slot": r.get("slot"), "job_class": c,
                 "benchmark_slowdown": p["benchmark"], "passive_slowdown": p["factor"], "low": p["low"],
                 "high": p["high"], "paced": p["paced"], "jobs": p["jobs"], "disagrees": p["disagrees"]}
                for r, c, p in estimates if p.get("disagrees")]
    disagree.sort(key=lambda d: (-(d["passive_slowdown"] / (d["benchmark_slowdown"] or 1.0)), d["uuid"]))
    flags = [{"uuid": r["uuid"], "node": r.get("node"), "slot": r.get("slot"), "kind": k, "detail": d}
             for r in rows for k, d in sorted((r.get("flags") or {}).items())]
    learned = max((p["computed_at"] for _r, _c, p in estimates), default=None)
    return {"estimates": len(estimates), "learned_at": learned, "disagreements": disagree, "flags": flags}
