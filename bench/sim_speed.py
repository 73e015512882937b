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
import sys

from pal_eval.sim_speed import TARGET_MB, TARGET_S, run


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
    return run(args.jobs, args.nodes, args.gpus_per_node, args.policy.split(","), args.interarrival,
               args.target_s, args.target_mb)


if __name__ == "__main__":
    sys.exit(main())
