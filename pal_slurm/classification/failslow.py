"""Fail-slow flags: a GPU that turns slower than its benchmark factor says, caught from the stream
of finished jobs (docs/classification.md, "Passive speed and fail-slow flags"). Pure: jobs in,
flags out; the caller owns the clock, the store and what a flag leads to.

**The test, per GPU: a CUSUM of log-likelihood ratios** (Page's CUSUM). A job of fingerprint
baseline b (its typical-GPU time) on GPUs G with benchmark factors B for its class has log pace
``y = ln(runtime / b)``. Under H0 every GPU runs at its benchmark, so the job's expected log pace
is ``m0 = ln max_G B``; under H1(g, rho) GPU g runs rho times slower, so it is
``m1 = ln max(rho B_g, max_{h != g} B_h)``, rho anywhere from `slow_ratio` (r) to `max_ratio` (R)
and fitted to the job (a generalized likelihood ratio: the H1 closest to the pace,
``m1* = clamp(y, lo, hi)``, lo and hi its m1 at r and R). With Gaussian noise of `sigma` on the
log pace, the job's evidence for H1(g) is

    llr = ((y - m0)^2 - (y - m1*)^2) / (2 sigma^2),

which for a job no slower than r predicts is the fixed-ratio ``(d / sigma^2) (y - m0 - d / 2)``,
``d = lo - m0``. A job whose pace g's slowdown by r would not change (``d = 0``: a slower mate sets
it) gives g no evidence at all: only a larger rho could, and a fit unpenalized there would read
every bit of noise above the expected pace as evidence. Fitting rho matters beside mates: with it
fixed, a GPU turning 1.5x slow beside a mate of a higher benchmark is explained better by the mate
at 1.3x, and the mate is flagged instead. g's statistic is ``S = max(0, S + min(llr, max_step))``,
one per GPU over the jobs of every watched class (`classes`: the compute classes A-C, whose jobs a
lower clock slows; class D's memory-bound jobs are left out, they would clear a GPU that is slow for
the others).

**Multi-GPU jobs.** A job at its expected pace clears every GPU whose slowdown it would have shown.
A slow job is evidence for each GPU whose slowdown could explain it, in proportion to how well it
does (the LLR is largest for the GPU whose H1 predicts the observed pace): under a single slow GPU,
each GPU's sum is the log-likelihood of "this one is slow", so the slowed GPU, slow in every job it
runs, leads its mates of the moment, whose other jobs clear them. When ``S >= threshold`` (h) a
flag is raised for the job's GPUs over h whose uncapped sum is within `company_margin` of the job's
largest: the likely culprits, several only when run times cannot tell them apart (a node that only
runs whole-node jobs: they share every job), each flag naming the others (`with_gpus`). Once a GPU
is flagged it is taken to run at its slowed pace (its benchmark factor x its flag's jobs' median
pace over that factor, within [r, R]) in the jobs after: the slow jobs it is in are then expected,
and are evidence against a mate only where they run slower still.

A flag names the GPU, the class of the job that crossed h, when, S, the jobs since S last stood at
0, the median pace they ran at and the benchmark factor.

**Threshold, false flags and delay (the ARL trade-off).** For an uncapped LLR CUSUM the mean
number of evidence-bearing jobs between false flags on a healthy GPU is at least e^h (Wald's
bound; capping from above only lengthens it), and the mean delay after a change is about
(h + overshoot) / KL jobs, KL = d^2 / (2 sigma^2) per job (Lorden). So false flags fall
exponentially in h while the delay grows linearly. The cap sets the delay's floor and the
robustness: no fewer than ceil(h / max_step) jobs can raise a flag, so one or two jobs slow for
reasons not the GPU's (I/O, a bad input) cannot. Defaults: r = 1.3; sigma = 0.05 (run-to-run
noise of 2-3 % plus the baseline's and the benchmark's errors, rounded up); h = 12, max_step = 4:
at least three jobs, and e^12 ~ 160,000 evidence-bearing jobs between false flags under the model.
A one-GPU job on a GPU 1.3x slow carries KL = 13.8 (capped at 4), so three such jobs flag it; in
a job where the GPU is not the slowest by benchmark its slowdown shows less, and it takes more.
bench/failslow.py measures both sides (docs/classification.md has the figures): with h = 8 a
GPU is flagged a job sooner, and two odd jobs in a row on one GPU (or one company) flag it.

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

__all__ = ["COMPUTE_CLASSES", "FailSlowFlag", "FailSlowMonitor", "FailSlowSettings", "Observation", "detect",
           "disagreement", "observations"]

IGNORED_UNUSABLE = "run time or baseline not a positive number"
IGNORED_LIMIT = "reached or beyond its time limit"
IGNORED_NO_GPUS = "no GPUs"
IGNORED_NO_BENCHMARK = "a GPU without a benchmark factor"
IGNORED_CLASS = "a class not watched"
#: the classes whose jobs a slowed GPU slows: those profiled by a compute benchmark (ResNet-50,
#: BERT); class D's memory-bound work hardly sees a lower clock (pal_slurm.simulate.fleets does
#: the same with its outliers)
COMPUTE_CLASSES = ("A", "B", "C")
#: jobs remembered per GPU and class while its statistic is above 0 (a flag names at most these)
MAX_JOBS = 64


@dataclass(frozen=True, slots=True)
class FailSlowSettings:
    """Knobs of the monitor (module doc): the slowdown to detect, the noise of a job's log pace,
    the threshold h, the cap on one job's evidence and how far below the most suspected GPU of a
    job another's evidence may lie and still be flagged with it, all three in log-likelihood units."""

    slow_ratio: float = 1.3
    #: the largest slowdown H1 considers (the ratio is fitted within [slow_ratio, max_ratio] per job)
    max_ratio: float = 2.0
    sigma: float = 0.05
    threshold: float = 12.0
    max_step: float = 4.0
    company_margin: float = 4.0
    classes: tuple[str, ...] = COMPUTE_CLASSES

    def __post_init__(self) -> None:
        checks = {"slow_ratio": math.isfinite(self.slow_ratio) and self.slow_ratio > 1,
                  "max_ratio": math.isfinite(self.max_ratio) and self.max_ratio >= self.slow_ratio,
                  "sigma": math.isfinite(self.sigma) and self.sigma > 0,
                  "threshold": math.isfinite(self.threshold) and self.threshold > 0,
                  "max_step": self.max_step > 0, "company_margin": self.company_margin >= 0}
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            raise ValueError(f"FailSlowSettings: {', '.join(f'{n}={getattr(self, n)!r}' for n in bad)} out of range "
                             "(slow_ratio > 1; max_ratio >= slow_ratio; sigma, threshold, max_step > 0; company_margin >= 0)")


