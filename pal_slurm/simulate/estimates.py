"""What policies are told about runtimes in a simulation (`--runtime-estimate`), pure.

A real scheduler never knows how long a job will run; Slurm's backfill plans with the
user's time limit, and pal-slurm's placer with the limit or a learned runtime. A headline
figure must not let a policy see exact runtimes, so the event simulator hands policies an
*estimate* while every job still runs for its true time:

- ``exact``: the true runtime (what the PAL artifact's simulator assumes; for comparison only);
- ``limit``: the trace's time limit (sacct's Timelimit): the estimate before the job starts
  and after, as Slurm's EndTime = start + limit;
- ``xF`` (e.g. ``x2``): F times the truth, for every job (a uniformly cautious site);
- ``uniform:LO:HI[:SEED]``: each job's own factor drawn from U[LO, HI] (seeded by the job id,
  so every policy of a run sees the same estimates), like users who pad their limits by
  different amounts;
- ``learned`` (built in code, `RuntimeEstimate.from_learned`, no command-line form): what the
  placer estimates from learned runtimes, per job id (trace seconds), never more than the
  job's time limit; the limit for a job nothing was learned about. The replay's pal+history
  arm is predicted with it. A running job is expected to end its estimate after its start,
  and once it outlives that, its limit after its start (Slurm's EndTime): the placer's belief,
  `placement/belief.Running`, which `running` hands the simulator.

For the factor models the estimate of a waiting job is F x its nominal runtime (on a
median GPU, in one node), and a running job is expected to end F x its true runtime after
it started, the way a time limit set with the same margin over the truth would say.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from pal_slurm.errors import InputError
from pal_slurm.placement.belief import Running
from pal_slurm.simulate.traces import TraceJob

Kind = Literal["exact", "limit", "factor", "uniform", "learned"]


@dataclass(frozen=True)
class RuntimeEstimate:
    kind: Kind = "exact"
    factor: float = 1.0
    lo: float = 1.0
    hi: float = 1.0
    seed: int = 0
    #: kind "learned": job id -> learned runtime (trace seconds)
    learned: Mapping[str, float] = field(default_factory=dict, hash=False, compare=False)
    #: kind "learned": how long after start + learned runtime a running job is still expected,
    #: not overdue (trace seconds; the placer's LEARNED_END_GRACE_S on the trace's clock)
    grace_s: float = 0.0

    @classmethod
    def from_learned(cls, learned: Mapping[str, float], grace_s: float = 0.0) -> RuntimeEstimate:
        """The placer's estimates: `learned` (job id -> trace seconds) capped by each job's
        limit; a running job is expected `grace_s` after its start + learned runtime."""
        return cls(kind="learned", learned=dict(learned), grace_s=grace_s)

    def factor_of(self, job: TraceJob) -> float:
        if self.kind == "factor":
            return self.factor
        if self.kind == "uniform":
            return random.Random(f"{self.seed}:{job.job_id}").uniform(self.lo, self.hi)
        return 1.0

    def before_start(self, job: TraceJob) -> float:
        """The runtime a policy is told for a waiting job (seconds on a median GPU)."""
        if self.kind == "limit":
            return self._limit(job)
        if self.kind == "learned":
            return self._learned(job)
        return job.nominal_runtime_s * self.factor_of(job)

    def running(self, job: TraceJob, start: float, true_runtime_s: float) -> Running:
        """What the scheduler knows of `job` once it runs from `start` (as the scheduler sees it):
        for ``learned``, its learned runtime (with `grace_s`) and its limit, as the placer knows
        them (`placement/belief.Running` says which end it is expected at, and until when); for
        ``limit``, its limit (Slurm's EndTime); for the factor models, F x its true runtime
        (a factor below 1 leaves a job overdue: policies see it as due)."""
        if self.kind == "learned":
            return Running(start, start + self._limit(job), learned_s=self._mine(job), grace_s=self.grace_s)
        if self.kind == "limit":
            return Running(start, start + self._limit(job))
        return Running(start, start + true_runtime_s * self.factor_of(job))

    def _mine(self, job: TraceJob) -> float | None:
        """The runtime learned for `job`, None where none was."""
        mine = self.learned.get(job.job_id)
        return mine if mine is not None and mine > 0 else None

    def _learned(self, job: TraceJob) -> float:
        limit = self._limit(job)
        mine = self._mine(job)
        return min(mine, limit) if mine is not None else limit

    def _limit(self, job: TraceJob) -> float:
        if job.limit_s is None:
            raise InputError(f"--runtime-estimate limit needs a time limit for every job; job {job.job_id} has "
                             "none (export the trace with sacct -P --format=...,Timelimit)",
                             source=job.source, line=job.line)
        return job.limit_s

    def check(self, jobs: Iterable[TraceJob]) -> None:
        """InputError naming the first job this model cannot give an estimate for (before any run)."""
        if self.kind in ("limit", "learned"):
            for job in jobs:
                self._limit(job)

    def describe(self) -> str:
        return {"exact": "exact", "limit": "limit", "factor": f"x{self.factor:g}",
                "uniform": f"uniform:{self.lo:g}:{self.hi:g}:{self.seed}",
                "learned": f"learned ({len(self.learned)} jobs, else limit)"}[self.kind]


EXACT = RuntimeEstimate()


def parse_runtime_estimate(text: str) -> RuntimeEstimate:
    """`exact`, `limit`, `x2`, `uniform:1:5` or `uniform:1:5:7`; ValueError naming the problem."""
    t = text.strip().lower()
    if t in ("exact", "limit"):
        return RuntimeEstimate(kind=t)  # type: ignore[arg-type]
    m = re.fullmatch(r"x(\d+(?:\.\d+)?)", t)
    if m:
        f = float(m.group(1))
        if f <= 0:
            raise ValueError(f"runtime estimate {text!r}: the factor must be positive")
        return RuntimeEstimate(kind="factor", factor=f)
    m = re.fullmatch(r"uniform:(\d+(?:\.\d+)?):(\d+(?:\.\d+)?)(?::(\d+))?", t)
    if m:
        lo, hi = float(m.group(1)), float(m.group(2))
        if not 0 < lo <= hi:
            raise ValueError(f"runtime estimate {text!r}: need 0 < LO <= HI")
        return RuntimeEstimate(kind="uniform", lo=lo, hi=hi, seed=int(m.group(3) or 0))
    raise ValueError(f"runtime estimate {text!r}: expected exact, limit, xF (e.g. x2) or uniform:LO:HI[:SEED]")
