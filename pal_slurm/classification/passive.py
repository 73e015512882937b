"""Passive speed: each GPU's slowdown factor per job class, learned from the run times of finished
jobs, as evidence independent of the benchmarks (docs/classification.md, "Passive speed and
fail-slow flags"). Pure: runs in, estimates out; no clock, no database.

**The model.** Runs of one *fingerprint* are the same work, so a run's time over its fingerprint's
typical-GPU time (its *baseline*) is the pace of the GPUs it ran on; a synchronous multi-GPU job
runs at the pace of its slowest GPU, so ``run time = baseline x max(factor of its GPUs) x noise``.
Baselines come from the runs themselves (medians of the runs, each normalised by the factor of the
GPU that paced it), never from the benchmark factors, so the estimate is a second, independent
measurement to set beside the benchmark's (`failslow.disagreement`).

**Multi-GPU jobs: attribution to the GPU estimated slowest.** A job's time says how slow its
slowest GPU is and only bounds the others from above. The fit (`passive_fit`, median polish with
max attribution) gives each run's pace to the GPU currently estimated slowest of its GPUs, and only
when that estimate beats every other GPU's of the job by more than `PassiveSettings.margin`; a run
whose top two are closer is evidence for nobody (it still shapes its fingerprint's baseline).
Why: giving a 16-GPU job's pace to all 16 GPUs would call 15 typical GPUs slow whenever one is, and
giving it to a guessed one among near-equals would bias that one upward by the gap. A GPU that never
clearly set a job's pace gets no estimate but a `PassiveBound`: the median pace of its runs (its factor
is at most about this) and the GPUs it never ran without. Slurm's first fit gives a node's small jobs
the same slots again and again, and a whole-node job all of them: GPUs that always run together cannot
be told apart by run times, only bounded together.

**Uncertainty** (`low`, `high`: about 95 %, ``z = 1.96``): the median of n paces on a log scale has
a standard error of about 1.2533 x sigma / sqrt(n), sigma from the MAD of the GPU's own log paces
(1.4826 x MAD), never below `min_sigma` (a GPU with three identical runs has not shown zero noise);
the half-width is z x sqrt(se^2 + noise_floor^2), the floor standing for what the paces share and
more runs do not average away (the baselines' own error, drift).

**Isolation.** One GPU's evidence moves only that GPU's estimate: a GPU outside the typical band
never votes on a baseline (nor does one whose factor is only a starting point), every other statistic
is a median, and ties go by GPU name, never by input order. Exactly: making a GPU that is already
outside the band and paces every job it runs slower, or giving it more runs of its fingerprints,
leaves every other GPU's estimate unchanged to the bit (tests/classification/test_passive.py).

Rows that cannot be a run of finished work are skipped and counted by reason (`SKIP_REASONS`),
never raised on: a run time that is not a positive number, one beyond the time limit + grace, one
that reached its limit (killed: its work was not done, so its time says nothing of its pace), no
GPUs, no fingerprint or class; runs whose class is not their fingerprint's usual one; and the runs
of a fingerprint that always ran on the same GPUs (nothing to compare them with).
"""

from __future__ import annotations

import math
from array import array
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

from pal_slurm.classification.passive_fit import Fit, FitSettings, Runs, bounds, group_median, polish

__all__ = ["SKIP_REASONS", "JobRun", "PassiveBound", "PassiveEstimate", "PassiveResult", "PassiveSettings",
           "estimate"]

SKIP_NO_GPUS = "no GPUs"
SKIP_RUNTIME_NOT_NUMBER = "run time not a finite number"
SKIP_RUNTIME_NOT_POSITIVE = "run time <= 0"
SKIP_BEYOND_LIMIT = "beyond time limit + grace"
SKIP_REACHED_LIMIT = "reached its time limit"
SKIP_NO_KEY = "no fingerprint or class"
SKIP_CLASS_CONFLICT = "class differs from its fingerprint's"
SKIP_ONE_PLACEMENT = "fingerprint always on the same GPUs"
#: every reason `PassiveResult.skipped` may count, in the order rows are checked
SKIP_REASONS = (SKIP_NO_GPUS, SKIP_RUNTIME_NOT_NUMBER, SKIP_RUNTIME_NOT_POSITIVE, SKIP_BEYOND_LIMIT,
                SKIP_REACHED_LIMIT, SKIP_NO_KEY, SKIP_CLASS_CONFLICT, SKIP_ONE_PLACEMENT)

_Z_MAD = 1.4826  # sigma of a normal = 1.4826 x its MAD
_MEDIAN_EFFICIENCY = 1.2533  # se of a normal sample's median = sqrt(pi / 2) x sigma / sqrt(n)


