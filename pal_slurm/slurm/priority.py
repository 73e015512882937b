"""Slurm's own job order, for serving held jobs in it (pure parsers and the rank rule).

Why: pal-slurm chooses *which* GPUs a job gets, never *who goes first*. Slurm's main
scheduler walks pending jobs by partition PriorityTier (higher first), then by job
priority (higher first); jobs the submit filter holds must be placed in that order too.

One correction: a job held through its begin time has no AccrueTime yet, so the age
factor of priority/multifactor is 0 in the priority Slurm reports for it. Plain Slurm
would have let it age since submission. `PriorityConfig.age_bonus` adds that factor back
(PriorityWeightAge x min(age / PriorityMaxAge, 1)), so held jobs rank as they would
without the hold. priority/basic has no age factor (its priority already falls with
submit order). Read from `scontrol show config` and `scontrol show partition -o`, whose
text is the same on 22.05 and 24.11.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from pal_slurm.slurm.model import SlurmJob
from pal_slurm.slurm.nodeinfo import parse_kv_line

_DURATION = re.compile(r"^(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+)$")


def duration_s(text: str) -> float | None:
    """Slurm's `D-HH:MM:SS` / `HH:MM:SS` / `MM:SS` as seconds; None when unreadable."""
    m = _DURATION.match(text.strip())
    if not m:
        return None
    days, hours, minutes, seconds = (int(x) if x else 0 for x in m.groups())
    return float(((days * 24 + hours) * 60 + minutes) * 60 + seconds)


@dataclass(frozen=True)
class PriorityConfig:
    """What of Slurm's priority settings the rank needs (defaults: priority/basic)."""

    multifactor: bool = False
    weight_age: float = 0.0
    max_age_s: float = 7 * 86400.0

    def age_bonus(self, submit_time: float, now: float) -> float:
        """The age factor plain Slurm would have added by `now` for a job submitted at `submit_time`."""
        if not self.multifactor or self.weight_age <= 0 or self.max_age_s <= 0:
            return 0.0
        return self.weight_age * min(max(now - submit_time, 0.0) / self.max_age_s, 1.0)


def parse_config(text: str) -> PriorityConfig:
    """`scontrol show config` (lines of `Key = Value`) -> PriorityConfig."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = value.strip()
    multifactor = values.get("PriorityType", "").endswith("multifactor")
    try:
        weight = float(values.get("PriorityWeightAge", "0").split()[0])
    except (ValueError, IndexError):
        weight = 0.0
    max_age = duration_s(values.get("PriorityMaxAge", "")) or 7 * 86400.0
    return PriorityConfig(multifactor=multifactor, weight_age=weight, max_age_s=max_age)


def parse_partition_tiers(text: str) -> dict[str, int]:
    """`scontrol show partition -o` -> partition name -> PriorityTier (1 when not shown)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        if not line.startswith("PartitionName="):
            continue
        kv = parse_kv_line(line)
        try:
            out[kv["PartitionName"]] = int(kv.get("PriorityTier", "1"))
        except ValueError:
            out[kv["PartitionName"]] = 1
    return out


def job_rank(job: SlurmJob, tiers: Mapping[str, int], cfg: PriorityConfig, now: float) -> tuple[int, float]:
    """(PriorityTier, priority) of a pending job in Slurm's order: the highest tier of the
    partitions it may run in, and the priority Slurm reports plus the age a hold withheld."""
    parts = [p for p in job.partition.split(",") if p]
    tier = max((tiers.get(p, 1) for p in parts), default=1)
    return tier, float(job.priority or 0) + cfg.age_bonus(job.submit_time, now)
