"""Synthetic LLM-era job mixes for 8-GPU-node clusters: a few whole-node pretraining jobs that
hold most of the GPU time, fine-tuning on a few nodes, and a crowd of short 1-8 GPU evaluation
and debugging jobs.

Why a second generator: the Sia-Philly traces (`pal_slurm.simulate.synthetic`) are 2017 jobs of
1-48 GPUs. A cluster bought today runs 8-GPU nodes, and its big training jobs take whole nodes
across many of them. Variability hurts most there: a synchronous job runs at the pace of its
slowest GPU, and a 512-GPU job on a fleet with 1 % of GPUs at 1.5x almost surely holds one.

The job kinds and their shares follow the published characterisation of LLM development
clusters (Acme: Hu et al., "Characterization of Large Language Model Development in the
Datacenter", NSDI'24, and its public trace summary, InternLM/AcmeTrace); docs/simulation.md,
"The LLM-era mix", gives each parameter with its source and says which are our choice.

- **Kinds** (Acme's job types): pretraining (class A: dense GEMM-bound training at scale),
  fine-tuning (B: transformer training on a few nodes), evaluation (C: batched inference,
  prefill compute-bound and decode memory-bound) and debugging (D: start-up, loading and a few
  steps).
- **Sizes**: evaluation and debugging jobs fit one node (1, 2, 4 or 8 GPUs, at most a node);
  fine-tuning and pretraining take whole nodes (`TraceJob.gpus_per_node` = the node's GPUs),
  fine-tuning 1-8 nodes and pretraining from 4 nodes up to half the cluster, in powers of two,
  each size half as likely as the one below it. On clusters of fewer than 8 nodes the node
  counts are capped at the cluster's half (at least one node).
- **Durations**: log-normal, given by a median and a 90th percentile, clipped to a kind's
  range; whole seconds.
- **Arrivals**: a Poisson process whose rate gives the chosen offered load (GPU-seconds asked
  for / GPU-seconds the cluster has, on nominal-speed GPUs): the mean inter-arrival time is the
  drawn jobs' mean GPU-seconds / (load x the cluster's GPUs).

Pure and deterministic per seed (numpy ``default_rng``); vectorised, so 200,000 jobs take
well under a second.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pal_slurm.errors import InputError
from pal_slurm.simulate.traces import Trace, TraceJob

__all__ = ["LLM_KINDS", "DEFAULT_LOAD", "JobKind", "generate_llm", "kind_sizes"]

#: z of the 90th percentile of a standard normal: sigma = ln(p90 / median) / Z90
Z90 = 1.2815515655446004

#: offered load when none is given: a busy site, where placement has a queue to choose from
DEFAULT_LOAD = 0.9


@dataclass(frozen=True)
class JobKind:
    """One kind of job of the mix: its share of the jobs, its PAL job class, and how its sizes
    and durations are drawn."""

    name: str
    share: float  # of the jobs
    job_class: str
    whole_nodes: bool  # True: GPUs per node = the node's GPUs; False: fits one node
    gpu_weights: tuple[tuple[int, float], ...]  # single-node kinds: (GPUs, weight)
    min_nodes: int  # whole-node kinds: fewest nodes
    max_nodes: int | None  # whole-node kinds: most nodes (None: half the cluster)
    median_s: float
    p90_s: float
    min_s: float
    max_s: float


#: The mix (docs/simulation.md, "The LLM-era mix", gives the source of each number).
LLM_KINDS: tuple[JobKind, ...] = (
    JobKind("pretrain", 0.03, "A", True, (), 4, None, 6 * 3600.0, 24 * 3600.0, 600.0, 72 * 3600.0),
    JobKind("finetune", 0.12, "B", True, (), 1, 8, 1800.0, 4 * 3600.0, 120.0, 24 * 3600.0),
    JobKind("eval", 0.65, "C", False, ((1, 0.6), (2, 0.1), (4, 0.15), (8, 0.15)), 1, 1, 150.0, 1800.0, 30.0,
            6 * 3600.0),
    JobKind("debug", 0.20, "D", False, ((1, 0.4), (2, 0.2), (4, 0.2), (8, 0.2)), 1, 1, 90.0, 900.0, 30.0,
            2 * 3600.0),
)


def kind_sizes(kind: JobKind, nodes: int, gpus_per_node: int) -> list[tuple[int, int | None, float]]:
    """The sizes a kind draws from on a cluster of `nodes` x `gpus_per_node`: (GPUs, GPUs per
    node or None, weight). Whole-node kinds: powers of two of nodes from `min_nodes` to
    `max_nodes` (half the cluster when None), each half as likely as the one below, capped at
    half the cluster (at least one node); single-node kinds: their GPU counts, capped at a
    node (weights of counts above it go to the node's size)."""
    if kind.whole_nodes:
        half = max(1, nodes // 2)
        top = half if kind.max_nodes is None else min(kind.max_nodes, half)
        low = min(kind.min_nodes, top)
        counts = []
        n = low
        while n <= top:
            counts.append(n)
            n *= 2
        return [(n * gpus_per_node, gpus_per_node, 0.5 ** i) for i, n in enumerate(counts)]
    merged: dict[int, float] = {}
    for g, w in kind.gpu_weights:
        merged[min(g, gpus_per_node)] = merged.get(min(g, gpus_per_node), 0.0) + w
    return [(g, None, w) for g, w in sorted(merged.items())]


def _durations(kind: JobKind, z: np.ndarray) -> np.ndarray:
    """Log-normal durations from standard normal draws `z`, clipped and rounded to seconds."""
    sigma = math.log(kind.p90_s / kind.median_s) / Z90
    d = kind.median_s * np.exp(sigma * z)
    return np.maximum(np.rint(np.clip(d, kind.min_s, kind.max_s)), 1.0)


def generate_llm(n_jobs: int, *, nodes: int, gpus_per_node: int, seed: int, load: float = DEFAULT_LOAD,
                 kinds: tuple[JobKind, ...] = LLM_KINDS, name: str | None = None) -> Trace:
    """`n_jobs` jobs of the LLM-era mix for a cluster of `nodes` x `gpus_per_node` GPUs, work in
    seconds at nominal speed, ids "0".."n-1" in arrival order, at offered `load`."""
    _check(n_jobs, nodes, gpus_per_node, load, kinds)
    rng = np.random.default_rng(seed)
    shares = np.array([k.share for k in kinds], dtype=float)
    which_kind = rng.choice(len(kinds), size=n_jobs, p=shares / shares.sum())
    u_size, z_dur = rng.random(n_jobs), rng.standard_normal(n_jobs)
    gpus = np.empty(n_jobs, dtype=np.int64)
    per_node = np.zeros(n_jobs, dtype=np.int64)  # 0: none asked for
    work = np.empty(n_jobs)
    for k, kind in enumerate(kinds):
        mask = which_kind == k
        sizes = kind_sizes(kind, nodes, gpus_per_node)
        cum = np.cumsum([w for _, _, w in sizes])
        pick = np.searchsorted(cum / cum[-1], u_size[mask], side="right").clip(0, len(sizes) - 1)
        gpus[mask] = np.array([g for g, _, _ in sizes])[pick]
        per_node[mask] = np.array([p or 0 for _, p, _ in sizes])[pick]
        work[mask] = _durations(kind, z_dur[mask])
    mean_gap = float((gpus * work).mean()) / (load * nodes * gpus_per_node) if n_jobs else 1.0
    submit = np.cumsum(rng.exponential(mean_gap, n_jobs))
    source = f"llm(seed={seed}, {nodes}x{gpus_per_node}, load={load:g})"
    jobs = tuple(
        TraceJob(job_id=str(i), num_gpus=g, submit_time=t, work=w, work_unit="seconds", model=kinds[k].name,
                 job_class=kinds[k].job_class, iter_time_s=1.0, line=0, source=source, gpus_per_node=p or None)
        for i, (k, g, p, t, w) in enumerate(zip(which_kind.tolist(), gpus.tolist(), per_node.tolist(),
                                                submit.tolist(), work.tolist()))
    )
    return Trace(name=name or f"llm-{n_jobs}-{nodes}x{gpus_per_node}-seed{seed}", jobs=jobs)


def _check(n_jobs: int, nodes: int, gpus_per_node: int, load: float, kinds: tuple[JobKind, ...]) -> None:
    if n_jobs < 0:
        raise InputError(f"number of jobs must be >= 0, got {n_jobs}")
    if nodes < 1 or gpus_per_node < 1:
        raise InputError(f"the cluster needs at least one node of one GPU, got {nodes} x {gpus_per_node}")
    if not (0 < load <= 10):
        raise InputError(f"offered load must be in (0, 10], got {load}")
    if not kinds or any(not k.share >= 0 for k in kinds) or sum(k.share for k in kinds) <= 0:
        raise InputError("the job mix needs kinds with shares >= 0 and a positive total")
