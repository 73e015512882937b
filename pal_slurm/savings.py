"""`pal report savings`: what slower-than-typical GPUs cost the site's jobs, and how much of it
the placer's choice avoids (enforce mode) or would have avoided (observe mode) (pure).

Input: the per-job records of `job_accounting` (pal_slurm.placer.ledger says how each job's
tax and saving are computed). Definitions, as the report prints them:

- *GPU-hours*: the accounted jobs' GPUs x run time.
- *lost*: the GPU-hours beyond what typical GPUs would have taken, summed over the jobs that
  ran on slower-than-typical GPUs (a job on faster GPUs loses nothing; it gains nothing either).
- *saved*: the GPU-hours the other choice gives, signed (a job the placer would have put on
  slower GPUs counts against it), over the jobs that have one; observe and enforce apart.
- *unaccounted*: jobs whose GPUs or factors were unknown. Never counted as zero tax.
- *GPUs responsible*: each job's loss goes to its slowest GPU(s) (the one that set its pace),
  split evenly on a tie; the GPUs with the most, with their graded action (`pal gpus --actions`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

BY = ("partition", "account", "user", "class")
MODES = ("observe", "enforce")


@dataclass(frozen=True)
class Cell:
    """The sums over the jobs that share a group (`--by`; "" without), a mode and whether
    they are accounted: what the database aggregates (pal_slurm.db.accounting_store), so the
    report reads a few hundred cells, not 100,000 rows."""

    group: str
    mode: str
    accounted: bool
    jobs: int
    gpu_hours: float
    lost_gpu_hours: float  # the positive taxes only
    net_tax_gpu_hours: float
    saved_gpu_hours: float  # over the jobs with an alternative
    compared_jobs: int


@dataclass(frozen=True)
class PaceCell:
    """The loss of the jobs whose pace the same GPU(s) set ("node:minor,...")."""

    slowest_gpus: str
    lost_gpu_hours: float
    jobs: int


@dataclass(frozen=True)
class JobAccount:
    """One finished GPU job's line in the books (the `job_accounting` table): what
    pal_slurm.placer.ledger writes, the database stores and this module sums (here, in the
    core layer, so that the storage layer need not import the placer)."""

    job_id: str
    mode: str
    job_class: str
    partition: str
    account: str
    user: str
    gpus: tuple[tuple[str, int, float | None], ...]  # (node, minor, factor for the class)
    started_at: datetime
    ended_at: datetime
    runtime_s: float
    factor: float | None  # None: unaccounted
    tax_gpu_h: float | None
    alternative: str | None
    alternative_factor: float | None
    saved_gpu_h: float | None
    version: int | None
    #: the job's fingerprint and time limit: passive speed compares runs of one fingerprint, and a
    #: run time beyond the limit is impossible (None: unknown, as in rows stored before they were kept)
    fingerprint: str | None = None
    time_limit_s: float | None = None

    @property
    def accounted(self) -> bool:
        return self.factor is not None

    def slowest_text(self, limit: int = 1024) -> str:
        """"node:minor,..." of the GPUs at the job's factor (the ones that set its pace), cut at a
        whole GPU to fit `limit` characters; "" when unaccounted."""
        out = ""
        for n, m, f in self.gpus:
            if self.factor is None or f != self.factor:
                continue
            item = f"{n}:{m}"
            if len(out) + len(item) + 1 > limit:
                break
            out = f"{out},{item}" if out else item
        return out


def group_of(r: JobAccount, by: str | None) -> str:
    if by is None:
        return ""
    return str({"partition": r.partition, "account": r.account, "user": r.user, "class": r.job_class}[by])


def cells_of(records: Iterable[JobAccount], by: str | None = None) -> tuple[list[Cell], list[PaceCell]]:
    """The cells of job records, summed in Python: the same sums the database query makes
    (the tests hold the two to each other on every database)."""
    sums: dict[tuple[str, str, bool], list[float]] = {}
    pace: dict[str, list[float]] = {}
    for r in records:
        acc = r.factor is not None and r.tax_gpu_h is not None
        cell = sums.setdefault((group_of(r, by), r.mode, acc), [0, 0.0, 0.0, 0.0, 0.0, 0])
        cell[0] += 1
        cell[1] += len(r.gpus) * r.runtime_s / 3600.0
        if acc:
            tax = float(r.tax_gpu_h)  # type: ignore[arg-type]
            cell[2] += max(tax, 0.0)
            cell[3] += tax
            if r.saved_gpu_h is not None:
                cell[4] += r.saved_gpu_h
                cell[5] += 1
            text = r.slowest_text()
            if tax > 0 and text:
                p = pace.setdefault(text, [0.0, 0])
                p[0] += tax
                p[1] += 1
    return ([Cell(g, m, a, int(v[0]), v[1], v[2], v[3], v[4], int(v[5])) for (g, m, a), v in sums.items()],
            [PaceCell(k, v[0], int(v[1])) for k, v in pace.items()])


def _sums(cells: Iterable[Cell]) -> dict[str, Any]:
    """The totals of some cells, in the contract's keys."""
    out: dict[str, Any] = {"jobs": 0, "accounted_jobs": 0, "unaccounted_jobs": 0, "unaccounted_gpu_hours": 0.0,
                           "gpu_hours": 0.0, "lost_gpu_hours": 0.0, "lost_share": None, "net_tax_gpu_hours": 0.0}
    for m in MODES:
        out[f"{m}_saved_gpu_hours"] = 0.0
        out[f"{m}_compared_jobs"] = 0
    for c in cells:
        out["jobs"] += c.jobs
        if not c.accounted:
            out["unaccounted_jobs"] += c.jobs
            out["unaccounted_gpu_hours"] += c.gpu_hours
            continue
        out["accounted_jobs"] += c.jobs
        out["gpu_hours"] += c.gpu_hours
        out["lost_gpu_hours"] += c.lost_gpu_hours
        out["net_tax_gpu_hours"] += c.net_tax_gpu_hours
        if c.mode in MODES:
            out[f"{c.mode}_saved_gpu_hours"] += c.saved_gpu_hours
            out[f"{c.mode}_compared_jobs"] += c.compared_jobs
    lost = out["lost_gpu_hours"]
    out["lost_share"] = lost / out["gpu_hours"] if out["gpu_hours"] > 0 else None
    out["saved_gpu_hours"] = sum(out[f"{m}_saved_gpu_hours"] for m in MODES)
    out["saved_share"] = out["saved_gpu_hours"] / lost if lost > 0 else None
    return out


