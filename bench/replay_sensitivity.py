#!/usr/bin/env python3
"""What a replay on real Slurm can show, in the simulator: where the gain of pal-slurm over
plain Slurm goes between the ideal simulation and a real cluster (docs/evaluation.md).

For each trace (default Sia-Philly workloads 1 and 4; Longhorn factors drawn with seed 42 on
16 x 4 GPUs; lambda 1.7), the ratio of the pal arm (the placer's policy, --policy, default the
placer's default, pal-guard) to the slurm arm (the replay's model of plain Slurm,
replay.prediction.BASELINE_POLICY: slurm-reserving) of average JCT, p99 JCT and makespan, step
by step:

1. ideal scheduler, estimates = true runtime x U[1,5] per job (bench/vs_slurm.py's setting);
2. the same estimates as Slurm time limits in whole real minutes at k s per trace hour
   (what a replay's jobs ask for: at k = 10 a limit is a multiple of 6 trace hours);
3. plus a real scheduler's latencies (--latencies slurm_start,pal_visible,pal_start,pal_release
   in real seconds, as bench/replay.py's calibration measured them).

Then the lottery in the baseline: plain Slurm's variability-blind choice puts a long
class-A job on the one 2.8x GPU or not depending on which nodes happen to be free, so its
makespan jumps with tiny timing changes. Step 3 is re-run with the Slurm start latency
swept over +-20 % in 21 steps, and the spread of both arms' figures is printed.

With --sweep-k K1,K2,... it prints instead, per trace and compression k (real seconds per trace
hour), how far whole-minute limits move the pal / slurm ratio of average JCT and makespan (step 2
against step 1), how far the latencies move it (step 3 against step 2), and how long one arm of
the replay would take at that k (the predicted Slurm makespan, in real minutes): the table a
faithful time scale is chosen from (neither move above 2 %, the evaluation within its time).
The latencies stay in real seconds whatever k is, as on a real cluster.

Usage: bench/replay_sensitivity.py [--seconds-per-hour 10] [--latencies 0.586,0.481,0.586,0.422]
                                   [--sweep-k 10,30,60,120 [--shakes 6] [--fleet artifact|wide|quiet]]
                                   [--policy pal-guard]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pal_eval.replay_sensitivity import run


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", action="append", type=Path)
    ap.add_argument("--seconds-per-hour", type=float, default=10.0)
    ap.add_argument("--estimate", default="uniform:1:5:42")
    ap.add_argument("--latencies", default="0.586,0.481,0.586,0.422",
                    help="slurm start, pal visible, pal start, pal release (real seconds)")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--lambda", dest="penalty", type=float, default=1.7)
    ap.add_argument("--sweep-k", default=None, help="comma-separated k values: the time-scale table (see above)")
    ap.add_argument("--policy", default=None, help="the pal arm's policy (default: the placer's default)")
    ap.add_argument("--fleet", default="artifact", help="with --sweep-k: artifact, wide or quiet (bench/replay.py's)")
    ap.add_argument("--shakes", type=int, default=0,
                    help="with --sweep-k: each figure the mean over this many input-shaken copies (seeds 1..N)")
    args = ap.parse_args()
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
