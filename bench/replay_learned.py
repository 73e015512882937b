#!/usr/bin/env python3
"""What learned runtimes can buy the replay, in the simulator: the replay's plan of each trace
(shaped, whole-minute limits from the runtime-estimate model, input-shaken per repetition as
bench/replay.py does), predicted for the slurm arm, the pal arm (estimates: the limits) and the
pal+history arm (estimates: what one earlier run's sacct export teaches, each job's runtime on a
median GPU in whole real seconds, never more than its limit; `experiment.predict` with
`learned`), with an ideal scheduler (no latencies). The real arms are bench/replay.py's.

Usage: bench/replay_learned.py [--trace F ...] [--reps 3] [--seconds-per-hour 10] [--fleet artifact]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    artifact = Path(os.environ.get("PAL_ARTIFACT_DIR", REPO / "tests/data/pal-artifact"))
    ap.add_argument("--trace", action="append", type=Path)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seconds-per-hour", type=float, default=10.0)
    ap.add_argument("--estimate", default="uniform:1:5:42")
    ap.add_argument("--fleet", default="artifact")
    ap.add_argument("--seed", type=int, default=42)
    args = ap.parse_args()

    from pal_slurm.placement.variability import cluster_from_gpus
    from pal_eval.replay.experiment import ArmSettings, predict
    from pal_eval.replay.fleet import draw_fleet, name_fleet, node_name
    from pal_eval.replay.plan import plan_replay
    from pal_slurm.simulate.artifact_draw import load_artifact_profiles
    from pal_slurm.simulate.estimates import parse_runtime_estimate
    from pal_slurm.simulate.shake import SHAKE_S, shaken
    from pal_slurm.simulate.traces import read_trace_file

    traces = args.trace or [artifact / "traces" / "sia-philly" / f"workload-{w}.csv" for w in (1, 4)]
    profiles = load_artifact_profiles(artifact / "variability" / "longhorn")
    gpus = name_fleet(draw_fleet(args.fleet, profiles, 16, 4, args.seed), [node_name("pal-r", i, 16) for i in range(16)],
                      4)
    cluster = cluster_from_gpus(gpus)
    estimate = parse_runtime_estimate(args.estimate)
    print(f"fleet {args.fleet} (seed {args.seed}), 16 x 4 GPUs, k = {args.seconds_per_hour:g}, limits {args.estimate}; "
          "ideal scheduler; average JCT and makespan in trace hours")
    for path in traces:
        trace = read_trace_file(path)
        sums = {"slurm": 0.0, "pal": 0.0, "pal+history": 0.0}
        for rep in range(1, args.reps + 1):
            plan = plan_replay(shaken(trace, rep, SHAKE_S), seconds_per_hour=args.seconds_per_hour, estimate=estimate,
                               nodes=16, gpus_per_node=4)
            learned = {j.job.job_id: plan.to_trace_s(max(1.0, round(j.work_s))) for j in plan.jobs}
            got = {arm: predict(plan, cluster, arm, ArmSettings(), learned=learned if arm == "pal+history" else None)
                   .metrics for arm in sums}
            for arm, m in got.items():
                sums[arm] += m.avg_jct_s
            print(f"{trace.name} rep {rep}: avg JCT " + ", ".join(f"{a} {m.avg_jct_s / 3600:.2f}" for a, m in got.items())
                  + "; makespan " + ", ".join(f"{a} {m.makespan_s / 3600:.2f}" for a, m in got.items()))
        print(f"{trace.name}: mean avg JCT pal+history / pal {sums['pal+history'] / sums['pal']:.3f}, "
              f"pal / slurm {sums['pal'] / sums['slurm']:.3f}, pal+history / slurm {sums['pal+history'] / sums['slurm']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
