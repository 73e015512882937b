"""The event simulator's running jobs on a drifting fleet: each job's progress at a pace that may
change while it runs (pal_slurm.simulate.event's drift stage). Pure.

Why apart from event.py: without a drifting fleet a job's run time is fixed at its start and the
simulator needs none of this; with one, a job's end moves whenever the slowest of its GPUs
changes pace, and its tax is charged stretch by stretch. `Drift` is what the simulator asks of a
drifting fleet (pal_slurm.simulate.drift.Drifting implements it).

Rules: a job does `nominal run time` of work at `pace x locality` seconds per second of work; when
its GPUs' true pace changes, the work done so far is charged at the old pace and the rest runs at
the new one. Its GPUs free again at the end worked out last; an end the pace moved stays in the
simulator's heap of ends and is passed over when it comes up (`current`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from pal_slurm.placement import cost
from pal_slurm.placement.model import Cluster
from pal_slurm.simulate.metrics import variability_gpu_s
from pal_slurm.simulate.traces import TraceJob

__all__ = ["Drift", "PacedJobs", "Pacing"]


class Drift(Protocol):
    """A fleet whose GPUs change speed during a run, and what the policy believes of it
    (pal_slurm.simulate.drift.Drifting): the simulator asks it for the truth, tells it what
    ended, and places by its belief."""

    @property
    def believed(self) -> Cluster:
        """The cluster the policy ranks by now."""
        ...

    def next_change(self) -> float:
        """The next moment the truth or the belief may change (inf: never)."""
        ...

    def advance(self, now: float) -> tuple[frozenset[int], bool]:
        """Apply what is due by `now`: the GPUs whose true pace changed, and whether the belief moved."""
        ...

    def pace(self, job_class: str | None, gpus: Sequence[int]) -> float:
        """The true pace of a job of `job_class` on `gpus` now: their slowest true PerfVar."""
        ...

    def finished(self, job: TraceJob, gpus: tuple[int, ...], start: float, end: float) -> None:
        """A job's work ended (what a site's accounting records of it)."""
        ...


@dataclass
class Pacing:
    """One running job: since `since` it runs at `pace` (x `locality`) with `left_s` of nominal work
    to do, to end at `end`; `tax` and `signed` what it paid before (GPU-seconds)."""

    since: float
    left_s: float
    pace: float
    locality: float
    end: float
    tax: float = 0.0
    signed: float = 0.0

    def charge(self, now: float, gpus: int, *, final: bool = False) -> None:
        """The work done since `since` (all that was left, when the job ends: `final`), charged at
        its pace (the tax per stretch of one pace, as round mode charges each round)."""
        done = self.left_s if final else min(self.left_s, (now - self.since) / (self.pace * self.locality))
        extra = variability_gpu_s(gpus, done, self.pace)
        self.tax += max(0.0, extra)
        self.signed += extra
        self.left_s -= done
        self.since = now


class PacedJobs:
    """The running jobs' progress on `drift`'s fleet; `seq` each job's start order (the heap's tie-break)."""

    def __init__(self, drift: Drift, locality_penalty: float, node_of: Sequence[int]) -> None:
        self.drift = drift
        self.locality_penalty = locality_penalty
        self.node_of = node_of
        self.jobs: dict[str, Pacing] = {}
        self.seq: dict[str, int] = {}

    def start(self, job: TraceJob, gpus: tuple[int, ...], began: float, *, seq: int) -> float:
        """`job` starts on `gpus` at `began`; its run time at their true pace now (cost.runtime_s's model)."""
        locality = self.locality_penalty if cost.spans_nodes(self.node_of, gpus) else 1.0
        pace = self.drift.pace(job.job_class, gpus)
        dur = job.nominal_runtime_s * pace * locality
        self.jobs[job.job_id] = Pacing(since=began, left_s=job.nominal_runtime_s, pace=pace, locality=locality,
                                       end=began + dur)
        self.seq[job.job_id] = seq
        return dur

    def repace(self, job: TraceJob, gpus: tuple[int, ...], now: float) -> tuple[float, float] | None:
        """`job`'s remaining work at its GPUs' pace now: (its new end, its end before), or None when
        the slowest of its GPUs kept its pace."""
        p = self.jobs.get(job.job_id)
        if p is None:
            return None
        pace = self.drift.pace(job.job_class, gpus)
        if pace == p.pace:
            return None
        p.charge(now, len(gpus))
        p.pace = pace
        before, p.end = p.end, now + p.left_s * p.pace * p.locality
        return p.end, before

    def current(self, job_id: str, t: float) -> bool:
        """Whether an end `t` from the heap is `job_id`'s current one."""
        p = self.jobs.get(job_id)
        return p is not None and t == p.end

    def finish(self, job: TraceJob, gpus: tuple[int, ...], start: float, end: float) -> tuple[float, float]:
        """`job` ended: its tax (clipped at 0 stretch by stretch) and its signed variability, in
        GPU-seconds; the fleet is told of it."""
        p = self.jobs.pop(job.job_id)
        self.seq.pop(job.job_id, None)
        p.charge(end, len(gpus), final=True)
        self.drift.finished(job, gpus, start, end)
        return p.tax, p.signed
