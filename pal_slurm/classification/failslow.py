"""Fail-slow flags: a GPU that turns slower than its benchmark factor says, caught from the stream
of finished jobs (docs/classification.md, "Passive speed and fail-slow flags"). Pure: jobs in,
flags out; the caller owns the clock, the store and what a flag leads to.

**The test, per GPU and job class: a CUSUM of log-likelihood ratios** (Page's CUSUM). A job of
fingerprint baseline b (its typical-GPU time) on GPUs G with benchmark factors B has log pace
``y = ln(runtime / b)``. Under H0 every GPU runs at its benchmark, so the job's expected log pace
is ``m0 = ln max_G B``; under H1(g) GPU g runs `slow_ratio` (r) times slower, so it is
``m1 = ln max(r B_g, max_{h != g} B_h)``. With Gaussian noise of `sigma` on the log pace, the
job's evidence for H1(g) is

    llr = (d / sigma^2) (y - m0 - d / 2),   d = m1 - m0,

capped at `max_step`. A job whose pace g's slowdown would not change (``d = 0``: a slower mate
sets it either way) gives g no evidence at all. One slow job is evidence for every GPU whose
slowdown could explain it (it cannot say which); only the GPU that is slow in every job it runs
keeps gaining, while its mates of the moment meet healthy jobs elsewhere. g's statistic is ``S = max(0, S + llr)``, and
``S >= threshold`` (h) raises a flag naming the GPU, class, when, S, the jobs since S last stood
at 0 and the median pace they ran at beside the benchmark factor.

**Threshold, false flags and delay (the ARL trade-off).** For an uncapped LLR CUSUM the mean
number of evidence-bearing jobs between false flags on a healthy GPU is at least e^h (Wald's
bound; capping from above only lengthens it), and the mean delay after a change is about
(h + overshoot) / KL jobs, KL = d^2 / (2 sigma^2) per job (Lorden). So false flags fall
exponentially in h while the delay grows linearly. The cap sets the delay's floor and the
robustness: no fewer than ceil(h / max_step) jobs can raise a flag, so one job slow for reasons
not the GPU's (I/O, a bad input) cannot. Defaults: r = 1.3; sigma = 0.05 (run-to-run noise of
2-3 % plus the baseline's and the benchmark's errors, rounded up); h = 12, max_step = 4: at
least three jobs, each at least 4 LLR units of evidence, and e^12 ~ 160,000 evidence-bearing
jobs between false flags under the model. A one-GPU job on a GPU 1.3x slow carries KL = 13.8
(capped at 4), so three such jobs flag it. bench/failslow.py measures both sides: false flags
per 1,000 GPU-days on a stable simulated fleet, and job ends and hours to a flag after a GPU
turns 1.3x slow.

One flag per GPU stays open until `FailSlowMonitor.clear`, which also restarts the GPU's
statistics from 0: a drained and repaired GPU must earn a new flag with new evidence.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from statistics import median
from typing import Literal

from pal_slurm.classification.passive import JobRun, PassiveEstimate

__all__ = ["FailSlowFlag", "FailSlowMonitor", "FailSlowSettings", "Observation", "detect", "disagreement",
           "observations"]

IGNORED_UNUSABLE = "run time or baseline not a positive number"
IGNORED_LIMIT = "reached or beyond its time limit"
IGNORED_NO_GPUS = "no GPUs"
IGNORED_NO_BENCHMARK = "a GPU without a benchmark factor"
#: jobs remembered per GPU and class while its statistic is above 0 (a flag names at most these)
MAX_JOBS = 64


@dataclass(frozen=True, slots=True)
class FailSlowSettings:
    """Knobs of the monitor (module doc): the slowdown to detect, the noise of a job's log pace,
    the threshold h and the cap on one job's evidence, both in log-likelihood units."""

    slow_ratio: float = 1.3
    sigma: float = 0.05
    threshold: float = 12.0
    max_step: float = 4.0
    time_limit_grace_s: float = 60.0


@dataclass(frozen=True, slots=True)
class FailSlowFlag:
    """A GPU caught slow for a class: `at` the end of the job that crossed the threshold, `cusum`
    the statistic then, `jobs` the jobs since it last stood at 0 (the newest `MAX_JOBS`),
    `passive_factor` the median pace those jobs ran at, `benchmark_factor` what the benchmark says."""

    gpu: str
    job_class: str
    at: float
    cusum: float
    jobs: tuple[str, ...]
    passive_factor: float
    benchmark_factor: float


@dataclass(frozen=True, slots=True)
class Observation:
    """One finished job as the monitor reads it: the run, its fingerprint's baseline (typical-GPU
    time, s) and the benchmark factor of each of its GPUs for its class."""

    run: JobRun
    baseline_s: float
    benchmark: Mapping[str, float]


@dataclass
class _Track:
    """One GPU and class: its statistic and the jobs (id, pace) since it last stood at 0."""

    s: float = 0.0
    jobs: deque[tuple[str, float]] = field(default_factory=lambda: deque(maxlen=MAX_JOBS))

    def add(self, llr: float, job_id: str, pace: float) -> None:
        self.s = max(0.0, self.s + llr)
        if self.s == 0.0:
            self.jobs.clear()
        else:
            self.jobs.append((job_id, pace))


def _shifts(factors: list[float], ratio: float) -> list[float]:
    """Per GPU, d = ln max(r f_g, the others' max) - ln max(all): how far its slowdown would move
    the job's pace (0: not at all)."""
    top = max(factors)
    first = factors.index(top)
    second = max((f for i, f in enumerate(factors) if i != first), default=-math.inf)
    out = []
    for i, f in enumerate(factors):
        others = second if i == first else top
        out.append(max(0.0, math.log(max(ratio * f, others)) - math.log(top)))
    return out