@dataclass(frozen=True, slots=True)
class FailSlowFlag:
    """A GPU caught slow for a class: `at` the end of the job that crossed the threshold, `cusum`
    the statistic then, `jobs` the jobs since it last stood at 0 (the newest `MAX_JOBS`),
    `passive_factor` the median pace those jobs ran at, `benchmark_factor` what the benchmark says,
    `with_gpus` the GPUs flagged by the same job on evidence equal to this one's (run times could
    not tell them apart: one of them is slow, the benchmark says which)."""

    gpu: str
    job_class: str
    at: float
    cusum: float
    jobs: tuple[str, ...]
    passive_factor: float
    benchmark_factor: float
    with_gpus: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Observation:
    """One finished job as the monitor reads it: the run, its fingerprint's baseline (typical-GPU
    time, s) and the benchmark factor of each of its GPUs for its class."""

    run: JobRun
    baseline_s: float
    benchmark: Mapping[str, float]


@dataclass
class _Track:
    """One GPU: its statistic (capped steps), the uncapped sum of the same steps, and
    the jobs (id, pace), all since the statistic last stood at 0."""

    s: float = 0.0
    raw: float = 0.0
    jobs: deque[tuple[str, float]] = field(default_factory=lambda: deque(maxlen=MAX_JOBS))

    def add(self, llr: float, cap: float, job_id: str, pace: float) -> None:
        self.s = max(0.0, self.s + min(llr, cap))
        if self.s == 0.0:
            self.raw = 0.0
            self.jobs.clear()
        else:
            self.raw += llr
            self.jobs.append((job_id, pace))


def _ranges(factors: list[float], low: float, high: float) -> list[tuple[float, float]]:
    """Per GPU, the log pace its slowdown by `low` and by `high` would give the job, less the
    expected log pace: (ln max(low f_g, the others' max), the same at `high`) - ln max(all), each
    at least 0 (a first 0: a slowdown by `low` would not change the job's pace, and the job is no
    evidence about the GPU: only the range's upper end could, and an unpenalized fit would read
    every bit of noise above the expected pace as evidence)."""
    top = max(factors)
    first = factors.index(top)
    second = max((f for i, f in enumerate(factors) if i != first), default=-math.inf)
    out = []
    for i, f in enumerate(factors):
        others = second if i == first else top
        out.append((max(0.0, math.log(max(low * f, others)) - math.log(top)),
                    max(0.0, math.log(max(high * f, others)) - math.log(top))))
    return out


