#!/usr/bin/env python3
"""Which way of turning measurements into slowdown factors serves placement best?

Compares the three classification methods (`pal classify --method`, docs/classification.md):

  bic     K chosen by BIC, one factor per bin (what pal-slurm did before shrink)
  pal-k2  K = 2 plus outliers, one factor per bin (the PAL artifact)
  shrink  BIC's K split further until every bin is within measurement noise, and each GPU's
          own PerfVar shrunk toward its bin by its own noise (the default)

on two fleets, each classified from a fresh SQLite database with the same code as
`pal profile import` + `pal classify --method M`, then simulated as `pal simulate
--variability db --mode event --runtime-estimate uniform:1:5:42` does (same loader, same
cluster, same simulator), with one change that keeps the comparison honest: the simulator
slows jobs by each GPU's TRUE PerfVar, not by the PerfVar the classification measured
(which would favour per-GPU factors by construction: they would be ranked on exactly what
the simulator charges). The policies still rank by the stored factors, as the placer does.

  synthetic  32 nodes x 4 GPUs whose true PerfVars are spread evenly (class A 0.865-1.135,
             B/C 0.92-1.08, D 0.97-1.03, one latent speed per GPU), 5 runs each with 1 %
             run-to-run noise; truth = the known PerfVar.
  longhorn   the PAL artifact's V100 files (resnet50 -> A, bert -> B/C, pagerank -> D);
             pagerank's NVML UUIDs are mapped to the cabinet-node-device names the other two
             files use, so one physical GPU is one row (sgemm names no slot and is left out).
             Classified from every other run of each GPU (min_runs 2); truth = the PerfVar of
             the other runs. A GPU with no held-out run keeps its measured PerfVar.

Also prints the resolution check (can the factors tell apart GPUs a few percent apart?): 12 GPUs
measured evenly over 0.871-1.139 (5 runs each, 1 % noise): distinct factors per method.
Target: the default method (shrink) gives them at least 3 distinct factors; exit status 1, with a
"TARGET MISSED" line, when it does not (the other methods are shown for comparison: bic and
pal-k2 cannot, by design). The placement comparison has no target.

An "oracle" arm ranks by the true PerfVar itself: the most any factors could give.

Usage: bench/classify_resolution.py [--jobs 2000] [--load 0.7] [--seeds 42,43,44,45,46]
       [--fleets synthetic,longhorn] [--artifact-dir DIR] (default: $PAL_ARTIFACT_DIR or
       tests/data/pal-artifact) [--min-factors 3] (the target); --fleets '' runs the resolution
       check alone
Takes a few minutes (fleets x arms x traces x policies simulations); not a test.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pal_eval.classify_resolution import MIN_FACTORS, run
from pal_eval.paths import artifact_dir


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2000, help="jobs per synthetic trace [2000]")
    ap.add_argument("--load", type=float, default=0.7, help="offered load (GPU-seconds / capacity) [0.7]")
    ap.add_argument("--seeds", default="42,43,44,45,46", help="trace seeds; figures are geomeans over them")
    ap.add_argument("--fleets", default="synthetic,longhorn")
    ap.add_argument("--artifact-dir", type=Path, default=artifact_dir())
    ap.add_argument("--min-factors", type=int, default=MIN_FACTORS,
                    help=f"the target: distinct factors of the default method in the resolution check [{MIN_FACTORS}]")
    args = ap.parse_args()
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
