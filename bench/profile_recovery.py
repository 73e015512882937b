#!/usr/bin/env python3
"""Does profiling + classification recover a simulated fleet's true classes?

Target: on a simulated fleet of 64 GPUs (16 nodes x 4), `pal profile run --backend sim` then
`pal classify` puts every GPU within one bin of its true class, for every benchmark and seed:
  - bins: a GPU's true bin is the bin of the run its true PerfVar (`SimGpu.true_perfvar`, the
    noise-free value classification estimates) lies nearest to, among the regular bins, or
    among the outlier bins for a true outlier; the bin it was given may be at most one place
    away on the run's ladder of bins (ascending centroid), where each regular bin is one place
    and the outlier bins on either side, one GPU each, are one place together (their order
    among themselves is measurement noise) (pal_slurm.demo.recovery.bin_recovery);
  - tiers: no GPU more than one tier from its true tier (0 regular, 1 slow, 2 outlier;
    `SimGpu.true_tier`): no healthy GPU fenced off as an outlier, no outlier left in a
    regular-speed bin (pal_slurm.demo.recovery.recovery, the demo's measure).
For each seed this runs both commands as a user would (separate processes, a fresh SQLite
database), then prints per benchmark the confusion matrix of tiers (rows: true tier; columns:
assigned bin, fastest first, outlier bins marked *), the GPUs per bin distance, and the GPUs
more than one bin away.

Usage: bench/profile_recovery.py [--seeds 0,1,2] [--nodes 16] [--gpus-per-node 4] [--passes 3]
       [--bad-fraction 0.03] (share of planted defective GPUs; 0.03 is the simulator's default)
       [--max-bins-away 1] (the target; 0 asks every GPU in its true bin)
Exit status 1, with a TARGET MISSED line per target, when a GPU is further away than that.
"""

from __future__ import annotations

import argparse
import sys

from pal_eval.profile_recovery import run


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--gpus-per-node", type=int, default=4)
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--bad-fraction", type=float, default=0.03, help="share of defective GPUs [0.03]")
    ap.add_argument("--max-bins-away", type=int, default=1,
                    help="the target: bins (and tiers) a GPU may be from its true one [1]")
    args = ap.parse_args()
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
