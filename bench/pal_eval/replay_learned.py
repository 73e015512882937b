"""What learned runtimes can buy the replay, in the simulator (bench/replay_learned.py): each
trace's replay plan predicted for the slurm, pal and pal+history arms, ideal scheduler."""

from __future__ import annotations

import argparse

from pal_eval.paths import artifact_dir, longhorn, sia_philly
from pal_eval.replay.arms import ArmSettings
from pal_eval.replay.fleet import draw_fleet, name_fleet, node_names
from pal_eval.replay.plan import plan_replay
from pal_eval.replay.prediction import predict
from pal_slurm.placement.variability import cluster_from_gpus
from pal_slurm.simulate.artifact_draw import load_artifact_profiles
from pal_slurm.simulate.estimates import parse_runtime_estimate
from pal_slurm.simulate.shake import SHAKE_S, shaken
from pal_slurm.simulate.trace_files import read_trace_file


def run(args: argparse.Namespace) -> int:
    """args: bench/replay_learned.py's options."""
    artifact = artifact_dir()
    traces = args.trace or [sia_philly(artifact, w) for w in (1, 4)]
    profiles = load_artifact_profiles(longhorn(artifact))
    gpus = name_fleet(draw_fleet(args.fleet, profiles, 16, 4, args.seed), node_names(16), 4)
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
