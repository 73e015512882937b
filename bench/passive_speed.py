#!/usr/bin/env python3
"""Passive speed's cost at site scale: wall time, CPU time and peak memory of `estimate` on a million runs.

Synthetic rows (bench/pal_eval/passive_speed.py): 1,000,000 finished runs of 20,000 recurring
fingerprints on 16,384 GPUs (2,048 nodes x 8), sizes as the recurring workload's (1-8 GPUs on one
node, 2 or 4 whole nodes), GPU factors lognormal 5 % with 1 % at 1.5x, run time = base x the slowest
GPU's factor x lognormal 2.5 % noise. The rows are built first and held in a list, as a caller
holding a query's result would; then pal_slurm.classification.passive.estimate runs once.
Targets: under 30 s wall and 1 GB peak memory (the process's max RSS, the rows included). Exit
status 1 when one is missed.

Usage: bench/passive_speed.py [--runs 1000000] [--nodes 2048] [--gpus-per-node 8] [--fingerprints 20000]
                              [--target-s 30] [--target-mb 1024]
"""

from __future__ import annotations

import argparse
import sys

from pal_eval.passive_speed import TARGET_MB, TARGET_S, run


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1_000_000)
    ap.add_argument("--nodes", type=int, default=2048)
    ap.add_argument("--gpus-per-node", type=int, default=8)
    ap.add_argument("--fingerprints", type=int, default=20_000)
    ap.add_argument("--target-s", type=float, default=TARGET_S, help=f"the target, wall seconds [{TARGET_S:g}]")
    ap.add_argument("--target-mb", type=float, default=TARGET_MB, help=f"the target, peak MB [{TARGET_MB:g}]")
    args = ap.parse_args()
    return run(args.runs, args.nodes, args.gpus_per_node, args.fingerprints, args.target_s, args.target_mb)


if __name__ == "__main__":
    sys.exit(main())
