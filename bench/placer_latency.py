#!/usr/bin/env python3
"""Delay that pal-slurm adds, on the test cluster: submit to start, and a job's end to the next start.

Targets: all jobs complete, none lost or left held, and with the filter in enforce mode and
`pal placer` running (a 1 s cycle, woken at once by the filter and by EpilogSlurmctld, see
docs/admin-guide.md, "Waking the placer"), against the same jobs with pal-slurm off:
  - the added median delay from submit to start is under 0.2 s;
  - the added median delay from a job's end to the next start on its GPUs is under 0.2 s.
Jobs that the placer kept waiting on purpose for better GPUs (a "waiting" record in its audit)
are reported apart: their delay is a choice, not overhead. Also printed: how long after
submission each job's AccrueTime starts (the age factor of multifactor priority counts
from it, and a hold postpones it), in both runs.

Four runs on the real test cluster (tests/services/slurm-cluster.sh: slurmctld, 4 slurmd,
4 fake V100s each, the real job_submit.lua, SPANK plugin and EpilogSlurmctld hook), each pair
on the same seeded job list:
  (a) off / (b) pal, submit to start: --jobs GPU jobs, each `sbatch --pal-class=A|B|C|D` with
      one of --gres=gpu:N, --gpus=N, --gpus-per-node=N (N = 1-4), `--wrap 'date +%s.%N; sleep
      0.1'`, submitted at --rate jobs/s. Submit time: the wall clock just before sbatch runs;
      start time: the job's own first command.
  (c) off / (d) pal, end to next start: 16 one-GPU class-A jobs fill the GPUs, each ending
      0.6 s after the one before (`sleep 3 + 0.6 i`); 16 one-GPU class-A jobs queued behind
      them, each running longer than the whole fill (so each GPU gets exactly one of them). Each GPU's delay: the first start of a queued job on it (its first command) minus
      the end of the job before it there (that job's last command), matched by node and
      SLURM_JOB_GPUS. Both include slurmd's launch and epilog, equally in both runs.
"off": the kill switch <dir>/pal/filter-disabled present, no placer. "pal": `pal placer` in the
background (placer.interval_s = --interval, mode enforce, a SQLite database with the 16 GPUs
classified by tests/slurm/placer_support.make_db), the kill switch removed once its heartbeat
is fresh, and put back afterwards; --no-wake runs it without the wake-up (every cycle timed).
A run ends when Slurm lists none of its jobs as pending or running (bounded by --drain-timeout);
then every job must be COMPLETED with exit 0 and have written its start time.
Prints one line per target ("target met" / "TARGET MISSED", with the figure) and exits 1 when
one is missed: every job completed in each run, none left pending, and the two added delays.

Run it with your own cluster instance (one placer per cluster):
  PAL_TEST_SLURM_DIR=/var/tmp/pal-slurm-bench PAL_TEST_SLURM_CTLD_PORT=19817 \
  PAL_TEST_SLURM_NODE_PORT=19001 bench/placer_latency.py
It starts that cluster (idempotent) and leaves it running; stop it with slurm-cluster.sh stop.
Usage: bench/placer_latency.py [--jobs 200] [--rate 3] [--interval 1] [--drain-timeout 150] [--seed 3]
       [--no-wake]
"""

from __future__ import annotations

import argparse
import sys

from pal_eval.placer_latency import run


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--rate", type=float, default=3.0, help="submissions per second")
    ap.add_argument("--interval", type=float, default=1.0, help="placer.interval_s in run (b)")
    ap.add_argument("--drain-timeout", type=float, default=150.0, help="seconds a run may take after the last submit")
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--no-wake", action="store_true", help="run (b) and (d) without the wake-up (placer.wake = false)")
    return run(ap.parse_args())


if __name__ == "__main__":
    sys.exit(main())
