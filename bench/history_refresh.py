#!/usr/bin/env python3
"""Time the placer's refresh of learned runtimes from an imported sacct history.

The placer re-reads its runtime history every `[placer] classes_refresh_s`, inside a cycle.
A busy site's 90 days are hundreds of thousands of finished jobs (`pal jobs import-history`),
so a full read and re-learning (`history_store.learned_from_history`) holds that cycle for as
long as it takes; the placer keeps a `HistoryReader` instead, which reads only the rows
imported since its last read. This prints both, on a real SQLite database (--db for another),
with --rows synthetic COMPLETED jobs over --keys (user, name) pairs spread over 80 days, then
after --more rows imported since; and checks that the reader's answer equals the full read's.

Targets: the placer's refresh without new imports (its reader's second read) under 0.1 s at
100,000 rows, and the reader's answer equal to the full read's at every refresh. Exit status 1,
with a "TARGET MISSED" line, when either is missed.

Usage: bench/history_refresh.py [--rows 100000] [--keys 6000] [--more 1000] [--db URL] [--target-s 0.1]
"""

from __future__ import annotations

import argparse
import sys

from pal_eval.history_refresh import TARGET_S, run


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--keys", type=int, default=6000, help="about this many (user, job name) pairs")
    ap.add_argument("--more", type=int, default=1000, help="rows imported between the second and third refresh")
    ap.add_argument("--db", default=None, help="database URL (default: a new SQLite file)")
    ap.add_argument("--target-s", type=float, default=TARGET_S,
                    help=f"the target: a refresh without new imports, seconds [{TARGET_S:g}]")
    args = ap.parse_args()
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
