#!/usr/bin/env python3
"""What passive speed buys on a drifting fleet: one simulated month, four arms, the same drift.

A parametric wide fleet (pal_slurm.simulate.fleets, preset "wide"; 32 x 8 GPUs by default) runs a
month of the recurring workload (bench/pal_eval/recurring.py: a few hundred fingerprints resubmitted
at 80 % offered load). A share of its GPUs turns slower for the compute classes at moments spread
over the month (pal_slurm.simulate.drift.DriftSpec); half of them a re-profile fixes. Four arms
over the same jobs and the same drift (bench/pal_eval/drift_month.py): slurm-backfill; pal-guard on
the snapshot of t = 0; pal-guard on passive speed, learned every hour from the finished jobs, with
fail-slow flags re-profiled (pal_slurm.simulate.learning); pal-guard on the truth.

Prints per arm the average JCT and makespan, against Slurm's, and the variability tax at the true
pace; the share of the drift's avoidable tax passive speed removes, (tax_snapshot - tax_passive) /
(tax_snapshot - tax_oracle), target >= 0.80 (exit status 1 when missed); and for each drifted GPU
when the fail-slow flag caught it, after how many of its jobs.

Usage: bench/drift_month.py [--nodes 32] [--gpus-per-node 8] [--fleet wide] [--seed 1] [--days 30]
                            [--load 0.8] [--fingerprints 300] [--share 0.05] [--factor 1.3]
                            [--recover-share 0.5] [--window-days 14] [--use-min-paced 10]
                            [--reprofile-delay-h 2]
                            [--arms slurm,snapshot,passive,oracle[,passive-all-runs,flags-only,factors-only]]
"""

from __future__ import annotations

import argparse
import sys

from pal_eval.drift_month import ARMS, EXTRA_ARMS, Setup, run
from pal_eval.recurring import Workload


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=32)
    ap.add_argument("--gpus-per-node", type=int, default=8)
    ap.add_argument("--fleet", default="wide", help="parametric fleet preset or KEY=VALUE list (default wide)")
    ap.add_argument("--seed", type=int, default=1, help="fleet, workload and drift seed (default 1)")
    ap.add_argument("--days", type=float, default=30.0)
    ap.add_argument("--load", type=float, default=0.8, help="offered load (default 0.8)")
    ap.add_argument("--fingerprints", type=int, default=300)
    ap.add_argument("--share", type=float, default=0.05, help="share of GPUs that drift (default 0.05)")
    ap.add_argument("--factor", type=float, default=1.3, help="how much slower a drifted GPU runs (default 1.3)")
    ap.add_argument("--recover-share", type=float, default=0.5, help="share of drifted GPUs a re-profile fixes")
    ap.add_argument("--window-days", type=float, default=14.0, help="passive speed's window (default 14)")
    ap.add_argument("--use-min-paced", type=int, default=10,
                    help="jobs a GPU must have paced before its passive factor places (default 10)")
    ap.add_argument("--reprofile-delay-h", type=float, default=2.0, help="from a flag to its re-profile (default 2)")
    ap.add_argument("--arms", default=",".join(ARMS), help=f"of {', '.join(ARMS + EXTRA_ARMS)}")
    args = ap.parse_args()
    arms = [a for a in args.arms.split(",") if a]
    unknown = sorted(set(arms) - set(ARMS + EXTRA_ARMS))
    if unknown:
        ap.error(f"unknown arm(s) {', '.join(unknown)}; arms: {', '.join(ARMS + EXTRA_ARMS)}")
    setup = Setup(nodes=args.nodes, gpus_per_node=args.gpus_per_node, fleet=args.fleet, seed=args.seed,
                  workload=Workload(fingerprints=args.fingerprints, days=args.days, load=args.load),
                  share=args.share, factor=args.factor, recover_share=args.recover_share,
                  window_days=args.window_days, use_min_paced=args.use_min_paced,
                  reprofile_delay_h=args.reprofile_delay_h)
    return run(setup, arms)


if __name__ == "__main__":
    sys.exit(main())
