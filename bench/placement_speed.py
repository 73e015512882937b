#!/usr/bin/env python3
"""Time the placer's decision for a whole cycle: `decide()` over up to 1,000 held jobs on 10,000 GPUs,
on a state that changes from one cycle to the next, for every policy of the table.

Target: the default policy's (pal-guard, placement.model.DEFAULT_POLICY) decision for one cycle
(1,000 held jobs, 10,000 GPUs) under 0.5 s median, wall time. Why: the placer decides once per
cycle for every held job it can steer, a burst holds up to 1,000, and the whole cycle must fit in
1 s (bench/placer_cycle.py times it); the decision gets half of it, the rest is reading Slurm,
writing the updates and the audit. The other policies are timed beside it for comparison, with
no target: the placer runs one of them only when configured to.

What is timed: `pal_slurm.placement.decide.decide` alone, the call the placer's place stage makes
(placer/cycle.py): the queue order (`slurm`, the placer's default), the window a policy can act
on, and `Policy.place`, with the placer's default knobs (lambda, waiting for better GPUs, noise).
Not timed: building the snapshot and the requests from Slurm's output, the updates and the audit
(bench/placer_cycle.py times those, with the decision, as one cycle).

The state: --nodes x --per-node GPUs (2,500 x 4), classes A-D with 4 slowdown levels each,
about half the GPUs free (scattered: nodes have 0-4 free), the busy ones held by running jobs with
known expected ends (what backfilling and waiting for better GPUs look at); --held jobs waiting
(1-4 GPUs on one node, 3 % on two nodes with the same slots on each, as the placer asks; classes
A-D; runtime estimates 30 min to 1 day; Slurm priorities in submit order). Between two cycles
(not timed) the state moves on as it does under the placer: the jobs the decision placed start
on their GPUs (expected end: now + their estimate) and leave the queue, --step seconds pass,
running jobs end (every one whose expected end has passed, then the soonest until --free-share
of the GPUs are free), jobs the placer does not hold take about 1 % of the free GPUs, and new
jobs arrive until --held wait again. So every decision sees other free GPUs, other releases and
a different queue, as the placer's do; none repeats the one before it.
Each policy runs --cycles timed cycles from the same seeded start (cycle 0 warms up and is not
counted: per-class tables, imports).

Prints per policy the median, p95 and slowest decision (wall time) and the median CPU time of
this thread (on a shared machine wall time includes waiting for a core), and what the decisions
saw and did: free GPUs; the window (the held jobs the policy can act on: those that fit and its
lookahead past the first that does not); jobs placed; jobs waiting on purpose for better GPUs.
Then the target, met or missed. Exit status 1 when the default policy's median is over the
target (--target-s); when --policy leaves the default policy out, no target is checked and it
says so.

Usage: bench/placement_speed.py [--nodes 2500] [--per-node 4] [--held 1000] [--cycles 10]
                                [--policy NAME,...] [--target-s 0.5] [--seed 7]
"""

from __future__ import annotations

import argparse
import sys

from pal_eval.placement_speed import TARGET_S, run
from pal_slurm.placement.policies import policy_names


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=2500)
    ap.add_argument("--per-node", type=int, default=4)
    ap.add_argument("--held", type=int, default=1000, help="held jobs waiting at every decision [1000]")
    ap.add_argument("--cycles", type=int, default=10, help="timed cycles per policy, after one warm-up cycle [10]")
    ap.add_argument("--policy", default=",".join(policy_names()), help="comma-separated policies [all of them]")
    ap.add_argument("--step", type=float, default=60.0, help="seconds between two cycles' states [60]")
    ap.add_argument("--free-share", type=float, default=0.5, help="share of the GPUs free before a decision [0.5]")
    ap.add_argument("--target-s", type=float, default=TARGET_S, help=f"the target, median seconds [{TARGET_S}]")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    policies = [p for p in args.policy.split(",") if p]
    unknown = [p for p in policies if p not in policy_names()]
    if unknown or not policies:
        ap.error(f"unknown policy {unknown}; known: {', '.join(policy_names())}")
    if args.cycles < 1 or args.held < 1 or not 0 < args.free_share < 1 or args.per_node < 1 or args.nodes < 1:
        ap.error("--cycles, --held, --nodes and --per-node must be at least 1, --free-share in (0, 1)")
    return run(args, policies)


if __name__ == "__main__":
    sys.exit(main())
