#!/usr/bin/env python3
"""What learned runtimes can buy the replay, in the simulator: the replay's plan of each trace
(shaped, whole-minute limits from the runtime-estimate model, input-shaken per repetition as
bench/replay.py does), predicted for the slurm arm, the pal arm (estimates: the limits) and the
pal+history arm (estimates: what one earlier run's sacct export teaches, each job's runtime on a
median GPU in whole real seconds, never more than its limit; `prediction.predict` with
`learned`), with an ideal scheduler (no latencies). The real arms are bench/replay.py's.

Usage: bench/replay_learned.py [--trace F ...] [--reps 3] [--seconds-per-hour 10] [--fleet artifact]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pal_eval.replay_learned import run


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", action="append", type=Path)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seconds-per-hour", type=float, default=10.0)
    ap.add_argument("--estimate", default="uniform:1:5:42")
    ap.add_argument("--fleet", default="artifact")
    ap.add_argument("--seed", type=int, default=42)
    args = ap.parse_args()
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
