#!/usr/bin/env python3
"""How long `pal --help` and `pal simulate --help` take, as a user runs them (a fresh interpreter each time).

Target: `pal --help` under 0.3 s (median). Help is what people run first and scripts run most
often (`pal ... --help | grep`), and it needs no database, no numpy and no configuration: the
command modules import those inside the commands that use them (docs/architecture.md, "Rules
we keep"), and tests/test_cli_startup.py checks that help loads none of them.
Usage: bench/cli_startup.py [--runs 9] [--target-s 0.3]. Prints each command's median, fastest and
slowest wall time (`pal simulate --help` for comparison: no target); exit status 1, with a
"TARGET MISSED" line, when `pal --help`'s median is over the target.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

from targets import Targets

REPO = Path(__file__).resolve().parent.parent
TARGET_S = 0.3
COMMANDS = (("pal --help", ["--help"]), ("pal simulate --help", ["simulate", "--help"]))


def wall_times(args: list[str], runs: int) -> list[float]:
    """`runs` wall times of `python -m pal_slurm ARGS` (the `pal` console script runs the same
    code; the module form needs no installed script)."""
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "pal_slurm", *args], cwd=REPO, check=True,
                       stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - t0)
    return times


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=9, help="runs per command [default: 9]")
    ap.add_argument("--target-s", type=float, default=TARGET_S, help=f"the target, median seconds [{TARGET_S}]")
    args = ap.parse_args()
    if args.runs < 1:
        ap.error("--runs must be at least 1")
    wall_times(["--help"], 1)  # warm the file cache and the bytecode, as a second run finds them
    medians = {}
    for name, argv in COMMANDS:
        times = wall_times(argv, args.runs)
        medians[name] = statistics.median(times)
        print(f"{name:<22} median {medians[name]:.3f} s  (fastest {min(times):.3f}, slowest {max(times):.3f}; "
              f"{args.runs} runs)")
    targets = Targets()
    targets.check("pal --help median", medians["pal --help"], "<", args.target_s, "s")
    return targets.exit_status()


if __name__ == "__main__":
    sys.exit(main())
