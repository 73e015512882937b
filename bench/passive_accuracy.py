#!/usr/bin/env python3
"""Passive speed's accuracy: per-GPU factors learned from a simulated fleet's finished jobs against its truth.

A parametric wide fleet (pal_slurm.simulate.fleets, preset "wide": class A spread 25 %, 1 % of
GPUs at 1.5x; its class-A PerfVar is the truth, the pace the simulator runs a job at), on 8-GPU
nodes, runs 14 days of a recurring workload (bench/pal_eval/recurring.py: a few hundred
fingerprints of 1-8 GPUs and whole-node multi-node jobs, resubmitted at 80 % offered load, run-to-run
noise lognormal 2.5 %) under slurm-backfill, which places blind to variability. The finished jobs
become passive rows (GPU keys "node:slot") and go through pal_slurm.classification.passive.estimate.

Prints per seed, for class A over the GPUs with at least --min-jobs finished jobs: how many got an
estimate (a GPU that always ran in the same company gets only a bound), Spearman's rank correlation
with the true factor and the median, p90 and worst |error| of the estimated ones, and each 1.5x
outlier with what found it. Targets: Spearman >= 0.9 and median |error| <= 2 % on every seed, every
outlier found (on its own, or as one of the group it always ran with). Exit status 1 when one is missed.

Usage: bench/passive_accuracy.py [--nodes 64] [--gpus-per-node 8] [--fingerprints 300] [--days 14]
                                 [--load 0.8] [--noise 0.025] [--odd-share 0] [--seeds 1,2,3] [--min-jobs 10]
"""

from __future__ import annotations

import argparse
import sys

from pal_eval.passive_accuracy import run
from pal_eval.recurring import Workload


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=64)
    ap.add_argument("--gpus-per-node", type=int, default=8)
    ap.add_argument("--fingerprints", type=int, default=300)
    ap.add_argument("--days", type=float, default=14.0)
    ap.add_argument("--load", type=float, default=0.8, help="offered load (default 0.8)")
    ap.add_argument("--noise", type=float, default=0.025, help="run-to-run noise, lognormal sigma (default 0.025)")
    ap.add_argument("--odd-share", type=float, default=0.0,
                    help="share of runs slowed x U[1.2, 2] for reasons not the GPU's (default 0)")
    ap.add_argument("--seeds", default="1,2,3", help="fleet and workload seeds (default 1,2,3)")
    ap.add_argument("--min-jobs", type=int, default=10, help="finished class-A jobs a GPU needs to count")
    args = ap.parse_args()
    workload = Workload(fingerprints=args.fingerprints, days=args.days, load=args.load, noise=args.noise,
                        odd_share=args.odd_share)
    seeds = [int(s) for s in args.seeds.split(",")]
    return run(args.nodes, args.gpus_per_node, workload, seeds, args.min_jobs)


if __name__ == "__main__":
    sys.exit(main())
