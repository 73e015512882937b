"""Fairness, made visible: who got which GPUs, and how long pal-slurm made them wait (pure).

Why: a variability-aware placer hands some jobs better GPUs than others. Operators must
be able to see that no user or account is systematically put on the slow GPUs, and what
the hold costs them. From the placement records (pal_slurm.placer.audit) this computes,
per account and per user:

- GPU-hours on each speed tier, as a share of that user's GPU-hours, next to the whole
  fleet's share (fast: slowdown factor < 0.99 for the job's class; typical: 0.99-1.01;
  slow: > 1.01), from the factors each job was placed by;
- the median and p95 of the wait pal-slurm added: from submission to the job's release
  by the placer (placed or released unchanged), i.e. the time it was held.

In observe mode nothing is held and Slurm places every job: its jobs come from the
placer's ledger (the GPUs Slurm gave each finished job), so the week before enforcing
shows how Slurm's own placement shares the fast and slow GPUs, with no wait added.

A job counts from its start to its end; one still running counts until `now`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

TIERS = ("fast", "typical", "slow")
FAST_BELOW = 0.99
SLOW_ABOVE = 1.01


def tier(slowdown: float | None) -> str:
    """The speed tier of a GPU's slowdown factor for the job's class (unknown: typical)."""
    if slowdown is None:
        return "typical"
    if slowdown < FAST_BELOW:
        return "fast"
    if slowdown > SLOW_ABOVE:
        return "slow"
    return "typical"


@dataclass(frozen=True)
class PlacedJob:
    """What fairness needs of one placement record."""

    job_id: str
    user: str
    account: str
    outcome: str  # applied | released-unchanged | observed (observe mode: where Slurm put it, never held)
    slowdowns: tuple[float | None, ...]  # one per GPU (empty when released unchanged)
    submitted_at: datetime | None
    released_at: datetime | None  # applied_at
    started_at: datetime | None
    ended_at: datetime | None


def _quantile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    xs = sorted(values)
    pos = q * (len(xs) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


@dataclass
class _Acc:
    jobs: int = 0
    gpu_hours: dict[str, float] = field(default_factory=lambda: dict.fromkeys(TIERS, 0.0))
    waits: list[float] = field(default_factory=list)

    def add(self, job: PlacedJob, now: datetime) -> None:
        self.jobs += 1
        if job.submitted_at is not None and job.released_at is not None:
            self.waits.append(max((job.released_at - job.submitted_at).total_seconds(), 0.0))
        if job.outcome in ("applied", "observed") and job.started_at is not None and job.slowdowns:
            hours = max(((job.ended_at or now) - job.started_at).total_seconds(), 0.0) / 3600
            for sf in job.slowdowns:
                self.gpu_hours[tier(sf)] += hours

    def row(self, kind: str, name: str, fleet: Mapping[str, float]) -> dict[str, Any]:
        total = sum(self.gpu_hours.values())
        share = {t: (self.gpu_hours[t] / total if total else None) for t in TIERS}
        return {"kind": kind, "name": name, "jobs": self.jobs, "gpu_hours": round(total, 3),
                "gpu_hours_by_tier": {t: round(v, 3) for t, v in self.gpu_hours.items()},
                "share": {t: None if v is None else round(v, 4) for t, v in share.items()},
                "fleet_share": {t: None if fleet.get(t) is None else round(fleet[t], 4) for t in TIERS},
                "added_wait_s": {"median": _round(_quantile(self.waits, 0.5)), "p95": _round(_quantile(self.waits, 0.95)),
                                 "jobs": len(self.waits)}}


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 1)


def fairness(jobs: Iterable[PlacedJob], now: datetime) -> dict[str, Any]:
    """The report: one row per account and per user, and one for the fleet."""
    fleet = _Acc()
    by: dict[tuple[str, str], _Acc] = {}
    for job in jobs:
        fleet.add(job, now)
        by.setdefault(("account", job.account or "-"), _Acc()).add(job, now)
        by.setdefault(("user", job.user or "-"), _Acc()).add(job, now)
    total = sum(fleet.gpu_hours.values())
    fleet_share = {t: fleet.gpu_hours[t] / total for t in TIERS} if total else {}
    rows = [acc.row(kind, name, fleet_share) for (kind, name), acc in sorted(by.items())]
    return {"tiers": {"fast": f"slowdown < {FAST_BELOW}", "typical": f"{FAST_BELOW}..{SLOW_ABOVE}",
                      "slow": f"slowdown > {SLOW_ABOVE}"},
            "fleet": fleet.row("fleet", "all", fleet_share), "rows": rows}
