"""Passive speed in the simulator: a belief that learns each GPU's pace from the jobs that finished,
as `pal gpus learn` does on a site every hour (pal_slurm/services/passive.py), and has the GPUs it
flags fail-slow re-profiled (docs/simulation.md, "Drifting fleets"). Pure.

Every `every_s` (the timer) it reads the finished jobs of the last `window_s` and does what
`learn` does with the ledger's: `passive.estimate` for each GPU's factor per class, and the
fail-slow CUSUM (`failslow.observations` and `detect`, stateless over the window) against the
benchmark factors. Then:

- **placement's factors**: a GPU's passive factor replaces its benchmark factor for a class where
  it paced at least `use_min_paced` jobs of it (`[classification] passive_use_min_paced`) and, by
  default (`use = "disagree"`), disagrees with the benchmark beyond both uncertainties; the
  benchmark's elsewhere. It replaces the PerfVar, which is what pal-guard ranks by (and the
  slowdown factor, which the artifact's policies rank by);
- **fail-slow flags**: a GPU newly flagged is re-profiled `reprofile_delay_s` later (`pal profile
  submit --flagged`; the profiling job's own time on the node is not simulated): its benchmark
  factors become what it measures then, after the repair of a fixable GPU
  (`drift.TrueFleet.repair`), and its CUSUM starts again from that moment.

What it reads of the run: the finished jobs (`observe`: fingerprint, class, GPUs, run time, time
limit, as accounting records them) and, at a re-profile, that GPU's truth. Nothing else.

The two rules of what placement takes and which runs count are `pal gpus learn`'s and the
placer's own (pal_slurm.classification.passive_use); `use = "paced"` and `since_profile = False`
are variants for measuring them (docs/simulation.md).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from pal_slurm.classification import failslow
from pal_slurm.classification.failslow import FailSlowSettings
from pal_slurm.classification.passive import JobRun, PassiveResult, PassiveSettings, estimate
from pal_slurm.classification.passive_use import placement_takes, since_profile
from pal_slurm.placement.model import Cluster
from pal_slurm.simulate.drift import HOUR, TrueFleet, with_factors
from pal_slurm.simulate.traces import TraceJob

__all__ = ["Flagged", "LearnSettings", "PassiveBelief", "gpu_keys"]

DAY = 24 * HOUR


@dataclass(frozen=True)
class LearnSettings:
    """The timer, the window, the rule placement takes passive factors by, the re-profile's delay,
    and the estimator's and the monitor's own knobs (the product's defaults). `flags`: run the
    fail-slow monitor and re-profile what it flags (off: placement by passive factors alone).
    `use`: which passive factors placement takes, "disagree" (those resting on `use_min_paced`
    paced jobs that disagree with the benchmark beyond both uncertainties: `failslow.disagreement`
    with the benchmark's relative uncertainty `benchmark_noise`, as `pal report` marks them) or
    "paced" (every one resting on `use_min_paced` paced jobs: the placer's rule)."""

    every_s: float = HOUR
    window_s: float = 14 * DAY
    use_min_paced: int = 10
    reprofile_delay_s: float = 2 * HOUR
    since_profile: bool = True
    flags: bool = True
    use: Literal["disagree", "paced"] = "disagree"
    benchmark_noise: float = 0.02
    passive: PassiveSettings = field(default_factory=PassiveSettings)
    failslow: FailSlowSettings = field(default_factory=FailSlowSettings)

    def __post_init__(self) -> None:
        for name in ("every_s", "window_s"):
            if not (math.isfinite(getattr(self, name)) and getattr(self, name) > 0):
                raise ValueError(f"{name} must be a positive number of seconds, got {getattr(self, name)!r}")
        if not (math.isfinite(self.reprofile_delay_s) and self.reprofile_delay_s >= 0):
            raise ValueError(f"reprofile_delay_s must be >= 0, got {self.reprofile_delay_s!r}")
        if self.use_min_paced < 1:
            raise ValueError(f"use_min_paced must be >= 1, got {self.use_min_paced!r}")


@dataclass
class Flagged:
    """A GPU flagged fail-slow: at which tick, for which class, after how many jobs of the CUSUM,
    and when its re-profile came."""

    gpu: int
    job_class: str
    at: float
    cusum_jobs: int
    passive_factor: float
    benchmark_factor: float
    reprofiled_at: float | None = None


def gpu_keys(cluster: Cluster) -> list[str]:
    """Per GPU id, its "node:slot" key (what a site's ledger names a GPU by)."""
    return [f"{cluster.node_names[g.node]}:{g.slot}" for g in cluster.gpus]


class PassiveBelief:
    """The passive arm's belief (drift.Belief): the benchmark snapshot of t = 0, then each GPU as
    its finished jobs and its re-profiles say (module doc)."""

    def __init__(self, snapshot: Cluster, settings: LearnSettings = LearnSettings()) -> None:
        self.settings = settings
        self.base = snapshot
        self.cluster = snapshot
        self.keys = gpu_keys(snapshot)
        self.index = {k: g for g, k in enumerate(self.keys)}
        self._bench = {c: list(v) for c, v in snapshot.perfvar.items()}  # the benchmark's PerfVar, per class
        self._believed = {c: tuple(v) for c, v in self._bench.items()}
        self.profiled: dict[str, float] = {}  # GPU key -> its latest re-profile
        self.runs: deque[JobRun] = deque()  # finished jobs, in end order
        self._tick = settings.every_s
        self._reprofiles: list[tuple[float, int]] = []  # (when, GPU), a heap
        self.flags: list[Flagged] = []
        self._pending: dict[int, Flagged] = {}
        self.result: PassiveResult | None = None
        self.ticks = 0

    def next_change(self) -> float:
        return min(self._tick, self._reprofiles[0][0] if self._reprofiles else math.inf)

    def observe(self, job: TraceJob, gpus: tuple[int, ...], start: float, end: float) -> None:
        self.runs.append(JobRun(job_id=job.job_id, fingerprint=job.name or job.model, job_class=job.job_class,
                                gpus=tuple(self.keys[g] for g in gpus), runtime_s=end - start, ended_at=end,
                                time_limit_s=job.limit_s))

    def advance(self, now: float, fleet: TrueFleet) -> bool:
        due = False
        while self._reprofiles and self._reprofiles[0][0] <= now:
            _, g = heapq.heappop(self._reprofiles)
            self._reprofile(g, now, fleet)
            due = True
        if now >= self._tick:
            self._tick = (math.floor(now / self.settings.every_s) + 1) * self.settings.every_s
            due = True
        return self._learn(now) if due else False

    # -- what one learning pass does ------------------------------------------------------
    def _learn(self, now: float) -> bool:
        s = self.settings
        self.ticks += 1
        while self.runs and self.runs[0].ended_at < now - s.window_s:
            self.runs.popleft()
        bench = {k: {c: v[g] for c, v in self._bench.items()} for g, k in enumerate(self.keys)}
        result = self.result = estimate(self._evidence(), s.passive)
        flags = (failslow.detect(failslow.observations(self.runs, result.baselines, bench, self.profiled), s.failslow)
                 if s.flags else [])
        for f in flags:
            g = self.index[f.gpu]
            if g not in self._pending:
                self._pending[g] = flag = Flagged(gpu=g, job_class=f.job_class, at=now, cusum_jobs=len(f.jobs),
                                                  passive_factor=f.passive_factor, benchmark_factor=f.benchmark_factor)
                self.flags.append(flag)
                heapq.heappush(self._reprofiles, (now + s.reprofile_delay_s, g))
        return self._place_by(result)

    def _evidence(self) -> Sequence[JobRun] | deque[JobRun]:
        """The runs the estimate reads: the window's, less (with since_profile) those begun before
        the latest profile of one of their GPUs."""
        if not (self.settings.since_profile and self.profiled):
            return self.runs
        return since_profile(self.runs, self.profiled)

    def _place_by(self, result: PassiveResult) -> bool:
        """Placement's factors: passive where a GPU paced enough jobs of the class, else the
        benchmark's; True when they moved."""
        s = self.settings
        believed = {c: list(v) for c, v in self._bench.items()}
        for e in result.estimates:
            if e.paced < s.use_min_paced or e.job_class not in believed:
                continue
            g = self.index[e.gpu]
            bench = self._bench[e.job_class][g]
            if s.use == "paced" or placement_takes(e, bench, min_paced=s.use_min_paced,
                                                    benchmark_noise=s.benchmark_noise):
                believed[e.job_class][g] = e.factor
        frozen = {c: tuple(v) for c, v in believed.items()}
        if frozen == self._believed:
            return False
        self._believed = frozen
        self.cluster = with_factors(self.base, frozen)
        return True

    def _reprofile(self, g: int, now: float, fleet: TrueFleet) -> None:
        """The benchmark run on a flagged GPU: repaired where it can be, then measured as it is."""
        fleet.repair(g, now)
        for c, v in self._bench.items():
            v[g] = fleet.pv(c)[g]
        self.profiled[self.keys[g]] = now
        flag = self._pending.pop(g, None)
        if flag is not None:
            flag.reprofiled_at = now
