#!/usr/bin/env python3
"""How long `pal --help` and `pal simulate --help` take, as a user runs them (a fresh interpreter each time).

Target: `pal --help` under 0.3 s (median). Help is what people run first and scripts run most
often (`pal ... --help | grep`), and it needs no database, no numpy and no configuration: the
command modules import those inside the commands that use them (docs/architecture.md, "Rules
we keep"), and tests/cli/test_cli_startup.py checks that help loads none of them.
Usage: bench/cli_startup.py [--runs 9] [--target-s 0.3]. Prints each command's median, fastest and
slowest wall time (`pal simulate --help` for comparison: no target); exit status 1, with a
"TARGET MISSED" line, when `pal --help`'s median is over the target.
"""

from __future__ import annotations

import argparse
import sys

from pal_eval.cli_startup import TARGET_S, run


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=9, help="runs per command [default: 9]")
    ap.add_argument("--target-s", type=float, default=TARGET_S, help=f"the target, median seconds [{TARGET_S}]")
    args = ap.parse_args()
    if args.runs < 1:
        ap.error("--runs must be at least 1")
    return run(args.runs, args.target_s)


if __name__ == "__main__":
    sys.exit(main())
