"""How long before a replayed job's script starts Slurm says the job started. Pure.

Slurm's StartTime is a whole second (`time(NULL)` when slurmctld allocates the job), and
slurmd launches the batch script after that: the script's own clock starts 0.1-0.3 s after
the allocation and on average about half a second after the whole second Slurm reports.
Slurm's EndTime (start + limit, what its backfill plans with) and the placer's expected end
(start + learned runtime) inherit that lead, so a job whose learned estimate is its exact
runtime looks overdue for its last fraction of a second, and the placer's expected end for
it jumps to start + limit. At the replay's compression (k = 30: a real second is two trace
minutes) that moves the pal+history arm's queue; the simulator models it with
`EventOptions.start_lead_s` (docs/evaluation.md).

Two sources, the same quantity:
- the job record's `slurm_start` (the job script reads its own StartTime from
  `squeue --json`; pal_eval.replay.job), and
- for runs recorded before the records carried it, slurmctld's log: its allocation
  messages (`sched: Allocate JobId=N ...` and the backfill's `Started JobId=N ...`, the same
  in Slurm 22.05 and 24.11) have millisecond times, whose whole second is StartTime.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

__all__ = ["allocation_times", "lead_from_log", "start_lead"]

_ALLOC = re.compile(r"^\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)\] "
                    r"(?:sched: Allocate|(?:sched/)?backfill(?:: _start_job)?: Started) JobId=(\d+)\b")


def start_lead(records: Iterable[Mapping[str, Any]]) -> float | None:
    """The median over job records of the script's start less Slurm's StartTime for it (real
    seconds, both on one clock); None when no record has both."""
    leads = [float(r["start"]) - float(r["slurm_start"]) for r in records
             if r.get("slurm_start") is not None and r.get("start") is not None]
    return round(statistics.median(leads), 3) if leads else None


def allocation_times(lines: Iterable[str]) -> dict[str, list[float]]:
    """Slurm job id -> every time (epoch seconds, this machine's local time as slurmctld logs
    it) slurmctld's log says it allocated that job; a cluster started again reuses ids, so
    one id may have several."""
    out: dict[str, list[float]] = {}
    for line in lines:
        m = _ALLOC.match(line)
        if m:
            out.setdefault(m.group(2), []).append(datetime.fromisoformat(m.group(1)).timestamp())
    return out


def lead_from_log(records: Sequence[Mapping[str, Any]], allocs: Mapping[str, Sequence[float]],
                  within_s: float = 10.0) -> tuple[float | None, int]:
    """`start_lead` of job records (`job`: Slurm id, `start`: the script's epoch) with each
    StartTime taken as the whole second of its allocation in the log: the latest allocation of
    that id at most `within_s` before the script's start. Returns the lead and how many
    records were matched."""
    matched = []
    for r in records:
        job, start = r.get("job"), r.get("start")
        if job is None or start is None:
            continue
        near = [t for t in allocs.get(str(job), ()) if 0.0 <= float(start) - t <= within_s]
        if near:
            matched.append({"start": float(start), "slurm_start": float(int(max(near)))})
    return start_lead(matched), len(matched)
