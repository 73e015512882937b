#!/usr/bin/env python3
"""pal-slurm against Slurm as shipped, in the event simulator: the claim an admin asks about.

Baseline: slurm-backfill (cons_tres's variability-blind first fit, sched/backfill's EASY
backfilling on time limits; pal_slurm.placement.slurm_backfill). Against it: our default
policy pal-match (and pal-backfill, and PAL itself). Event mode (continuous time, no
preemption, as Slurm runs jobs), 16 x 4 GPUs, Longhorn profiles drawn as the PAL artifact
draws them (seed 42), FIFO, the six Sia-Philly traces (PAL artifact, hal-uw/blox-pal, MIT).
Policies never see exact runtimes in the headline: each job's runtime is told to them as
its true runtime x a per-job factor from U[1, 5] (`--estimate uniform:1:5`), like time
limits padded by different amounts; jobs run their true time.

Prints, per lambda: per trace the ratio policy / slurm-backfill of average JCT, p99 JCT and
makespan; then the geomean and the worst trace. Target (issue 10): pal-match below 1.0 on
all three for every trace, at lambda 1.0, 1.7 and 3.0.

Usage: bench/vs_slurm.py [--lambdas 1.0,1.7,3.0] [--estimate uniform:1:5] [--seed 42]
                         [--policies pal-match,pal-backfill,pal]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

BASE = "slurm-backfill"
METRICS = (("avg_jct_s", "avg JCT"), ("p99_jct_s", "p99 JCT"), ("makespan_s", "makespan"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--artifact", type=Path,
                    default=Path(os.environ.get("PAL_ARTIFACT_DIR", REPO.parent / "shared/data/pal-artifact")))
    ap.add_argument("--lambdas", default="1.0,1.7,3.0")
    ap.add_argument("--estimate", default="uniform:1:5")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--policies", default="pal-match,pal-backfill,pal")
    args = ap.parse_args()
    if not (args.artifact / "traces").is_dir():
        print(f"vs_slurm: no artifact data at {args.artifact}", file=sys.stderr)
        return 2

    from pal_slurm.simulate.artifact_draw import load_artifact_profiles
    from pal_slurm.simulate.estimates import parse_runtime_estimate
    from pal_slurm.simulate.runner import ArtifactVariability, SimulationSpec, run_one
    from pal_slurm.simulate.traces import read_trace_file

    traces = [read_trace_file(args.artifact / "traces/sia-philly" / f"workload-{i}.csv", max_gpus=64)
              for i in range(1, 7)]
    var = ArtifactVariability(load_artifact_profiles(args.artifact / "variability/longhorn"), 16, 4)
    estimate = parse_runtime_estimate(args.estimate)
    policies = [p for p in args.policies.split(",") if p]
    ok = True
    print(f"event mode, 16x4 GPUs, Longhorn seed {args.seed}, FIFO, runtime estimate {estimate.describe()}; "
          f"ratio = policy / {BASE} (< 1 is better)")
    for lam in (float(x) for x in args.lambdas.split(",")):
        spec = SimulationSpec(traces=tuple(traces), policies=(BASE, *policies), variability=var, mode="event",
                              locality_penalty=lam, seed=args.seed, runtime_estimate=estimate)
        t0 = time.perf_counter()
        res = {(t.name, p): run_one(t, p, spec).metrics.as_dict() for t in traces for p in (BASE, *policies)}
        print(f"\n== lambda {lam:g} ({time.perf_counter() - t0:.0f} s)")
        head = f"{'trace':<12}" + "".join(f"{p + ' ' + label:>26}" for p in policies for _k, label in METRICS)
        print(head)
        ratios: dict[tuple[str, str], list[float]] = {}
        for t in traces:
            row = f"{t.name:<12}"
            for p in policies:
                for key, _label in METRICS:
                    r = res[(t.name, p)][key] / res[(t.name, BASE)][key]
                    ratios.setdefault((p, key), []).append(r)
                    row += f"{r:>26.3f}"
            print(row)
        for what, fn in (("geomean", lambda xs: math.exp(sum(map(math.log, xs)) / len(xs))), ("worst", max)):
            row = f"{what:<12}"
            for p in policies:
                for key, _label in METRICS:
                    row += f"{fn(ratios[(p, key)]):>26.3f}"
            print(row)
        base_h = {k: math.exp(sum(math.log(res[(t.name, BASE)][k]) for t in traces) / len(traces)) / 3600
                  for k, _l in METRICS}
        print(f"{BASE} geomean: avg JCT {base_h['avg_jct_s']:.1f} h, p99 {base_h['p99_jct_s']:.1f} h, "
              f"makespan {base_h['makespan_s']:.1f} h")
        worst = max(max(ratios[("pal-match", k)]) for k, _l in METRICS) if "pal-match" in policies else None
        if worst is not None:
            met = worst < 1.0
            ok = ok and met
            print(f"target: pal-match beats {BASE} on avg JCT, p99 and makespan on every trace: "
                  f"{'MET' if met else 'NOT MET'} (worst ratio {worst:.3f})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
