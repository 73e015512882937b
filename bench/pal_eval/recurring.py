"""A recurring workload on a simulated fleet, its finished jobs as `passive.JobRun` rows: what
bench/passive_accuracy.py and bench/failslow.py feed the passive estimator and the fail-slow
monitor.

Passive speed needs what sites have and the repository's traces lack: the same work run again and
again (a fingerprint). So a few hundred *fingerprints* are drawn once per seed, each resubmitted
as a Poisson process; each run's work is its fingerprint's base time x run-to-run noise.

The parameters, and where each comes from:

- job sizes, as shares of fingerprints: 1 GPU 45 %, 2 15 %, 4 15 %, 8 (one node) 15 %, whole 8-GPU
  nodes x 2 6 % and x 4 4 %: the LLM-era mix's single-node sizes (pal_slurm.simulate.llm_workload:
  1, 2, 4, 8 GPUs) and its whole-node multi-node jobs, at shares of our choice;
- job class, as shares of fingerprints: A 40 %, B 30 %, C 20 %, D 10 % (our choice: class A, the
  one the fleet's truth is read in, gets the most evidence);
- base run time: lognormal, median 1 h, p90 6 h, clipped to 5 min - 24 h (our choice, between the
  LLM-era mix's evaluation and fine-tuning jobs and its pretraining);
- popularity: fingerprint k (in draw order) is submitted with weight 1 / (k + 1)^0.7 (our choice:
  a few fingerprints recur often, many rarely);
- run-to-run noise: lognormal, sigma 2.5 % of a run's work (the middle of the 2-3 % run-to-run
  spread this benchmark is specified with);
- time limit: base x U[1.6, 3], whole minutes (users pad their limits, docs/simulation.md uses
  U[1, 5]; at least 1.6 so that a run on a 1.5x GPU still ends inside it);
- odd runs (`odd_share`, off by default): that share of runs x U[1.2, 2], the GPU not to blame (a
  job slowed by I/O or its input: the heavy tail a real stream has);
- arrivals: Poisson, the rate giving the offered load (GPU-seconds asked at nominal speed over the
  cluster's), as the LLM-era mix.

The simulation: the event simulator (pal_slurm.simulate.event) under `slurm-backfill` (Slurm's first
fit, blind to variability, so a GPU's jobs are drawn without regard to its speed), FIFO, the time
limits as the scheduler's runtime estimates, locality penalty 1.0 (every fingerprint keeps one
shape, so a penalty would only scale its baseline). GPU keys are "node:slot", as the caller's are.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pal_slurm.classification.passive import JobRun
from pal_slurm.placement.model import Cluster
from pal_slurm.placement.policies import get_policy
from pal_slurm.simulate.estimates import parse_runtime_estimate
from pal_slurm.simulate.event import EventOptions, simulate_events
from pal_slurm.simulate.result import SimResult
from pal_slurm.simulate.traces import Trace, TraceJob

__all__ = ["Fingerprint", "Mix", "Workload", "draw_fingerprints", "gpu_keys", "job_runs", "simulate", "trace_of"]

#: (GPUs, GPUs per node or None, share of fingerprints) on 8-GPU nodes
SIZES = ((1, None, 0.45), (2, None, 0.15), (4, None, 0.15), (8, None, 0.15), (16, 8, 0.06), (32, 8, 0.04))
CLASSES = (("A", 0.4), ("B", 0.3), ("C", 0.2), ("D", 0.1))
MEDIAN_S, P90_S, MIN_S, MAX_S = 3600.0, 6 * 3600.0, 300.0, 24 * 3600.0
Z90 = 1.2815515655446004
ZIPF = 0.7
#: the epoch second the simulated day 0 starts at (2026-01-01, UTC)
EPOCH0 = 1_767_225_600.0


@dataclass(frozen=True)
class Fingerprint:
    name: str
    job_class: str
    gpus: int
    gpus_per_node: int | None
    base_s: float
    limit_s: float
    weight: float


@dataclass(frozen=True)
class Workload:
    """The knobs of one recurring workload."""

    fingerprints: int = 300
    days: float = 14.0
    load: float = 0.8
    noise: float = 0.025
    odd_share: float = 0.0


@dataclass(frozen=True)
class Mix:
    """What fingerprints are drawn from: sizes (GPUs, GPUs per node or None, share), classes
    (class, share), the base time's lognormal (median, p90, clipped to min-max, seconds), and the
    time limit's padding (base x U[lo, hi]). The default is the module doc's table."""

    sizes: tuple[tuple[int, int | None, float], ...] = SIZES
    classes: tuple[tuple[str, float], ...] = CLASSES
    median_s: float = MEDIAN_S
    p90_s: float = P90_S
    min_s: float = MIN_S
    max_s: float = MAX_S
    pad: tuple[float, float] = (1.6, 3.0)


def draw_fingerprints(n: int, seed: int, mix: Mix = Mix()) -> list[Fingerprint]:
    """`n` fingerprints drawn from `mix` (by default the table of the module doc)."""
    rng = np.random.default_rng(seed)
    sizes = rng.choice(len(mix.sizes), size=n, p=[s for *_, s in mix.sizes])
    classes = rng.choice(len(mix.classes), size=n, p=[p for _, p in mix.classes])
    sigma = math.log(mix.p90_s / mix.median_s) / Z90
    base = np.clip(mix.median_s * np.exp(sigma * rng.standard_normal(n)), mix.min_s, mix.max_s).round()
    pad = rng.uniform(*mix.pad, n)
    return [Fingerprint(name=f"fp{k:04d}", job_class=mix.classes[c][0], gpus=mix.sizes[s][0],
                        gpus_per_node=mix.sizes[s][1], base_s=float(b), limit_s=60.0 * math.ceil(b * p / 60.0),
                        weight=(k + 1) ** -ZIPF)
            for k, (s, c, b, p) in enumerate(zip(sizes.tolist(), classes.tolist(), base.tolist(), pad.tolist()))]


def trace_of(fps: list[Fingerprint], w: Workload, n_gpus: int, seed: int) -> Trace:
    """`w.days` of submissions of `fps` at offered load `w.load` on `n_gpus` GPUs, each run's work
    its base time x lognormal(`w.noise`) (x U[1.2, 2] for the odd share)."""
    rng = np.random.default_rng(seed)
    weight = np.array([f.weight for f in fps])
    weight /= weight.sum()
    gpu_s = float(sum(p * f.gpus * f.base_s for p, f in zip(weight, fps)))
    rate = w.load * n_gpus / gpu_s  # jobs per second
    n = int(rng.poisson(rate * w.days * 86400.0))
    submit = np.sort(rng.uniform(0.0, w.days * 86400.0, n))
    which = rng.choice(len(fps), size=n, p=weight)
    work = np.exp(rng.normal(0.0, w.noise, n))
    odd = rng.random(n) < w.odd_share
    work[odd] *= rng.uniform(1.2, 2.0, int(odd.sum()))
    jobs = tuple(
        TraceJob(job_id=f"j{i}", num_gpus=fps[k].gpus, submit_time=float(t), work=fps[k].base_s * float(x),
                 work_unit="seconds", model=fps[k].name, job_class=fps[k].job_class, iter_time_s=1.0, line=0,
                 source="recurring", gpus_per_node=fps[k].gpus_per_node, name=fps[k].name, limit_s=fps[k].limit_s)
        for i, (t, k, x) in enumerate(zip(submit.tolist(), which.tolist(), work.tolist())))
    return Trace(name=f"recurring-seed{seed}", jobs=jobs)


def simulate(trace: Trace, cluster: Cluster) -> SimResult:
    """The trace under slurm-backfill (module doc); the simulator's result."""
    opts = EventOptions(order="fifo", locality_penalty=1.0, runtime_estimate=parse_runtime_estimate("limit"))
    return simulate_events(trace, cluster, get_policy("slurm-backfill"), opts)


def gpu_keys(cluster: Cluster) -> list[str]:
    """Per GPU id, its "node:slot" key."""
    return [f"{cluster.node_names[g.node]}:{g.slot}" for g in cluster.gpus]


def job_runs(trace: Trace, result: SimResult, cluster: Cluster) -> list[JobRun]:
    """The finished jobs as passive rows, in end-time order (ties: job id)."""
    keys = gpu_keys(cluster)
    by_id = {j.job_id: j for j in trace.jobs}
    out = [JobRun(job_id=o.job_id, fingerprint=by_id[o.job_id].name, job_class=by_id[o.job_id].job_class,
                  gpus=tuple(keys[g] for g in o.gpu_ids), runtime_s=o.finish_time - o.start_time,
                  ended_at=EPOCH0 + o.finish_time, time_limit_s=by_id[o.job_id].limit_s)
           for o in result.outcomes]
    out.sort(key=lambda r: (r.ended_at, r.job_id))
    return out
