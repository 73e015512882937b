#!/usr/bin/env python3
"""Simulator speed and memory at scale: a synthetic trace on a large cluster in event mode.

Target: 100,000 jobs on 4,096 GPUs (1,024 nodes x 4) in event mode in under
5 minutes (wall time of each policy's run) and 2 GB (peak RSS of the process). Variability: a
seeded synthetic draw (PerfVar lognormal around 1 with a few slow outliers), binned like the
artifact, so no external data is needed. Default policies: the placer's default (pal-guard) and
slurm-backfill (Slurm as shipped, the same mechanism with first fit alone). Exit status 1, with
a "TARGET MISSED" line, when a run or the memory is over its target.
Site scale (`--workload llm --cluster 2048x8 --jobs 200000`): the LLM-era mix
(pal_slurm.simulate.llm_workload) at 90 % offered load on 16,384 GPUs, about a month of jobs, runtimes
known x U[1,5]; targets 10 minutes per run and 4 GB.

Usage: bench/sim_speed.py [--jobs N] [--nodes N] [--gpus-per-node G] [--policy NAME,...]
                          [--target-s 300] [--target-mb 2048] [--workload philly|llm] [--cluster NxG]
"""

from __future__ import annotations

import argparse
import sys

from pal_eval.sim_speed import LLM_TARGET_MB, LLM_TARGET_S, TARGET_MB, TARGET_S, run


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--nodes", type=int, default=1024)
    ap.add_argument("--gpus-per-node", type=int, default=4)
    ap.add_argument("--policy", default="pal-guard,slurm-backfill")
    ap.add_argument("--target-s", type=float, default=None, help=f"the target per run, seconds [{TARGET_S:g}]")
    ap.add_argument("--target-mb", type=float, default=None, help=f"the target, peak MB [{TARGET_MB:g}]")
    ap.add_argument("--interarrival", type=float, default=None,
                    help="mean seconds between arrivals [default: aimed at ~80%% offered load]")
    ap.add_argument("--workload", choices=("philly", "llm"), default="philly",
                    help="philly: Philly-like sizes (the default run); llm: the LLM-era mix at 90%% offered load, "
                         f"runtimes known x U[1,5], targets {LLM_TARGET_S:g} s and {LLM_TARGET_MB:g} MB")
    ap.add_argument("--cluster", default=None, metavar="NODESxGPUS", help="instead of --nodes and --gpus-per-node")
    args = ap.parse_args()
    nodes, gpn = args.nodes, args.gpus_per_node
    if args.cluster:
        n, _, g = args.cluster.lower().partition("x")
        if not (n.isdigit() and g.isdigit() and int(n) > 0 and int(g) > 0):
            ap.error(f"--cluster takes NODESxGPUS, e.g. 2048x8, not {args.cluster!r}")
        nodes, gpn = int(n), int(g)
    llm = args.workload == "llm"
    target_s = args.target_s if args.target_s is not None else (LLM_TARGET_S if llm else TARGET_S)
    target_mb = args.target_mb if args.target_mb is not None else (LLM_TARGET_MB if llm else TARGET_MB)
    return run(args.jobs, nodes, gpn, args.policy.split(","), args.interarrival, target_s, target_mb, args.workload)


if __name__ == "__main__":
    sys.exit(main())