def savings(cells: Sequence[Cell], pace: Sequence[PaceCell] = (), *, by: str | None = None,
            since: str | None = None, gpu_names: Mapping[tuple[str, int], str] | None = None,
            actions: Mapping[str, Mapping[str, Any]] | None = None, top: int = 10) -> dict[str, Any]:
    """The report's data (JSON contract): totals, the headline, per-group rows, the top GPUs.

    `gpu_names`: (node, minor) -> GPU UUID (the latest classification), `actions`: UUID -> its
    graded action (``{"action", "reason"}``) for the GPUs the classification flags."""
    if by is not None and by not in BY:
        raise ValueError(f"by: one of {', '.join(BY)}, not {by!r}")
    out = _sums(cells)
    out["since"] = since
    out["by"] = by
    out["headline"] = headline(out, since)
    out["groups"] = []
    if by is not None:
        per: dict[str, list[Cell]] = {}
        for c in cells:
            per.setdefault(c.group, []).append(c)
        groups = [{"name": name, **_sums(cs)} for name, cs in per.items()]
        out["groups"] = sorted(groups, key=lambda g: (-g["lost_gpu_hours"], g["name"]))
    out["gpus"] = _responsible(pace, out["lost_gpu_hours"], gpu_names or {}, actions or {}, top)
    return out


def _responsible(pace: Sequence[PaceCell], lost: float, names: Mapping[tuple[str, int], str],
                 actions: Mapping[str, Mapping[str, Any]], top: int) -> list[dict[str, Any]]:
    """Each job's loss to the GPU(s) that set its pace, split evenly; the `top` GPUs by loss."""
    per_gpu: dict[str, list[float]] = {}
    for p in pace:
        gpus = [g for g in p.slowest_gpus.split(",") if g]
        for g in gpus:
            acc = per_gpu.setdefault(g, [0.0, 0])
            acc[0] += p.lost_gpu_hours / len(gpus)
            acc[1] += p.jobs
    out: list[dict[str, Any]] = []
    for name, (gpu_lost, jobs) in sorted(per_gpu.items(), key=lambda kv: (-kv[1][0], kv[0]))[:top]:
        node, _, minor_text = name.rpartition(":")
        minor = int(minor_text) if minor_text.lstrip("-").isdigit() else -1
        uuid = names.get((node, minor))
        act = actions.get(uuid) if uuid is not None else None
        out.append({"node": node, "minor": minor, "uuid": uuid, "lost_gpu_hours": gpu_lost, "jobs": int(jobs),
                    "share_of_lost": gpu_lost / lost if lost > 0 else None,
                    "action": act.get("action") if act else None, "reason": act.get("reason") if act else None})
    return out


def headline(data: Mapping[str, Any], since: str | None) -> str:
    """The one line that answers "what would pal-slurm save on my cluster?"."""
    when = _when(since) if since else "all recorded jobs"
    unacc = data["unaccounted_jobs"]
    tail = f"; {unacc} job{'s' if unacc != 1 else ''} unaccounted (GPUs or factors unknown)" if unacc else ""
    if not data["accounted_jobs"]:
        return f"{when}: no accounted GPU job{tail}"
    lost, share = data["lost_gpu_hours"], data["lost_share"] or 0.0
    line = f"{when}: {_h(lost)} GPU-hours ({100 * share:.1f} %) lost to slow GPUs"
    parts = []
    if data["observe_compared_jobs"]:
        parts.append(f"pal-slurm would have saved {_h(data['observe_saved_gpu_hours'])} of them")
    if data["enforce_compared_jobs"]:
        parts.append(f"pal-slurm saved {_h(data['enforce_saved_gpu_hours'])} GPU-hours against Slurm's first fit")
    if not parts:
        parts.append("no placer choice recorded to compare with")
    return line + "; " + "; ".join(parts) + tail


def _h(x: float) -> str:
    """GPU-hours as people read them: whole hours from 10 up, else two significant digits."""
    if abs(x) >= 10:
        return f"{x:,.0f}"
    return f"{x:.2g}" if x else "0"


def _when(since: str) -> str:
    """`7d` -> "last 7 days"; an ISO time -> "since <it>"."""
    units = {"d": "days", "h": "hours", "m": "minutes", "s": "seconds"}
    text = since.strip()
    if text[:-1].isdigit() and text[-1:] in units:
        n = int(text[:-1])
        unit = units[text[-1]]
        return f"last {n} {unit[:-1] if n == 1 else unit}"
    return f"since {text}"


__all__ = ["BY", "MODES", "Cell", "JobAccount", "PaceCell", "cells_of", "group_of", "headline", "savings"]
