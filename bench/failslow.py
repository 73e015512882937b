#!/usr/bin/env python3
"""Fail-slow flags: false flags on a stable simulated fleet, and how soon a GPU that turns 1.3x slow is flagged.

The fleet, workload and simulation of bench/passive_accuracy.py (parametric wide fleet on 8-GPU
nodes, 1 % of GPUs at 1.5x, a recurring workload at 80 % offered load under slurm-backfill,
run-to-run noise lognormal 2.5 %). Per seed: the benchmark factors are each class's PerfVar x
lognormal 1 % (a profile run's measurement error); fingerprint baselines come from
pal_slurm.classification.passive.estimate on a stable training run; then, with fresh arrivals,

(a) a stable run: every finished job through the fail-slow monitor (defaults of
    pal_slurm.classification.failslow), flags counted per 1,000 GPU-days;
(b) a run where --victims healthy GPUs, on distinct nodes, run 1.3x slower for classes A-C: the
    monitor starts at the onset (day 7) and sees the jobs that start from then on; per slowed GPU,
    its jobs' ends up to the flag and the simulated hours from the onset.

Targets: (a) at most 1 false flag per 1,000 GPU-days; (b) every slowed GPU flagged, within 10 of
its jobs' ends and 24 hours. Exit status 1 when one is missed. The simulator fixes a job's pace at
its start, so the slowed GPUs are slow for the whole run and jobs running across the onset are
left out: the delay counts from the onset, on jobs that started after it.

Usage: bench/failslow.py [--seeds 1,2,3] [--victims 8] [--onset-days 7] [--ratio 1.3] [--nodes 64]
                         [--gpus-per-node 8] [--days 14] [--load 0.8] [--noise 0.025] [--odd-share 0]
                         [--bench-noise 0.01] [--monitor-ratio 1.3] [--max-ratio 2] [--sigma 0.05]
                         [--threshold 12] [--max-step 4]
"""

from __future__ import annotations

import argparse
import sys

from pal_eval.failslow import run
from pal_eval.recurring import Workload
from pal_slurm.classification.failslow import FailSlowSettings


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--victims", type=int, default=8, help="GPUs turned slow per seed (default 8)")
    ap.add_argument("--onset-days", type=float, default=7.0)
    ap.add_argument("--ratio", type=float, default=1.3, help="how much slower they turn (default 1.3)")
    ap.add_argument("--nodes", type=int, default=64)
    ap.add_argument("--gpus-per-node", type=int, default=8)
    ap.add_argument("--fingerprints", type=int, default=300)
    ap.add_argument("--days", type=float, default=14.0)
    ap.add_argument("--load", type=float, default=0.8)
    ap.add_argument("--noise", type=float, default=0.025, help="run-to-run noise, lognormal sigma (default 0.025)")
    ap.add_argument("--odd-share", type=float, default=0.0,
                    help="share of runs slowed x U[1.2, 2] for reasons not the GPU's (default 0)")
    ap.add_argument("--bench-noise", type=float, default=0.01, help="benchmark factors' error, lognormal sigma")
    defaults = FailSlowSettings()
    ap.add_argument("--monitor-ratio", type=float, default=defaults.slow_ratio,
                    help="the slowdown the monitor looks for at least (its slow_ratio)")
    ap.add_argument("--max-ratio", type=float, default=defaults.max_ratio,
                    help="the largest slowdown it fits (its max_ratio; = --monitor-ratio: a fixed ratio)")
    ap.add_argument("--sigma", type=float, default=defaults.sigma, help="the monitor's noise of a job's log pace")
    ap.add_argument("--threshold", type=float, default=defaults.threshold, help="the monitor's threshold h")
    ap.add_argument("--max-step", type=float, default=defaults.max_step, help="the monitor's cap on one job's LLR")
    args = ap.parse_args()
    settings = FailSlowSettings(slow_ratio=args.monitor_ratio, max_ratio=args.max_ratio, sigma=args.sigma,
                                threshold=args.threshold,
                                max_step=args.max_step)
    workload = Workload(fingerprints=args.fingerprints, days=args.days, load=args.load, noise=args.noise,
                        odd_share=args.odd_share)
    seeds = [int(s) for s in args.seeds.split(",")]
    return run(args.nodes, args.gpus_per_node, workload, seeds, args.victims, args.onset_days, args.ratio,
               args.bench_noise, settings)


if __name__ == "__main__":
    sys.exit(main())
