#!/usr/bin/env python3
"""Time `pal report savings` on 100,000 accounted jobs.

Target: under 2 s (the report an admin reads after a week of observe mode on a busy cluster), as
a user runs it: `pal report savings --by partition --format json` in a subprocess, interpreter
start-up included (the figure compared with the target).
Usage: bench/savings_report.py [--db URL] [--jobs N] [--target-s 2]. Fills a fresh database (SQLite
by default) with N job records over the last 7 days (1-8 GPUs each on 512 nodes x 4 GPUs, factors
0.95-1.3, one in 50 unaccounted), then times, in-process, the database's sums and building the
report (`--by partition`), and the whole CLI. Exit status 1, with a "TARGET MISSED" line, when the
CLI is over the target (or fails).
"""

from __future__ import annotations

import argparse
import sys

from pal_eval.savings_report import TARGET_S, run


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", help="database URL [default: a fresh SQLite file]")
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--target-s", type=float, default=TARGET_S, help=f"the target, CLI seconds [{TARGET_S:g}]")
    args = ap.parse_args()
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