@dataclass(frozen=True, slots=True)
class JobRun:
    """One finished job: `fingerprint` keys recurring work (runs of one fingerprint are the same
    work), `gpus` the GPU keys it ran on (the caller's "node:minor"), `ended_at` epoch seconds."""

    job_id: str
    fingerprint: str
    job_class: str
    gpus: tuple[str, ...]
    runtime_s: float
    ended_at: float
    time_limit_s: float | None = None


@dataclass(frozen=True, slots=True)
class PassiveSettings:
    """Knobs of `estimate`.

    Attributes:
        min_paced: paced runs a GPU needs for an estimate of a class.
        time_limit_grace_s: a run longer than its limit by more than this cannot have happened
            (Slurm kills at the limit, after KillWait); one at or within it was killed: censored.
        noise_floor: relative, added in quadrature to the interval's half-width (log scale).
        min_sigma: the least run-to-run noise (log scale) a GPU is taken to have.
        z: the interval's normal quantile (1.96: about 95 %).
        margin: a multi-GPU run is attributed to its estimated-slowest GPU only when that GPU's
            estimate beats the next by more than this (relative).
        typical_band: a GPU votes on baselines while its factor is within [1/(1+band), 1+band].
        max_iterations: of the median polish.
    """

    min_paced: int = 3
    time_limit_grace_s: float = 60.0
    noise_floor: float = 0.005
    min_sigma: float = 0.02
    z: float = 1.96
    margin: float = 0.02
    typical_band: float = 0.15
    max_iterations: int = 8

    def __post_init__(self) -> None:
        checks = {"min_paced": self.min_paced >= 1, "time_limit_grace_s": self.time_limit_grace_s >= 0,
                  "noise_floor": self.noise_floor >= 0, "min_sigma": self.min_sigma >= 0, "z": self.z > 0,
                  "margin": self.margin >= 0, "typical_band": self.typical_band > 0,
                  "max_iterations": self.max_iterations >= 1}
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            raise ValueError(f"PassiveSettings: {', '.join(f'{n}={getattr(self, n)!r}' for n in bad)} out of range "
                             "(min_paced, max_iterations >= 1; z, typical_band > 0; the rest >= 0)")

    @property
    def fit(self) -> FitSettings:
        return FitSettings(margin=self.margin, typical_band=self.typical_band, min_paced=self.min_paced,
                           max_iterations=self.max_iterations)


@dataclass(frozen=True, slots=True)
class PassiveEstimate:
    """One GPU's passive factor for one class: 1.0 = the fleet's typical GPU for the class, higher
    = slower; `low`-`high` its interval (about 95 %); `jobs` the finished runs of the class it took
    part in, `paced` those whose pace it is taken to have set (its evidence), `gpu_hours` the GPU
    hours of the paced runs on this GPU."""

    gpu: str
    job_class: str
    factor: float
    low: float
    high: float
    jobs: int
    paced: int
    gpu_hours: float


@dataclass(frozen=True, slots=True)
class PassiveBound:
    """A GPU that ran jobs of the class but got no estimate: it never clearly set a job's pace.
    `upper`: the median pace of the runs it was in (its factor is at most about this);
    `always_with`: the other GPUs that were in every one of those runs. A GPU that always runs in
    the same company (Slurm's first fit gives a node's 2-GPU jobs the same two slots, a whole-node
    job all eight) cannot be told apart from it by run times: a high `upper` with company says one
    of them is slow, and the benchmark says which."""

    gpu: str
    job_class: str
    upper: float
    jobs: int
    always_with: tuple[str, ...]


@dataclass(frozen=True)
class PassiveResult:
    """Estimates sorted by (GPU, class); skipped rows by reason; fingerprint -> typical-GPU time (s);
    the GPUs without an estimate, with what bounds them, sorted like the estimates."""

    estimates: tuple[PassiveEstimate, ...]
    skipped: Mapping[str, int]
    baselines: Mapping[str, float]
    bounds: tuple[PassiveBound, ...] = ()

    def of(self, gpu: str, job_class: str) -> PassiveEstimate | None:
        """The estimate of `gpu` for `job_class`, None when it has none."""
        return next((e for e in self.estimates if e.gpu == gpu and e.job_class == job_class), None)

    def bound_of(self, gpu: str, job_class: str) -> PassiveBound | None:
        """What bounds `gpu` for `job_class` where it has no estimate, None otherwise."""
        return next((b for b in self.bounds if b.gpu == gpu and b.job_class == job_class), None)


