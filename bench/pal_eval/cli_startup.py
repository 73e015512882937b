"""How long `pal --help` takes in a fresh interpreter (bench/cli_startup.py)."""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

from pal_eval.paths import REPO
from pal_eval.targets import Targets

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


def run(runs: int, target_s: float) -> int:
    """Each command's median, fastest and slowest over `runs`; the target on `pal --help`'s median."""
    wall_times(["--help"], 1)  # warm the file cache and the bytecode, as a second run finds them
    medians = {}
    for name, argv in COMMANDS:
        times = wall_times(argv, runs)
        medians[name] = statistics.median(times)
        print(f"{name:<22} median {medians[name]:.3f} s  (fastest {min(times):.3f}, slowest {max(times):.3f}; "
              f"{runs} runs)")
    targets = Targets()
    targets.check("pal --help median", medians["pal --help"], "<", target_s, "s")
    return targets.exit_status()
