#!/usr/bin/env python3
"""pal-slurm's default policy against Slurm as shipped, over a matrix of fleets, traces and lambdas.

The claim an admin asks about: does pal-slurm ever make my jobs finish later, and how much
sooner do they finish where my GPUs really differ? Event mode (continuous time, no
preemption), 16 x 4 GPUs, FIFO, jobs in the shape they are submitted as (one node when it
fits, else the fewest nodes that split them evenly; the same slots on every node where the
placer steers them), runtimes known to the policies only as the true runtime x U[1, 5]
(padded time limits). Baselines:

- `slurm-backfill`: Slurm as shipped (cons_tres's first fit, sched/backfill on limits);
- the same on the cluster left after `pal gpus drain`'s recommendation (every node with a
  GPU at PerfVar >= [report] drain_perfvar, 1.3, drained). What pal-slurm adds beyond
  draining is its value.

`--baseline slurm-reserving` compares against Slurm's own backfill planning and node choice
instead (pal_slurm.placement.slurm_reserving: the model the real-Slurm replay predicts plain
Slurm with), where the default measures the variability choice alone on one shared mechanism.

Fleets (variability models, pal_slurm.simulate.fleets): Longhorn's per-run draw, seeds 42,
1, 2, 3 (the PAL artifact's draw, kept for continuity: its outliers are single warm-up
runs); Longhorn per GPU (each GPU the median of its runs, as `pal classify` sees it);
parametric narrow, wide and wide-2x, seeds 1 and 2; uniform 1.0. Traces: the six
Sia-Philly workloads (PAL artifact, hal-uw/blox-pal, MIT). Lambda 1.0, 1.7, 3.0.

**Input shaking.** A scheduler is chaotic: moving every arrival by at most a trace minute
moves plain Slurm's own average JCT on one trace by tens of percent. So each cell runs
`--shakes` copies of its trace (arrivals moved by up to 5 trace minutes, seeds 1..N; the
pal and Slurm arms see the same copies) and compares the means. One cell's ratio is
mean(policy) / mean(baseline) over those copies.

Prints one line per fleet: the geomean over its cells of avg JCT, p99 JCT and makespan
against Slurm, its worst cell, the avg JCT against Slurm after drain, the share of the
baseline's variability tax the policy removes (of all of it, and of the part above the floor
no schedule keeping the jobs' shapes can go below: pal_slurm.simulate.tax.unavoidable_tax)
and the queue wait it adds; then the targets, one line each ("target met" / "TARGET MISSED"):
no cell worse than 1.02 x the baseline; on the uniform fleet (against slurm-backfill) every
start identical; on the spread fleets (wide-*) geomean avg JCT <= 0.80 and makespan <= 0.90,
<= 0.92 after drain, tax removed >= 80 % (all of it, and of the avoidable part) with the added
wait under 2 %. Exit status 1 when one is missed.

**Today's shape** (`--shape 32x8 --workload llm [--llm-jobs 400]`): the LLM-era mix of
pal_slurm.simulate.llm_workload on nodes of 8 GPUs, each "trace" a seed of the generator.

**By size.** Every run is also cut into GPU-count buckets (1, 2-8, 9-64, more): each bucket's
geomean avg JCT against Slurm, the share of multi-node jobs that held a GPU at >= 1.3x in each
arm, and the largest job's mean wait (bench/pal_eval/size_buckets.py). Targets: no bucket above
1.02; on the spread fleets pal-guard's slow multi-node share at most a quarter of Slurm's.

Usage: bench/vs_slurm.py [--policy pal-guard] [--shakes 4] [--lambdas 1.0,1.7,3.0]
                         [--fleets NAME,...] [--traces 1,...,6] [--jobs N] [--json FILE]
                         [--shape 16x4] [--workload philly|llm] [--llm-jobs 400]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from pal_eval.matrix import FLEETS
from pal_eval.vs_slurm import run


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policy", default="pal-guard")
    ap.add_argument("--baseline", default="slurm-backfill", choices=("slurm-backfill", "slurm-reserving"),
                    help="the model of Slurm to compare against: slurm-backfill (EASY and first fit, the mechanism "
                         "pal-slurm's policies share; the default) or slurm-reserving (Slurm's own backfill "
                         "planning and cons_tres's node choice, what the real-Slurm replay predicts Slurm with)")
    ap.add_argument("--shakes", type=int, default=4, help="shaken copies of each trace per cell (default 4)")
    ap.add_argument("--lambdas", default="1.0,1.7,3.0")
    ap.add_argument("--fleets", default=",".join(FLEETS))
    ap.add_argument("--traces", default="1,2,3,4,5,6",
                    help="Sia-Philly workload numbers; with --workload llm, the seeds of the generated traces")
    ap.add_argument("--shape", default="16x4", help="the cluster, NODESxGPUS (default 16x4)")
    ap.add_argument("--workload", choices=("philly", "llm"), default="philly",
                    help="philly: the six Sia-Philly traces; llm: the LLM-era mix (docs/simulation.md)")
    ap.add_argument("--llm-jobs", type=int, default=400, help="jobs per generated trace with --workload llm")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes")
    ap.add_argument("--json", type=Path, help="also write every cell's figures here")
    return run(ap.parse_args())


if __name__ == "__main__":
    sys.exit(main())
