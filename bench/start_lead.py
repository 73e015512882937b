#!/usr/bin/env python3
"""The start lead of replay results recorded before job records carried Slurm's StartTime,
measured from slurmctld's logs (bench/pal_eval/replay/start_lead.py says what the lead is).

For every stored arm result under OUT (`<trace>/rep<r>-seed<r>/<arm>.json`, as bench/replay.py
writes them), it matches the arm's calibration jobs (`<arm>/calibration/records`) and the
run's own jobs (`<arm>/records`) to the allocation messages of the given slurmctld logs (the
job id, allocated at most 10 s before the script started), and prints the median lead of
each: the calibrated one is what a run recorded today would have measured before the arm;
the run's own is shown beside it. With --write, each result whose calibration was matched
gets the calibrated lead as `latencies_s.start_lead_s` (and `start_lead_from` naming the
logs), so that `bench/replay.py --repredict` predicts it with the lead; a result that
already has a lead of its own is left as it is.

Arms run side by side on two clusters reuse job ids at the same moments: give each arm's
cluster its own invocation (`--arm slurm --log <cluster a's log>`, then `--arm pal ...`).

Usage: bench/start_lead.py OUT --log SLURMCTLD_LOG [--log ...] [--arm ARM] [--write] [--json]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pal_eval.start_lead import run


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="a replay's --out directory (or a directory holding several)")
    ap.add_argument("--log", action="append", type=Path, required=True,
                    help="a slurmctld log of the cluster(s) the results ran on (repeatable)")
    ap.add_argument("--arm", default=None, help="only the results of this arm (its cluster's logs given)")
    ap.add_argument("--write", action="store_true", help="store the calibrated lead in each result (see above)")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args()
    return run(args.out, args.log, args.arm, args.write, args.json)


if __name__ == "__main__":
    sys.exit(main())
