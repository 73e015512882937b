"""Fail-slow flags on a simulated fleet: false flags when nothing changes, delay when a GPU turns
slow (bench/failslow.py)."""

from __future__ import annotations

import dataclasses
import math
import statistics
from dataclasses import dataclass

import numpy as np

from pal_eval.recurring import (
    EPOCH0,
    Fingerprint,
    Workload,
    draw_fingerprints,
    gpu_keys,
    job_runs,
    simulate,
    trace_of,
)
from pal_eval.targets import Targets
from pal_slurm.classification.failslow import FailSlowSettings, Observation, detect
from pal_slurm.classification.passive import JobRun, estimate
from pal_slurm.placement.model import Cluster
from pal_slurm.simulate.fleets import parametric_from_spec

#: the classes a GPU that turns slow is slowed for (clock-bound work; class D's memory-bound work is not)
SLOWED_CLASSES = ("A", "B", "C")
FALSE_FLAGS_TARGET = 1.0  # per 1,000 GPU-days
JOBS_TARGET = 10
HOURS_TARGET = 24.0


@dataclass(frozen=True)
class Setup:
    """One seed's fleet, fingerprints, benchmark and the baselines learned on a training run."""

    seed: int
    cluster: Cluster
    fingerprints: list[Fingerprint]
    benchmark: dict[str, dict[str, float]]  # class -> GPU key -> benchmark factor
    baselines: dict[str, float]  # fingerprint -> typical-GPU time (s)


@dataclass(frozen=True)
class Delay:
    gpu: str
    jobs: int | None  # its jobs' ends up to and including the flag (None: never flagged)
    hours: float | None
    ends_24h: int  # its jobs' ends in the first 24 h after the onset
    #: hours from the onset to the end of its `need`-th job: the earliest any monitor that needs
    #: that many jobs could flag it (None: it ended fewer)
    bound_hours: float | None = None


def setup(nodes: int, gpus_per_node: int, workload: Workload, seed: int, bench_noise: float) -> Setup:
    """The wide fleet of `seed`, its benchmark (each class's PerfVar x lognormal(`bench_noise`): what a
    profile run measured) and the baselines `estimate` learns from a stable run of the workload."""
    cluster = parametric_from_spec("wide", nodes, gpus_per_node, seed).fleet
    rng = np.random.default_rng(seed + 7)
    keys = gpu_keys(cluster)
    benchmark = {c: dict(zip(keys, (np.array(cluster.perfvar[c]) * np.exp(rng.normal(0, bench_noise, len(keys))))
                             .tolist())) for c in cluster.perfvar}
    fps = draw_fingerprints(workload.fingerprints, seed)
    trace = trace_of(fps, workload, cluster.size, seed)
    learned = estimate(job_runs(trace, simulate(trace, cluster), cluster))
    return Setup(seed, cluster, fps, benchmark, dict(learned.baselines))


def observations(s: Setup, runs: list[JobRun], since: float = -np.inf) -> list[Observation]:
    """The runs that started at or after `since` (simulated seconds), as monitor observations;
    those of a fingerprint the training run learned no baseline for are left out."""
    start = EPOCH0 + since
    return [Observation(r, s.baselines[r.fingerprint], s.benchmark[r.job_class]) for r in runs
            if r.fingerprint in s.baselines and r.ended_at - r.runtime_s >= start]


def stable(s: Setup, workload: Workload, arrivals: int, settings: FailSlowSettings) -> tuple[int, float]:
    """(flags, GPU-days) over a stable run of fresh arrivals."""
    trace = trace_of(s.fingerprints, workload, s.cluster.size, arrivals)
    runs = job_runs(trace, simulate(trace, s.cluster), s.cluster)
    span_days = (max(r.ended_at for r in runs) - EPOCH0) / 86400.0
    flags = detect(observations(s, runs), settings)
    return len(flags), s.cluster.size * span_days


def slowed_cluster(cluster: Cluster, victims: list[int], ratio: float) -> Cluster:
    """`cluster` with the `victims` GPUs `ratio` x slower for the SLOWED_CLASSES."""
    perfvar = {c: tuple(v * ratio if (g in victims and c in SLOWED_CLASSES) else v for g, v in enumerate(pv))
               for c, pv in cluster.perfvar.items()}
    return dataclasses.replace(cluster, perfvar=perfvar)


def turning_slow(s: Setup, workload: Workload, arrivals: int, victims: int, onset_days: float,
                 ratio: float, settings: FailSlowSettings) -> tuple[list[Delay], tuple[int, int]]:
    """`victims` healthy GPUs on distinct nodes run `ratio` x slower; the monitor starts at the
    onset and sees the jobs that start from then on. Each victim's delay, and the flags on other
    GPUs (all of them; those not raised together with a slowed GPU)."""
    cluster = s.cluster
    rng = np.random.default_rng(arrivals)
    healthy_nodes = [n for n, gpus in enumerate(cluster.node_gpus)
                     if all(cluster.perfvar["A"][g] < 1.3 for g in gpus)]
    chosen = rng.choice(healthy_nodes, victims, replace=False)
    ids = [int(rng.choice(cluster.node_gpus[n])) for n in chosen]
    slow = slowed_cluster(cluster, ids, ratio)
    trace = trace_of(s.fingerprints, workload, cluster.size, arrivals)
    runs = job_runs(trace, simulate(trace, slow), slow)
    onset = onset_days * 86400.0
    obs = observations(s, runs, since=onset)
    flags = {f.gpu: f for f in detect(obs, settings)}
    keys = gpu_keys(cluster)
    delays = []
    watched = set(settings.classes)
    need = math.ceil(settings.threshold / settings.max_step)
    for g in (keys[i] for i in ids):
        ends = sorted(o.run.ended_at for o in obs if g in o.run.gpus and o.run.job_class in watched)
        early = sum(e - EPOCH0 - onset <= 86400.0 for e in ends)
        bound = (ends[need - 1] - EPOCH0 - onset) / 3600.0 if len(ends) >= need else None
        f = flags.get(g)
        delays.append(Delay(g, None, None, early, bound) if f is None else
                      Delay(g, sum(e <= f.at for e in ends), (f.at - EPOCH0 - onset) / 3600.0, early, bound))
    named = {d.gpu for d in delays}
    alone = sum(1 for g, f in flags.items() if g not in named and not named & set(f.with_gpus))
    return delays, (sum(1 for g in flags if g not in named), alone)