class FailSlowMonitor:
    """The CUSUM of every GPU, fed finished jobs in end-time order (module doc)."""

    def __init__(self, settings: FailSlowSettings = FailSlowSettings()) -> None:
        self.settings = settings
        self._tracks: dict[str, _Track] = {}
        self._open: dict[str, FailSlowFlag] = {}
        self.ignored: Counter[str] = Counter()

    @property
    def open_flags(self) -> Mapping[str, FailSlowFlag]:
        """GPU -> its open flag."""
        return dict(self._open)

    def statistic(self, gpu: str) -> float:
        track = self._tracks.get(gpu)
        return track.s if track else 0.0

    def clear(self, gpu: str) -> FailSlowFlag | None:
        """Close `gpu`'s flag (returned, None if it had none) and restart its statistics from 0."""
        self._tracks.pop(gpu, None)
        return self._open.pop(gpu, None)

    def observe(self, run: JobRun, baseline_s: float, benchmark: Mapping[str, float]) -> list[FailSlowFlag]:
        """Update the statistics of `run`'s GPUs; the flags it raises (none for a GPU already flagged)."""
        gpus = list(dict.fromkeys(run.gpus))
        why = self._unusable(run, baseline_s, benchmark, gpus)
        if why:
            self.ignored[why] += 1
            return []
        pace = run.runtime_s / baseline_s
        # a flagged GPU is taken to run at its slowed pace: the slow jobs it is in are expected
        factors = [float(benchmark[g]) * (self._ratio(self._open[g]) if g in self._open else 1.0) for g in gpus]
        evidence = self._evidence(pace, factors, gpus)
        for g, _, llr in evidence:
            self._tracks.setdefault(g, _Track()).add(llr, self.settings.max_step, run.job_id, pace)
        return self._flags(run, evidence)

    def _evidence(self, pace: float, factors: list[float], gpus: list[str]) -> list[tuple[str, float, float]]:
        """(GPU, benchmark factor, LLR) of each GPU whose slowdown would change the job's pace: the
        generalized LLR, H1's ratio fitted within [slow_ratio, max_ratio] (module doc)."""
        y = math.log(pace) - math.log(max(factors))
        two_var = 2.0 * self.settings.sigma ** 2
        st = self.settings
        return [(g, f, (y * y - (y - min(max(y, lo), hi)) ** 2) / two_var)
                for g, f, (lo, hi) in zip(gpus, factors, _ranges(factors, st.slow_ratio, st.max_ratio)) if lo > 0.0]

    def _ratio(self, flag: FailSlowFlag) -> float:
        """How much slower a flagged GPU is taken to run: its jobs' median pace over its benchmark
        factor, within [slow_ratio, max_ratio]."""
        st = self.settings
        return min(st.max_ratio, max(st.slow_ratio, flag.passive_factor / flag.benchmark_factor))

    def _flags(self, run: JobRun, evidence: list[tuple[str, float, float]]) -> list[FailSlowFlag]:
        """Flags for the GPUs over the threshold, not flagged yet, whose uncapped evidence is within
        `company_margin` of the most suspected of the job's GPUs not flagged yet: its likely culprits, named
        together when run times cannot tell them apart."""
        tracks = {g: self._tracks.get(g, _Track()) for g, _, _ in evidence}
        over = [(g, f) for g, f, _ in evidence if tracks[g].s >= self.settings.threshold and g not in self._open]
        if not over:
            return []
        top = max(t.raw for g, t in tracks.items() if g not in self._open)
        culprits = [(g, f) for g, f in over if tracks[g].raw >= top - self.settings.company_margin]
        flags = []
        for g, f in culprits:
            t = tracks[g]
            flags.append(FailSlowFlag(gpu=g, job_class=run.job_class, at=run.ended_at, cusum=t.s,
                                      jobs=tuple(j for j, _ in t.jobs), passive_factor=median(p for _, p in t.jobs),
                                      benchmark_factor=f, with_gpus=tuple(h for h, _ in culprits if h != g)))
            self._open[g] = flags[-1]
        return flags

    def _unusable(self, run: JobRun, baseline_s: float, benchmark: Mapping[str, float], gpus: list[str]) -> str | None:
        t, b = run.runtime_s, baseline_s
        if run.job_class not in self.settings.classes:
            return IGNORED_CLASS
        if not gpus:
            return IGNORED_NO_GPUS
        if not all(isinstance(x, (int, float)) and math.isfinite(x) and x > 0 for x in (t, b)):
            return IGNORED_UNUSABLE
        limit = run.time_limit_s
        if isinstance(limit, (int, float)) and math.isfinite(limit) and limit > 0 and t >= limit:
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
