"""The outlier GPU table `pal report` and `pal gpus --actions` both show: one row per outlier
GPU, where it is, what is slow on it and what to do; and the short GPU ids every table uses."""

from __future__ import annotations

from typing import Any

from pal_slurm.classification.actions import short_uuid
from pal_slurm.cli.render import Column
from pal_slurm.numfmt import fmt_num


def short_ids(uuids: Any) -> dict[str, str]:
    """uuid -> the short form tables show (first 8 hex digits of an NVML UUID); a GPU whose
    short form another GPU shares keeps its full UUID, so a short id always names one GPU."""
    uuids = sorted(set(uuids))
    short = {u: short_uuid(u) for u in uuids}
    seen: dict[str, int] = {}
    for s in short.values():
        seen[s] = seen.get(s, 0) + 1
    return {u: (s if seen[s] == 1 else u) for u, s in short.items()}


def _slow_on(a: dict[str, Any], perfvars: dict[tuple[str, str], float | None]) -> str:
    return ", ".join(f"{b} {fmt_num(perfvars.get((a['uuid'], b)))}" for b in a["benchmarks"])


def action_columns(wide: bool, ids: dict[str, str], perfvars: dict[tuple[str, str], float | None]) -> list[Column]:
    """One row per outlier GPU: where it is, what is slow (PerfVar per benchmark), what to do and why."""
    return [
        Column("node", lambda r: r["node"] or "unknown", wrap=False),
        Column("GPU", (lambda r: r["uuid"]) if wide else (lambda r: ids.get(r["uuid"], r["uuid"])), wrap=False),
        *([Column("model", lambda r: r["model"])] if wide else []),
        Column("PerfVar", lambda r: _slow_on(r, perfvars), wrap=True),
        Column("action", lambda r: r["action"]),
        Column("reason", lambda r: r["reason"], wrap=True),
    ]


def outlier_perfvars(data: dict[str, Any]) -> dict[tuple[str, str], float | None]:
    """(uuid, benchmark) -> the outlier's PerfVar there, from the report's data."""
    return {(o["uuid"], item["benchmark"]): o["perfvar"]
            for item in data["benchmarks"] for o in item["outlier_details"]}
