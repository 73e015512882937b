#!/usr/bin/env python3
"""Locality-penalty sweep: how every policy degrades as crossing nodes gets costlier, in both
simulation modes, and whether our policies still beat pal on average JCT without a worse makespan.

Six Sia-Philly traces, 16 x 4 GPUs, Longhorn profiles (PAL artifact, hal-uw/blox-pal, MIT), FIFO.
Usage: bench/lambda_sweep.py [--lambdas 1.0,1.7,2.0,2.5,3.0] [--modes round,event] [--plot FILE]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pal_eval.lambda_sweep import run
from pal_eval.paths import artifact_dir


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--artifact", type=Path, default=artifact_dir())
    ap.add_argument("--lambdas", default="1.0,1.7,2.0,2.5,3.0")
    ap.add_argument("--modes", default="round,event")
    ap.add_argument("--plot", type=Path, help="write avg-JCT-ratio vs lambda per policy (.png)")
    args = ap.parse_args()
    return run(args.artifact, [float(x) for x in args.lambdas.split(",")], args.modes.split(","), args.plot)


if __name__ == "__main__":
    sys.exit(main())
