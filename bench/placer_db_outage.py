#!/usr/bin/env python3
"""The placer with its database black-holed, on the real test cluster: cycles stay short, the
heartbeat fresh, and no hold runs out mid-placement.

What runs: the daemon's Placer as `pal placer` builds it (`build_placer(background_db=True)`:
every database read and write on its own thread) with the CLI backend against the test
cluster's slurmctld (tests/services/slurm-cluster.sh). Its database is a copy of the classified
test database until `--outage-after` seconds, then a TCP port that accepts connections into its
backlog and never answers (a database host behind a firewall that drops packets): every
connection attempt costs the configured connect timeout (10 s). Jobs are submitted as the submit
filter holds them (`--begin=now+HOLD`, `AdminComment=pal:held class=A`), one every `--every`
seconds, with a short hold (`--hold-s`, 20) so that the begin times really run out unless the
placer moves them. Each cycle's wall time and the heartbeat's age are measured in this process.

Targets (one run): median cycle under 2 s during the outage; no hold lapsed mid-placement (a job
whose begin time passed while it was still tagged `pal:held`, or that started with another GPU
request than its user's or the placement's whole one); every job placed. Exit 1 when one is
missed, 2 when the cluster cannot be used.

Usage: bench/placer_db_outage.py [--seconds 60] [--outage-after 10] [--every 2] [--hold-s 20]
       (with the test cluster's environment: eval "$(tests/services/slurm-cluster.sh env)")
"""

from __future__ import annotations

import argparse
import sys

from pal_eval.placer_db_outage import run


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="how long the run lasts")
    ap.add_argument("--outage-after", type=float, default=10.0, help="seconds before the database is black-holed")
    ap.add_argument("--every", type=float, default=2.0, help="seconds between submissions")
    ap.add_argument("--hold-s", type=int, default=20, help="the filter's hold (begin time ahead), seconds")
    ap.add_argument("--target-s", type=float, default=2.0, help="median cycle target during the outage")
    return run(ap.parse_args())


if __name__ == "__main__":
    sys.exit(main())
