#!/usr/bin/env python3
"""The placer's cycle on a queue of 50,000 jobs, on a real Slurm test cluster.

Targets: the median cycle under 1 s, and the placer's memory (its peak RSS) under 400 MB:
`pal placer` runs under MemoryMax=1G (systemd/pal-placer.service), and reading a queue of
30-40k jobs as `squeue --json` reached it. The script exits 1 and says which target was
missed; 2 when the run itself could not be made (cluster, submissions, the filter's holds).

What runs: the real Placer, wired by `pal placer`'s own builder (pal_slurm.placer.service
.build_placer: the configured CLI backend, a SQLite database with the 16 GPUs of the test
cluster classified by pal_slurm.demo.cluster_gpus.make_db, the audit, the accounting, the job
identities; the database on its own thread and the collector tuned, as `pal placer` runs),
in this process, so its memory is this process's. The cluster is
tests/services/slurm-cluster.sh's (slurmctld, 4 slurmd, 4 fake V100s each, the real
job_submit.lua); the queue:
  - 16 GPU jobs that fill every GPU (`sleep`), submitted before the filter is on, so they
    run unheld; the held jobs then wait and the cycles measure reading and planning, not
    placements (which bench/placer_latency.py measures);
  - --held GPU jobs (default 10,000) held by the submit filter itself: the placer's heartbeat
    is published (enforce mode, hold_s 3600) and the kill switch removed, as `pal placer`
    does, so job_submit.lua gives each a begin time and its `pal:held` tag. Requests cycle
    through --gres=gpu:1, --gpus=2, --gpus-per-node=1 and --pal-class A-D;
  - the rest of --pending (default 50,000 in all) CPU jobs, pending with a begin time a day
    ahead (`--eligible`: pending for resources instead, every node's CPUs being asked for
    exclusively, which makes slurmctld's scheduler and backfill look at them every pass).
    With --array-size N they are submitted as arrays of N tasks (one record each, as
    slurmctld holds pending arrays; the placer's read keeps them so, squeue without --array,
    and reads only pending GPU arrays again with --array).
Then --cycles cycles (default 7), one every placer.interval_s (2 s), as the service loop runs
them. Printed: each cycle's seconds and what it read, the median, the placer's RSS (peak and
now), and slurmctld's RPCs per cycle by message type from `sdiag` (before/after), with
Slurm's own scheduler's share beside them: main scheduler and backfill cycles and their time
over the same wall time. At the end every job the script submitted is cancelled, the
filter's kill switch is put back and a stopping heartbeat written.

Run it on a cluster of your own (it holds jobs through the filter: no other placer or test
may use that cluster), with room for the queue (slurm-cluster.sh writes MaxJobCount=200000,
MaxArraySize=100001):
  PAL_TEST_SLURM_DIR=/var/tmp/pal-scale-slurm PAL_TEST_SLURM_CTLD_PORT=26817 \\
  PAL_TEST_SLURM_NODE_PORT=27001 bench/placer_scale.py [--pending 50000] [--held 10000]
It starts that cluster (idempotent) and leaves it running; stop it with slurm-cluster.sh stop
(with the same variables) before the test cluster's tests run: two clusters with the same node
names on one machine disturb each other's jobs (seen: typed GRES requests refused). For figures
to quote, start from a fresh cluster (stop it, remove its directory): the jobs an earlier run
cancelled stay in slurmctld's table for MinJobAge (300 s) and every job-info RPC walks them
(seen: 52 ms per read on a fresh cluster, 242 ms after four runs in a row).
Usage: bench/placer_scale.py [--pending N] [--held N] [--cycles 7] [--submitters 8]
                             [--array-size 0] [--eligible] [--profile FILE]
"""

from __future__ import annotations

import argparse
import sys

from pal_eval.placer_scale import run


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pending", type=int, default=50_000, help="pending jobs in all (held GPU jobs included)")
    ap.add_argument("--held", type=int, default=10_000, help="GPU jobs the submit filter holds")
    ap.add_argument("--cycles", type=int, default=7)
    ap.add_argument("--profile", metavar="FILE", default="",
                    help="run the cycles under cProfile, write its stats to FILE and print the top functions")
    ap.add_argument("--submitters", type=int, default=8, help="sbatch processes at once")
    ap.add_argument("--array-size", type=int, default=0, help="submit the CPU jobs as arrays of this many tasks")
    ap.add_argument("--eligible", action="store_true",
                    help="CPU jobs pending for resources (scheduled every pass), not for a begin time")
    return run(ap.parse_args())


if __name__ == "__main__":
    sys.exit(main())