@dataclass
class _Table:
    """The valid rows as flat arrays, keys as indexes; GPU ids get their names' sorted order."""

    t: array = field(default_factory=lambda: array("d"))
    fp: array = field(default_factory=lambda: array("q"))
    cls: array = field(default_factory=lambda: array("q"))
    place: array = field(default_factory=lambda: array("q"))
    sizes: array = field(default_factory=lambda: array("q"))
    idx: array = field(default_factory=lambda: array("q"))
    fps: dict[str, int] = field(default_factory=dict)
    classes: dict[str, int] = field(default_factory=dict)
    gpus: dict[str, int] = field(default_factory=dict)
    places: dict[tuple[int, ...], int] = field(default_factory=dict)
    skipped: Counter[str] = field(default_factory=Counter)

    def add(self, run: JobRun, s: PassiveSettings) -> None:
        runtime, reason = _check(run, s)
        if reason:
            self.skipped[reason] += 1
            return
        ids = tuple(sorted({self.gpus.setdefault(g, len(self.gpus)) for g in run.gpus}))
        self.t.append(runtime)
        self.fp.append(self.fps.setdefault(run.fingerprint, len(self.fps)))
        self.cls.append(self.classes.setdefault(run.job_class, len(self.classes)))
        self.place.append(self.places.setdefault(ids, len(self.places)))
        self.sizes.append(len(ids))
        self.idx.extend(ids)


def _check(run: JobRun, s: PassiveSettings) -> tuple[float, str | None]:
    """(the run time, None) or (nan, why the row is skipped); a blank GPU key counts as no GPUs."""
    gpus = run.gpus
    if not gpus or isinstance(gpus, str) or not all(isinstance(g, str) and g for g in gpus):
        return math.nan, SKIP_NO_GPUS
    try:
        runtime = float(run.runtime_s)
    except (TypeError, ValueError):
        return math.nan, SKIP_RUNTIME_NOT_NUMBER
    if not math.isfinite(runtime):
        return math.nan, SKIP_RUNTIME_NOT_NUMBER
    if runtime <= 0:
        return math.nan, SKIP_RUNTIME_NOT_POSITIVE
    limit = run.time_limit_s
    if isinstance(limit, (int, float)) and math.isfinite(limit) and limit > 0:
        if runtime > limit + s.time_limit_grace_s:
            return math.nan, SKIP_BEYOND_LIMIT
        if runtime >= limit:
            return math.nan, SKIP_REACHED_LIMIT
    if not (isinstance(run.fingerprint, str) and run.fingerprint and isinstance(run.job_class, str)
            and run.job_class):
        return math.nan, SKIP_NO_KEY
    return runtime, None


@dataclass(frozen=True)
class _Arrays:
    """The table as numpy, after the rules that need every row (class conflicts, one placement)."""

    t: np.ndarray
    fp: np.ndarray
    cls: np.ndarray
    sizes: np.ndarray
    starts: np.ndarray
    idx: np.ndarray
    keep: np.ndarray  # run -> still valid