class FailSlowMonitor:
    """The CUSUMs of every GPU and class, fed finished jobs in end-time order (module doc)."""

    def __init__(self, settings: FailSlowSettings = FailSlowSettings()) -> None:
        self.settings = settings
        self._tracks: dict[tuple[str, str], _Track] = {}
        self._open: dict[str, FailSlowFlag] = {}
        self.ignored: Counter[str] = Counter()

    @property
    def open_flags(self) -> Mapping[str, FailSlowFlag]:
        """GPU -> its open flag."""
        return dict(self._open)

    def statistic(self, gpu: str, job_class: str) -> float:
        track = self._tracks.get((gpu, job_class))
        return track.s if track else 0.0

    def clear(self, gpu: str) -> FailSlowFlag | None:
        """Close `gpu`'s flag (returned, None if it had none) and restart its statistics from 0."""
        for key in [k for k in self._tracks if k[0] == gpu]:
            del self._tracks[key]
        return self._open.pop(gpu, None)

    def observe(self, run: JobRun, baseline_s: float, benchmark: Mapping[str, float]) -> list[FailSlowFlag]:
        """Update the statistics of `run`'s GPUs; the flags it raises (none for a GPU already flagged)."""
        gpus = list(dict.fromkeys(run.gpus))
        why = self._unusable(run, baseline_s, benchmark, gpus)
        if why:
            self.ignored[why] += 1
            return []
        pace = run.runtime_s / baseline_s
        factors = [float(benchmark[g]) for g in gpus]
        y = math.log(pace) - math.log(max(factors))
        var = self.settings.sigma ** 2
        flags = []
        for g, f, d in zip(gpus, factors, _shifts(factors, self.settings.slow_ratio)):
            if d <= 0.0:
                continue  # g's slowdown would not change this job's pace: no evidence either way
            llr = min(d / var * (y - d / 2.0), self.settings.max_step)
            track = self._tracks.setdefault((g, run.job_class), _Track())
            track.add(llr, run.job_id, pace)
            if track.s >= self.settings.threshold and g not in self._open:
                flag = FailSlowFlag(gpu=g, job_class=run.job_class, at=run.ended_at, cusum=track.s,
                                    jobs=tuple(j for j, _ in track.jobs),
                                    passive_factor=median(p for _, p in track.jobs), benchmark_factor=f)
                self._open[g] = flag
                flags.append(flag)
        return flags

    def _unusable(self, run: JobRun, baseline_s: float, benchmark: Mapping[str, float], gpus: list[str]) -> str | None:
        t, b = run.runtime_s, baseline_s
        if not gpus:
            return IGNORED_NO_GPUS
        if not all(isinstance(x, (int, float)) and math.isfinite(x) and x > 0 for x in (t, b)):
            return IGNORED_UNUSABLE
        limit = run.time_limit_s
        if limit is not None and math.isfinite(limit) and limit > 0 and t >= limit:
            return IGNORED_LIMIT  # killed at its limit: its time is a lower bound, not a pace
        if not all(isinstance(benchmark.get(g), (int, float)) and math.isfinite(benchmark[g]) and benchmark[g] > 0
                   for g in gpus):
            return IGNORED_NO_BENCHMARK  # the job's expected pace is unknown
        return None

    def observe_all(self, observations: Iterable[Observation]) -> list[FailSlowFlag]:
        """Every observation in end-time order (stable: equal ends keep their order); the flags raised."""
        flags: list[FailSlowFlag] = []
        for o in sorted(observations, key=lambda o: o.run.ended_at):
            flags += self.observe(o.run, o.baseline_s, o.benchmark)
        return flags


def observations(runs: Iterable[JobRun], baselines: Mapping[str, float], bench: Mapping[str, Mapping[str, float]],
                 starts: Mapping[str, float]) -> list[Observation]:
    """The runs the monitor reads: those whose fingerprint has a baseline (`PassiveResult.baselines`)
    and every GPU of which has a benchmark factor for the run's class (`bench`: GPU -> class ->
    factor), each GPU's run begun at or after its start (`starts`: GPU -> when its runs count
    against its benchmark, its last profile or the clearing of its last flag; 0 where absent)."""
    out = []
    for run in runs:
        base = baselines.get(run.fingerprint)
        if base is None:
            continue
        factors = {g: bench.get(g, {}).get(run.job_class) for g in run.gpus}
        if any(f is None for f in factors.values()):
            continue
        begun = run.ended_at - run.runtime_s
        if any(begun < starts.get(g, 0.0) for g in run.gpus):
            continue
        out.append(Observation(run, base, {g: float(f) for g, f in factors.items() if f is not None}))
    return out


def detect(observations: Iterable[Observation], settings: FailSlowSettings = FailSlowSettings()) -> list[FailSlowFlag]:
    """The flags a fresh monitor raises over `observations` (sorted by end time here)."""
    return FailSlowMonitor(settings).observe_all(observations)


def disagreement(passive: PassiveEstimate, bench_low: float, bench_high: float) -> Literal["slower", "faster"] | None:
    """Whether a passive estimate disagrees with the benchmark's factor beyond both uncertainties:
    "slower" when its whole interval lies above the benchmark's (``passive.low > bench_high``),
    "faster" when below, None when the two intervals overlap (for display: `pal gpus` and the
    like show a mark, never act on it)."""
    if passive.low > bench_high:
        return "slower"
    if passive.high < bench_low:
        return "faster"
    return None