def run(nodes: int, gpus_per_node: int, workload: Workload, seeds: list[int], victims: int, onset_days: float,
        ratio: float, bench_noise: float, settings: FailSlowSettings) -> int:
    print(f"recurring workload: {workload}; wide fleet {nodes} x {gpus_per_node}; benchmark = PerfVar x lognormal "
          f"{bench_noise:g}; baselines learned on a stable training run; slurm-backfill; monitor {settings}")
    flags, gpu_days, delays, stray, alone = 0, 0.0, [], 0, 0
    for seed in seeds:
        s = setup(nodes, gpus_per_node, workload, seed, bench_noise)
        n, days = stable(s, workload, seed + 100, settings)
        d, (extra, lone) = turning_slow(s, workload, seed + 200, victims, onset_days, ratio, settings)
        flags, gpu_days, delays = flags + n, gpu_days + days, delays + d
        stray, alone = stray + extra, alone + lone
        got = [x for x in d if x.jobs is not None]
        print(f"seed {seed}: stable run {n} flag(s) in {days:.0f} GPU-days; {len(got)} of {len(d)} GPUs turned "
              f"{ratio:g}x slow at day {onset_days:g} flagged, after " +
              ", ".join(f"{x.gpu} {x.jobs} jobs/{x.hours:.1f} h" if x.jobs is not None else f"{x.gpu} NEVER"
                        for x in d) + f"; flags on other GPUs after the onset: {extra} ({lone} not raised together "
              "with a slowed GPU)")
    return report(flags, gpu_days, delays, (stray, alone), math.ceil(settings.threshold / settings.max_step))


def report(flags: int, gpu_days: float, delays: list[Delay], stray: tuple[int, int], need: int) -> int:
    """The figures over every seed, and the targets; `need`: the fewest jobs that can raise a flag."""
    got = [(d, d.jobs, d.hours) for d in delays if d.jobs is not None and d.hours is not None]
    rate = 1000.0 * flags / gpu_days
    print(f"\n(a) stable fleet: {flags} false flag(s) in {gpu_days:.0f} GPU-days = {rate:.2f} per 1,000 GPU-days")
    jobs, hours = [j for _, j, _ in got], [h for _, _, h in got]
    if got:
        print(f"(b) {len(got)} of {len(delays)} slowed GPUs flagged; jobs' ends to the flag: median "
              f"{statistics.median(jobs):g}, worst {max(jobs)}; hours after the onset: median "
              f"{statistics.median(hours):.1f}, worst {max(hours):.1f}")
        print(f"    flags on GPUs not slowed: {stray[0]}, of which {stray[0] - stray[1]} raised together with a "
              f"slowed GPU (mates its jobs could not tell apart from it) and {stray[1]} on their own")
        busy = [(j, h) for d, j, h in got if d.ends_24h >= need]
        print(f"    the {len(busy)} flagged GPUs with >= {need} job ends in the first 24 h (a flag needs at least "
              f"{need} jobs): worst {max(h for _, h in busy):.1f} h, {max(j for j, _ in busy)} jobs; the other "
              f"{len(got) - len(busy)} ended fewer jobs in that day (long jobs: a flag waits for job ends)" if busy
              else f"    no flagged GPU had {need} job ends in the first 24 h")
        bounded = [(d, h) for d, _, h in got if d.bound_hours is not None]
        if bounded:
            late = [(d, h) for d, h in bounded if h > HOURS_TARGET]
            beyond = sorted(h - (d.bound_hours or 0.0) for d, h in bounded)
            print(f"    earliest possible flag (the end of a GPU's {need}th job after the onset): over "
                  f"{HOURS_TARGET:g} h for {sum(1 for d, _ in bounded if (d.bound_hours or 0) > HOURS_TARGET)} of "
                  f"{len(bounded)} GPUs; flagged over {HOURS_TARGET:g} h: {len(late)} ("
                  + ", ".join(f"{d.gpu} at {h:.1f} h, earliest {d.bound_hours:.1f} h" for d, h in late)
                  + f"); flag after the earliest: median {statistics.median(beyond):.1f} h, worst {beyond[-1]:.1f} h")
    targets = Targets()
    targets.check("false flags per 1,000 GPU-days (stable fleet)", rate, "<=", FALSE_FLAGS_TARGET, digits=2)
    targets.state(len(got) == len(delays), f"every slowed GPU flagged: {len(got)} of {len(delays)}")
    if got:
        targets.check("worst jobs' ends to the flag", max(jobs), "<=", JOBS_TARGET, digits=0)
        targets.check("worst hours to the flag", max(hours), "<=", HOURS_TARGET, "h", digits=1)
    return targets.exit_status()
