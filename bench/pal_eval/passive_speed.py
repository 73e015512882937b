"""Passive speed's cost at site scale: `estimate` over a million synthetic runs (bench/passive_speed.py)."""

from __future__ import annotations

import gc
import resource
import time

import numpy as np

from pal_eval.targets import Targets
from pal_slurm.classification.passive import JobRun, estimate

TARGET_S = 30.0
TARGET_MB = 1024.0
#: (GPUs, whole 8-GPU nodes or None, share of runs): the recurring workload's sizes (recurring.SIZES)
SIZES = ((1, None, 0.45), (2, None, 0.15), (4, None, 0.15), (8, None, 0.15), (16, 2, 0.06), (32, 4, 0.04))
CLASSES = ("A", "B", "C", "D")


def _gpu_sets(rng: np.random.Generator, n: int, nodes: int, gpn: int) -> list[tuple[int, ...]]:
    """`n` GPU sets of the sizes of SIZES: single-node jobs on random slots of a random node,
    multi-node jobs on whole random nodes (ids node x gpn + slot)."""
    kind = rng.choice(len(SIZES), size=n, p=[s for *_, s in SIZES])
    node = rng.integers(0, nodes, n)
    out: list[tuple[int, ...]] = []
    slots = np.arange(gpn)
    for k, nd in zip(kind.tolist(), node.tolist()):
        gpus, whole, _ = SIZES[k]
        if whole is None:
            out.append(tuple((nd * gpn + rng.choice(slots, gpus, replace=False)).tolist()))
        else:
            ns = rng.choice(nodes, whole, replace=False)
            out.append(tuple((ns[:, None] * gpn + slots[None, :]).ravel().tolist()))
    return out


def synthetic_runs(n_runs: int, nodes: int, gpus_per_node: int, fingerprints: int, seed: int) -> list[JobRun]:
    """`n_runs` JobRun rows: recurring fingerprints (each of one class and size), GPU factors
    lognormal 5 % with 1 % at 1.5x, run time = base x the slowest GPU's factor x lognormal 2.5 %."""
    rng = np.random.default_rng(seed)
    n_gpu = nodes * gpus_per_node
    factor = np.exp(rng.normal(0.0, 0.05, n_gpu))
    factor[rng.choice(n_gpu, n_gpu // 100, replace=False)] = 1.5
    keys = [f"node{g // gpus_per_node:05d}:{g % gpus_per_node}" for g in range(n_gpu)]
    fp = rng.integers(0, fingerprints, n_runs)
    base = np.exp(rng.normal(np.log(3600.0), 1.0, fingerprints))
    fp_class = rng.integers(0, len(CLASSES), fingerprints)
    sets = _gpu_sets(rng, n_runs, nodes, gpus_per_node)
    noise = np.exp(rng.normal(0.0, 0.025, n_runs))
    slowest = np.array([factor[list(s)].max() for s in sets])
    t = base[fp] * slowest * noise
    names = [f"fp{k}" for k in range(fingerprints)]
    return [JobRun(f"j{i}", names[k], CLASSES[fp_class[k]], tuple(keys[g] for g in s), float(x), 1.7e9 + i)
            for i, (k, s, x) in enumerate(zip(fp.tolist(), sets, t.tolist()))]


def rss_mb() -> float:
    """This process's resident set now (Linux /proc), MB."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def run(n_runs: int, nodes: int, gpus_per_node: int, fingerprints: int, target_s: float, target_mb: float) -> int:
    t0 = time.perf_counter()
    runs = synthetic_runs(n_runs, nodes, gpus_per_node, fingerprints, seed=1)
    gc.collect()
    held = rss_mb()
    print(f"setup: {len(runs)} runs of {fingerprints} fingerprints on {nodes * gpus_per_node} GPUs "
          f"({nodes} x {gpus_per_node}), {sum(len(r.gpus) for r in runs)} GPU memberships, built in "
          f"{time.perf_counter() - t0:.1f} s; the rows held: {held:.0f} MB resident")
    t1, c1 = time.perf_counter(), time.process_time()
    result = estimate(runs)
    wall, cpu = time.perf_counter() - t1, time.process_time() - c1
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"estimate: {wall:.1f} s wall ({cpu:.1f} s CPU): {len(result.estimates)} estimates, {len(result.bounds)} "
          f"bounds, {len(result.baselines)} baselines, skipped {dict(result.skipped) or 'none'}")
    print(f"peak memory (max RSS of this process, the rows included): {peak:.0f} MB; estimate's own: at most "
          f"{peak - held:.0f} MB above the rows")
    targets = Targets()
    targets.check(f"estimate over {len(runs)} runs on {nodes * gpus_per_node} GPUs, wall", wall, "<", target_s, "s",
                  digits=1)
    targets.check("peak memory (max RSS, the rows included)", peak, "<", target_mb, "MB", digits=0)
    return targets.exit_status()
