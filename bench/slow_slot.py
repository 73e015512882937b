#!/usr/bin/env python3
"""A GPU slot turning slow mid-run on real Slurm: flagged, quarantined, no job lost.

A replay cluster (the replay's: tests/services/slurm-cluster.sh in its own state directory and
ports, fake GPUs, OverTimeLimit=UNLIMITED), its fleet stored as the database's classification, the
placer running (observe mode by default: every finished GPU job lands in its ledger), and a
recurring workload submitted at a steady rate: --fingerprints works (job name = fingerprint id, one
user and one command), 1-, 2- and 4-GPU jobs, limits base x U[2, 4], each job sleeping its work x
the slowest factor of the GPUs Slurm gave it, read from the jobs' factors file when it starts
(the replay's job script). At trace hour --change-at the factors file is replaced by one with
--slot's factor --ratio times larger: the jobs that start from then on sleep that much longer there;
the database keeps its benchmark. Every --learn-every trace hours `learn(engine, cfg, apply=True)`
(the code of `pal gpus learn --apply`) runs on the database; once the slot is flagged,
`pal gpus quarantine SLOT --reason fail-slow --apply` runs as an administrator would run it, the
workload goes on for --after-hours more trace hours after the holder took the slot, then every job
is waited for, checked (the jobs' own records of their slots and Slurm's states), the slot released
(`pal gpus release --apply`) and the cluster stopped.

Prints the trace hours and the slot's jobs' ends from the change to its flag, the flags on other
GPUs, the jobs started on the slot before the change, until the holder took it and after, those
on its node's other slots while it was out of service, and submitted against COMPLETED; writes
OUT/slow-slot.json. Targets: flagged within 10 of its jobs' ends and 24 trace hours; no job
started on the slot after the holder took it; the node's other slots ran jobs meanwhile; every
job COMPLETED. Exit status 1 when one is missed, 2 on bad options.

Usage: bench/slow_slot.py [--nodes 8] [--gpus-per-node 4] [--seconds-per-hour 30] [--fingerprints 36]
                          [--load 0.8] [--slot pal-r03:2] [--ratio 1.5] [--change-at 8] [--watch-hours 30]
                          [--after-hours 6] [--learn-every 1] [--fleet wide] [--seed 42] [--workload-seed 1]
                          [--placer-mode observe|enforce] [--out DIR] [--keep-cluster]
                          [--cluster-dir D --ctld-port P --node-port P]
Run as root (it starts Slurm daemons and creates device files).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pal_eval.paths import artifact_dir, longhorn
from pal_eval.slow_slot import run

CLUSTER_DIR = "/var/tmp/pal-eval-slurm-c"
CTLD_PORT = 16997
NODE_PORT = 17601


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--gpus-per-node", type=int, default=4)
    ap.add_argument("--seconds-per-hour", type=float, default=30.0, help="real seconds per trace hour (k)")
    ap.add_argument("--fingerprints", type=int, default=36, help="recurring works (job names)")
    ap.add_argument("--load", type=float, default=0.8, help="offered load, GPU-hours asked over the GPUs' hours")
    ap.add_argument("--workload-seed", type=int, default=1)
    ap.add_argument("--slot", default="pal-r03:2", help="the GPU slot that turns slow, NODE:MINOR")
    ap.add_argument("--ratio", type=float, default=1.5, help="how much slower it turns")
    ap.add_argument("--change-at", type=float, default=8.0, help="trace hour it turns slow")
    ap.add_argument("--watch-hours", type=float, default=30.0,
                    help="trace hours after the change the submissions stop if it was never flagged")
    ap.add_argument("--after-hours", type=float, default=6.0,
                    help="trace hours the submissions go on after the holder took the slot")
    ap.add_argument("--learn-every", type=float, default=1.0, help="trace hours between two `pal gpus learn --apply`")
    ap.add_argument("--fleet", default="wide", help="artifact, wide (parametric) or quiet: the classification")
    ap.add_argument("--seed", type=int, default=42, help="the fleet's draw")
    ap.add_argument("--variability", type=Path, default=longhorn(artifact_dir()))
    ap.add_argument("--placer-mode", choices=("observe", "enforce"), default="observe")
    ap.add_argument("--policy", default="pal-guard", help="the placer's policy")
    ap.add_argument("--placer-interval", type=float, default=1.0, help="placer cycle, real seconds")
    ap.add_argument("--bf-resolution", type=int, default=None, metavar="SECONDS",
                    help="sched/backfill bf_resolution, real seconds (default 60 s compressed like the clock)")
    ap.add_argument("--out", type=Path, default=Path("slow-slot-out"))
    ap.add_argument("--keep-cluster", action="store_true", help="leave the cluster running at the end")
    ap.add_argument("--cluster-dir", default=CLUSTER_DIR, help="the cluster's state directory")
    ap.add_argument("--ctld-port", type=int, default=CTLD_PORT, help="its slurmctld port")
    ap.add_argument("--node-port", type=int, default=NODE_PORT, help="its first slurmd port (one per node)")
    return run(ap.parse_args())


if __name__ == "__main__":
    sys.exit(main())
