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

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

BY = ("partition", "account", "user", "class")


class Row(Protocol):
    job_id: str
    mode: str
    job_class: str
    partition: str
    account: str
    user: str
    gpus: list[dict[str, Any]]
    n_gpus: int
    runtime_s: float
    slowdown: float | None
    tax_gpu_h: float | None
    alternative: str | None
    saved_gpu_h: float | None


@dataclass
class _Sum:
    jobs: int = 0
    gpu_hours: float = 0.0
    lost: float = 0.0
    net_tax: float = 0.0
    unaccounted: int = 0
    unaccounted_gpu_hours: float = 0.0
    saved: dict[str, float] = field(default_factory=lambda: {"observe": 0.0, "enforce": 0.0})
    compared: dict[str, int] = field(default_factory=lambda: {"observe": 0, "enforce": 0})
    lost_compared: dict[str, float] = field(default_factory=lambda: {"observe": 0.0, "enforce": 0.0})

    def add(self, r: Row) -> None:
        self.jobs += 1
        gpu_h = r.n_gpus * r.runtime_s / 3600.0
        if r.slowdown is None or r.tax_gpu_h is None:
            self.unaccounted += 1
            self.unaccounted_gpu_hours += gpu_h
            return
        self.gpu_hours += gpu_h
        self.net_tax += r.tax_gpu_h
        loss = max(r.tax_gpu_h, 0.0)
        self.lost += loss
        if r.saved_gpu_h is not None and r.mode in self.saved:
            self.saved[r.mode] += r.saved_gpu_h
            self.compared[r.mode] += 1
            self.lost_compared[r.mode] += loss

    def as_dict(self) -> dict[str, Any]:
        accounted = self.jobs - self.unaccounted
        return {
            "jobs": self.jobs, "accounted_jobs": accounted, "unaccounted_jobs": self.unaccounted,
            "unaccounted_gpu_hours": self.unaccounted_gpu_hours,
            "gpu_hours": self.gpu_hours, "lost_gpu_hours": self.lost,
            "lost_share": self.lost / self.gpu_hours if self.gpu_hours > 0 else None,
            "net_tax_gpu_hours": self.net_tax,
            **{f"{m}_saved_gpu_hours": self.saved[m] for m in ("observe", "enforce")},
            **{f"{m}_compared_jobs": self.compared[m] for m in ("observe", "enforce")},
            "saved_gpu_hours": self.saved["observe"] + self.saved["enforce"],
            "saved_share": ((self.saved["observe"] + self.saved["enforce"]) / self.lost if self.lost > 0 else None),
        }


def savings(rows: Iterable[Row], *, by: str | None = None, since: str | None = None,
            gpu_names: Mapping[tuple[str, int], str] | None = None,
            actions: Mapping[str, Mapping[str, Any]] | None = None, top: int = 10) -> dict[str, Any]:
    """The report's data (JSON contract): totals, the headline, per-group rows, the top GPUs.

    `gpu_names`: (node, minor) -> GPU UUID (the latest classification), `actions`: UUID -> its
    graded action (``{"action", "reason"}``) for the GPUs the classification flags."""
    if by is not None and by not in BY:
        raise ValueError(f"by: one of {', '.join(BY)}, not {by!r}")
    total = _Sum()
    groups: dict[str, _Sum] = {}
    per_gpu: dict[tuple[str, int], list[float]] = {}  # -> [lost GPU-hours, jobs]
    key_of = {"partition": "partition", "account": "account", "user": "user", "class": "job_class"}
    for r in rows:
        total.add(r)
        if by is not None:
            groups.setdefault(str(getattr(r, key_of[by])), _Sum()).add(r)
        if r.tax_gpu_h is None or r.tax_gpu_h <= 0 or not r.gpus:
            continue
        worst = [g for g in r.gpus if g.get("slowdown") == r.slowdown] or r.gpus
        share = r.tax_gpu_h / len(worst)
        for g in worst:
            acc = per_gpu.setdefault((str(g.get("node")), int(g.get("minor", -1))), [0.0, 0])
            acc[0] += share
            acc[1] += 1
    out = total.as_dict()
    out["since"] = since
    out["by"] = by
    out["headline"] = headline(out, since)
    out["groups"] = [{"name": name, **s.as_dict()} for name, s in
                     sorted(groups.items(), key=lambda kv: (-kv[1].lost, kv[0]))]
    names = gpu_names or {}
    acts = actions or {}
    ranked = sorted(per_gpu.items(), key=lambda kv: (-kv[1][0], kv[0]))[:top]
    out["gpus"] = []
    for (node, minor), (lost, jobs) in ranked:
        uuid = names.get((node, minor))
        act = acts.get(uuid) if uuid is not None else None
        out["gpus"].append({"node": node, "minor": minor, "uuid": uuid, "lost_gpu_hours": lost, "jobs": int(jobs),
                            "share_of_lost": lost / total.lost if total.lost > 0 else None,
                            "action": act.get("action") if act else None,
                            "reason": act.get("reason") if act else None})
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


__all__ = ["BY", "headline", "savings"]