def _arrays(tab: _Table) -> _Arrays:
    t = np.frombuffer(tab.t, dtype=np.float64)
    fp, cls, place = (np.frombuffer(a, dtype=np.int64) for a in (tab.fp, tab.cls, tab.place))
    sizes = np.frombuffer(tab.sizes, dtype=np.int64)
    names = list(tab.gpus)
    rank = np.empty(len(names), dtype=np.int64)
    rank[sorted(range(len(names)), key=names.__getitem__)] = np.arange(len(names))
    idx = rank[np.frombuffer(tab.idx, dtype=np.int64)]
    n_cls = max(len(tab.classes), 1)
    counts = np.bincount(fp * n_cls + cls, minlength=len(tab.fps) * n_cls).reshape(-1, n_cls)
    by_name = np.argsort(np.array(list(tab.classes) or [""]))
    usual = by_name[np.argmax(counts[:, by_name], axis=1)]  # most runs; the first class name on a tie
    keep = cls == usual[fp]
    tab.skipped[SKIP_CLASS_CONFLICT] += int((~keep).sum())
    pairs = np.unique(fp[keep] * max(len(tab.places), 1) + place[keep])
    placements = np.bincount(pairs // max(len(tab.places), 1), minlength=len(tab.fps))
    lone = keep & (placements[fp] < 2)
    tab.skipped[SKIP_ONE_PLACEMENT] += int(lone.sum())
    return _Arrays(t=t, fp=fp, cls=cls, sizes=sizes, starts=np.cumsum(sizes) - sizes, idx=idx, keep=keep & ~lone)


def _class_runs(a: _Arrays, c: int, n_gpu: int) -> tuple[Runs, np.ndarray]:
    """Class c's valid runs, and the table's fingerprint id of each local one."""
    sel = a.keep & (a.cls == c)
    fp_global, fp_local = np.unique(a.fp[sel], return_inverse=True)
    sizes = a.sizes[sel]
    members = np.repeat(sel, a.sizes)
    runs = Runs(t=a.t[sel], fp=fp_local.ravel(), starts=np.cumsum(sizes) - sizes, sizes=sizes, idx=a.idx[members],
                n_fp=fp_global.size, n_gpu=n_gpu)
    return runs, fp_global


def _group_sum(values: np.ndarray, groups: np.ndarray, n_groups: int) -> np.ndarray:
    """Per group, the sum of its values added in sorted order: the same bits in any input order."""
    out = np.zeros(n_groups)
    if values.size:
        order = np.lexsort((values, groups))
        counts = np.bincount(groups, minlength=n_groups)
        has = counts > 0
        out[has] = np.add.reduceat(values[order], (np.cumsum(counts) - counts)[has])
    return out


def _estimates(fit: Fit, runs: Runs, cls: str, gpu_names: list[str], s: PassiveSettings) -> list[PassiveEstimate]:
    paced_runs = fit.pacer >= 0
    who = fit.pacer[paced_runs]
    log_pace = np.log(fit.pace[paced_runs])
    paced = np.bincount(who, minlength=runs.n_gpu)
    hours = _group_sum(runs.t[paced_runs], who, runs.n_gpu) / 3600.0
    centre = np.log(fit.factor)
    mad = group_median(np.abs(log_pace - centre[who]), who, runs.n_gpu)
    out = []
    for g in np.flatnonzero(paced >= max(s.min_paced, 1)):
        sigma = max(_Z_MAD * float(mad[g]), s.min_sigma)
        se = _MEDIAN_EFFICIENCY * sigma / math.sqrt(paced[g])
        half = s.z * math.hypot(se, s.noise_floor)
        f = float(fit.factor[g])
        out.append(PassiveEstimate(gpu=gpu_names[g], job_class=cls, factor=f, low=f * math.exp(-half),
                                   high=f * math.exp(half), jobs=int(runs.jobs[g]), paced=int(paced[g]),
                                   gpu_hours=float(hours[g])))
    return out


def _bounds(fit: Fit, runs: Runs, cls: str, gpu_names: list[str], s: PassiveSettings) -> list[PassiveBound]:
    paced = np.bincount(fit.pacer[fit.pacer >= 0], minlength=runs.n_gpu)
    gpus = np.flatnonzero((runs.jobs > 0) & (paced < max(s.min_paced, 1)))
    upper, company = bounds(fit, runs, gpus)
    return [PassiveBound(gpu=gpu_names[g], job_class=cls, upper=float(u), jobs=int(runs.jobs[g]),
                         always_with=tuple(gpu_names[h] for h in mates.tolist() if h != g))
            for g, u, mates in zip(gpus.tolist(), upper.tolist(), company)]


def estimate(runs: Iterable[JobRun], settings: PassiveSettings = PassiveSettings()) -> PassiveResult:
    """Every GPU's passive factor per job class from finished runs (module doc), with the
    baselines it was measured against and the rows it skipped."""
    tab = _Table()
    for run in runs:
        tab.add(run, settings)
    a = _arrays(tab)
    gpu_names = sorted(tab.gpus)
    fp_names = list(tab.fps)
    estimates: list[PassiveEstimate] = []
    bounded: list[PassiveBound] = []
    baselines: dict[str, float] = {}
    for cls_name, c in tab.classes.items():
        class_runs, fp_ids = _class_runs(a, c, len(gpu_names))
        if class_runs.t.size == 0:
            continue
        fit = polish(class_runs, settings.fit)
        estimates += _estimates(fit, class_runs, cls_name, gpu_names, settings)
        bounded += _bounds(fit, class_runs, cls_name, gpu_names, settings)
        baselines.update((fp_names[k], float(b)) for k, b in zip(fp_ids.tolist(), fit.baseline.tolist()))
    estimates.sort(key=lambda e: (e.gpu, e.job_class))
    bounded.sort(key=lambda b: (b.gpu, b.job_class))
    skipped = {r: tab.skipped[r] for r in SKIP_REASONS if tab.skipped[r]}
    return PassiveResult(estimates=tuple(estimates), skipped=MappingProxyType(skipped),
                         baselines=MappingProxyType(dict(sorted(baselines.items()))), bounds=tuple(bounded))
