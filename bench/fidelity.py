#!/usr/bin/env python3
"""Paper fidelity: round mode vs the PAL artifact's own results on the six Sia-Philly traces.

16 nodes x 4 GPUs, FIFO, 360 s rounds, lambda 1.7, Longhorn profiles: for every policy and
trace, our average JCT next to the artifact's (tests/data/pal-artifact/reference/,
obtained by running the artifact unchanged) and the difference in percent; then each policy's
geomean improvement over both packed baselines, and our own policies next to pal. Data: PAL
artifact (hal-uw/blox-pal, branch artifact), MIT.

Targets: every artifact policy on every trace within 2 % of the artifact's average JCT (the
largest |difference| is the figure compared); the six artifact policies on the six traces
simulated in under 30 s, wall time (checked only when all six traces run). Exit status 1, with
a "TARGET MISSED" line, when either is missed.

Usage: bench/fidelity.py [--artifact DIR] [--json FILE] [--traces 1,...,6] [--max-diff-pct 2]
                         [--target-s 30]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pal_eval.fidelity import ALL_TRACES, MAX_DIFF_PCT, TARGET_S, run
from pal_eval.paths import artifact_dir


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--artifact", type=Path, default=artifact_dir())
    ap.add_argument("--json", type=Path, help="also write the figures as JSON")
    ap.add_argument("--traces", default=",".join(map(str, ALL_TRACES)), help="Sia-Philly workloads [1,...,6]")
    ap.add_argument("--max-diff-pct", type=float, default=MAX_DIFF_PCT,
                    help=f"the target: largest |difference| from the artifact's average JCT, percent [{MAX_DIFF_PCT:g}]")
    ap.add_argument("--target-s", type=float, default=TARGET_S,
                    help=f"the target: the six artifact policies x six traces, seconds [{TARGET_S:g}]")
    args = ap.parse_args()
    try:
        numbers = sorted({int(t) for t in args.traces.split(",") if t})
    except ValueError:
        numbers = []
    if not numbers or not set(numbers) <= set(ALL_TRACES):
        ap.error(f"--traces takes Sia-Philly workload numbers out of 1-6, got {args.traces!r}")
    return run(args.artifact, numbers, args.json, args.max_diff_pct, args.target_s)


if __name__ == "__main__":
    sys.exit(main())
