#!/usr/bin/env python3
"""Slurm as shipped on a uniformly faster fleet, against itself: does the no-harm matrix call a pure
speedup harm?

Why: `bench/vs_slurm.py` asks that no cell of its matrix be worse than 1.02 x slurm-backfill. Its
worst cells are single trace structures (a wide job that starts minutes earlier than under Slurm
and so ahead of a burst of small jobs). This script separates that from placement: the *same*
policy, slurm-backfill, on the same fleet with every GPU `scale` times its PerfVar (every job runs
that much faster, nothing else changes), over the same shaken copies. A cell above 1.02 here is
one where finishing work sooner, by itself, makes the mean job finish later: no GPU choice
caused it, and no policy that speeds anything up can be sure to avoid it.

Same matrix as vs_slurm (event mode, 16 x 4 GPUs, FIFO, runtimes known x U[1,5], arrivals shaken
by up to 5 trace minutes, seeds 1..N). Prints per fleet and scale the cells above 1.02 (avg JCT,
p99 JCT, makespan) and the worst.

Usage: bench/faster_fleet.py [--fleets wide-1,...] [--scales 0.99,0.97,0.95] [--shakes 6]
                             [--traces 1,...,6] [--lambdas 1.0,1.7,3.0] [--jobs N]
                             [--shape 32x8 --workload llm --llm-jobs 1000]
"""

from __future__ import annotations

import argparse
import os
import sys

from pal_eval.faster_fleet import parse_scales, run
from pal_eval.matrix import matrix_cells


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fleets", default="wide-1,wide-2,longhorn-gpu,longhorn-run-3")
    ap.add_argument("--scales", default="0.99,0.97,0.95", help="PerfVar multipliers below 1 (faster GPUs)")
    ap.add_argument("--shakes", type=int, default=6)
    ap.add_argument("--traces", default="1,2,3,4,5,6")
    ap.add_argument("--lambdas", default="1.0,1.7,3.0")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes")
    ap.add_argument("--shape", default="16x4", help="the cluster, NODESxGPUS (as bench/vs_slurm.py)")
    ap.add_argument("--workload", choices=("philly", "llm"), default="philly")
    ap.add_argument("--llm-jobs", type=int, default=400, help="jobs per generated trace with --workload llm")
    args = ap.parse_args()
    return run(matrix_cells(args), parse_scales(args.scales), args.shakes, args.jobs)


if __name__ == "__main__":
    sys.exit(main())
