#!/usr/bin/env python3
"""Simulator speed and memory at scale: a synthetic trace on a large cluster in event mode.

Target: 100,000 jobs on 4,096 GPUs (1,024 nodes x 4) in event mode in under
5 minutes (wall time of each policy's run) and 2 GB (peak RSS of the process). Variability: a
seeded synthetic draw (PerfVar lognormal around 1 with a few slow outliers), binned like the
artifact, so no external data is needed. Default policies: the placer's default (pal-guard) and
slurm-backfill (Slurm as shipped, the same mechanism with first fit alone). Exit status 1, with
a "TARGET MISSED" line, when a run or the memory is over its target.
Usage: bench/sim_speed.py [--jobs N] [--nodes N] [--gpus-per-node G] [--policy NAME,...]
                          [--target-s 300] [--target-mb 2048]
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from targets import Targets  # noqa: E402

TARGET_S = 300.0
TARGET_MB = 2048.0


def synthetic_cluster(nodes: int, gpn: int, seed: int):  # type: ignore[no-untyped-def]
    from pal_slurm.placement.variability import GpuVariability, cluster_from_variability
    from pal_slurm.simulate.artifact_draw import artifact_slowdowns

    rng = np.random.default_rng(seed)
    n = nodes * gpn
    sens = {"A": 0.05, "B": 0.02, "C": 0.015, "D": 0.005}
    pv = {c: np.exp(rng.normal(0, s, n)) for c, s in sens.items()}
    bad = rng.choice(n, size=max(1, n // 100), replace=False)
    for c in "AB":
        pv[c][bad] *= 1.4
    sf = {c: artifact_slowdowns(list(v)) for c, v in pv.items()}
    var = [GpuVariability(perfvar={c: float(pv[c][g]) for c in pv}, slowdown={c: float(sf[c][g]) for c in sf})
           for g in range(n)]
    return cluster_from_variability(var, nodes, gpn)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--nodes", type=int, default=1024)
    ap.add_argument("--gpus-per-node", type=int, default=4)
    ap.add_argument("--policy", default="pal-guard,slurm-backfill")
    ap.add_argument("--target-s", type=float, default=TARGET_S, help=f"the target per run, seconds [{TARGET_S:g}]")
    ap.add_argument("--target-mb", type=float, default=TARGET_MB, help=f"the target, peak MB [{TARGET_MB:g}]")
    ap.add_argument("--interarrival", type=float, default=None,
                    help="mean seconds between arrivals [default: aimed at ~80%% offered load]")
    args = ap.parse_args()

    from pal_slurm.placement.policies import get_policy
    from pal_slurm.simulate.event import EventOptions, simulate_events
    from pal_slurm.simulate.synthetic import generate

    n_gpus = args.nodes * args.gpus_per_node
    t0 = time.perf_counter()
    cluster = synthetic_cluster(args.nodes, args.gpus_per_node, seed=1)
    probe = generate(2000, seed=7, max_gpus=n_gpus)
    work = sum(j.nominal_runtime_s * j.num_gpus for j in probe.jobs) / len(probe.jobs)
    inter = args.interarrival or work / (0.8 * n_gpus)
    trace = generate(args.jobs, seed=7, max_gpus=n_gpus, mean_interarrival_s=inter)
    span = max(j.submit_time for j in trace.jobs) or 1.0
    offered = sum(j.nominal_runtime_s * j.num_gpus for j in trace.jobs) / (n_gpus * span)
    print(f"setup: {n_gpus} GPUs, {len(trace.jobs)} jobs, mean inter-arrival {inter:.1f} s, "
          f"offered load {offered:.0%} of the cluster over the arrival span, in {time.perf_counter() - t0:.1f} s")
    walls: dict[str, float] = {}
    for name in args.policy.split(","):
        t1, c1 = time.perf_counter(), time.process_time()
        res = simulate_events(trace, cluster, get_policy(name), EventOptions(order="fifo", locality_penalty=1.7))
        dt, cpu = time.perf_counter() - t1, time.process_time() - c1
        walls[name] = dt
        m = res.metrics
        # CPU time beside wall time: on a shared machine the wall time counts others' work too
        print(f"{name:14s} {dt:7.1f} s ({cpu:.1f} s CPU)  avg JCT {m.avg_jct_s / 3600:8.2f} h  makespan {m.makespan_s / 3600:8.1f} h  "
              f"utilization {m.utilization:.3f}")
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak memory (max RSS of this process): {peak_mb:.0f} MB")
    targets = Targets()
    for name, dt in walls.items():
        targets.check(f"{name}: {len(trace.jobs)} jobs on {n_gpus} GPUs, wall", dt, "<", args.target_s, "s", digits=1)
    targets.check("peak memory (max RSS)", peak_mb, "<", args.target_mb, "MB", digits=0)
    return targets.exit_status()


if __name__ == "__main__":
    sys.exit(main())
