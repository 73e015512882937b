#!/usr/bin/env python3
"""What a replay on real Slurm can show, in the simulator: where the gain of pal-slurm over
plain Slurm goes between the ideal simulation and a real cluster (docs/evaluation.md).

For each trace (default Sia-Philly workloads 1 and 4; Longhorn factors drawn with seed 42 on
16 x 4 GPUs; lambda 1.7), the ratio of the pal arm (the placer's policy, --policy, default the
placer's default, pal-guard) to the slurm arm (the replay's model of plain Slurm,
replay.experiment.BASELINE_POLICY: slurm-reserving) of average JCT, p99 JCT and makespan, step
by step:

1. ideal scheduler, estimates = true runtime x U[1,5] per job (bench/vs_slurm.py's setting);
2. the same estimates as Slurm time limits in whole real minutes at k s per trace hour
   (what a replay's jobs ask for: at k = 10 a limit is a multiple of 6 trace hours);
3. plus a real scheduler's latencies (--latencies slurm_start,pal_visible,pal_start,pal_release
   in real seconds, as bench/replay.py's calibration measured them).

Then the lottery in the baseline: plain Slurm's variability-blind choice puts a long
class-A job on the one 2.8x GPU or not depending on which nodes happen to be free, so its
makespan jumps with tiny timing changes. Step 3 is re-run with the Slurm start latency
swept over +-20 % in 21 steps, and the spread of both arms' figures is printed.

With --sweep-k K1,K2,... it prints instead, per trace and compression k (real seconds per trace
hour), how far whole-minute limits move the pal / slurm ratio of average JCT and makespan (step 2
against step 1), how far the latencies move it (step 3 against step 2), and how long one arm of
the replay would take at that k (the predicted Slurm makespan, in real minutes): the table a
faithful time scale is chosen from (neither move above 2 %, the evaluation within its time).
The latencies stay in real seconds whatever k is, as on a real cluster.

Usage: bench/replay_sensitivity.py [--seconds-per-hour 10] [--latencies 0.586,0.481,0.586,0.422]
                                   [--sweep-k 10,30,60,120 [--shakes 6] [--fleet artifact|wide|quiet]]
                                   [--policy pal-guard]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    artifact = Path(os.environ.get("PAL_ARTIFACT_DIR", REPO / "tests/data/pal-artifact"))
    ap.add_argument("--trace", action="append", type=Path)
    ap.add_argument("--seconds-per-hour", type=float, default=10.0)
    ap.add_argument("--estimate", default="uniform:1:5:42")
    ap.add_argument("--latencies", default="0.586,0.481,0.586,0.422",
                    help="slurm start, pal visible, pal start, pal release (real seconds)")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--lambda", dest="penalty", type=float, default=1.7)
    ap.add_argument("--sweep-k", default=None, help="comma-separated k values: the time-scale table (see above)")
    ap.add_argument("--policy", default=None, help="the pal arm's policy (default: the placer's default)")
    ap.add_argument("--fleet", default="artifact", help="with --sweep-k: artifact, wide or quiet (bench/replay.py's)")
    ap.add_argument("--shakes", type=int, default=0,
                    help="with --sweep-k: each figure the mean over this many input-shaken copies (seeds 1..N)")
    args = ap.parse_args()

    from pal_slurm.placement.variability import cluster_from_variability
    from pal_eval.replay.experiment import BASELINE_POLICY, ArmSettings, Latencies, predict
    from pal_eval.replay.plan import plan_replay
    from pal_slurm.simulate.artifact_draw import draw_artifact, load_artifact_profiles
    from pal_slurm.simulate.estimates import parse_runtime_estimate
    from pal_slurm.simulate.traces import read_trace_file

    traces = args.trace or [artifact / "traces" / "sia-philly" / f"workload-{w}.csv" for w in (1, 4)]
    if args.sweep_k:
        from pal_eval.replay.fleet import draw_fleet

        var = draw_fleet(args.fleet, load_artifact_profiles(artifact / "variability" / "longhorn"), 16, 4, args.seed)
    else:
        var = draw_artifact(load_artifact_profiles(artifact / "variability" / "longhorn"), 64, random.Random(args.seed))
    cluster = cluster_from_variability(var, 16, 4)
    s_start, p_vis, p_start, p_rel = (float(x) for x in args.latencies.split(","))
    estimate = parse_runtime_estimate(args.estimate)
    k = args.seconds_per_hour
    policy = {"placer_policy": args.policy} if args.policy else {}
    pal_name = ArmSettings(**policy).placer_policy  # type: ignore[arg-type]
    if args.sweep_k:
        try:
            ks = [float(x) for x in args.sweep_k.split(",") if x.strip()]
        except ValueError:
            print(f"replay_sensitivity: --sweep-k wants numbers, got {args.sweep_k!r}", file=sys.stderr)
            return 2
        lat = {"slurm": Latencies(start_latency_s=s_start),
               "pal": Latencies(visible_after_s=p_vis, start_latency_s=p_start, release_latency_s=p_rel)}
        return sweep(traces, ks, cluster, estimate, lat, args.penalty, policy, args.shakes)
    for path in traces:
        trace = read_trace_file(path)
        plan = plan_replay(trace, seconds_per_hour=k, estimate=estimate, nodes=16, gpus_per_node=4)
        # step 1: the same shapes, but the continuous estimate instead of whole-minute limits
        fine = plan_replay(trace, seconds_per_hour=1e9, estimate=estimate, nodes=16, gpus_per_node=4)
        fine_trace_jobs = tuple(j.job for j in fine.jobs)
        exact_limits = type(plan)(trace=type(plan.trace)(name=trace.name, jobs=tuple(
            _with_limit(j, estimate.before_start(j)) for j in fine_trace_jobs)), jobs=plan.jobs,
            seconds_per_hour=k, nodes=16, gpus_per_node=4, estimate=plan.estimate)
        print(f"\n== {trace.name}: {pal_name} / {BASELINE_POLICY} (avg JCT, p99 JCT, makespan); "
              f"{BASELINE_POLICY}'s own figures in trace hours")
        lat = {"slurm": Latencies(start_latency_s=s_start),
               "pal": Latencies(visible_after_s=p_vis, start_latency_s=p_start, release_latency_s=p_rel)}
        steps = [("1 ideal, estimates x U[1,5]", exact_limits, {}),
                 (f"2 + limits in whole minutes (k={k:g})", plan, {}),
                 ("3 + measured latencies", plan, lat)]
        for label, p, latencies in steps:
            s = ArmSettings(locality_penalty=args.penalty, latencies=latencies, **policy)  # type: ignore[arg-type]
            a, b = predict(p, cluster, "slurm", s).metrics, predict(p, cluster, "pal", s).metrics
            print(f"   {label:<36} {b.avg_jct_s / a.avg_jct_s:6.3f} {b.p99_jct_s / a.p99_jct_s:6.3f} "
                  f"{b.makespan_s / a.makespan_s:6.3f}   (slurm avg {a.avg_jct_s / 3600:.2f} h, "
                  f"makespan {a.makespan_s / 3600:.1f} h)")
        sweep_s, sweep_p = [], []
        for i in range(21):
            f = 0.8 + 0.02 * i
            s = ArmSettings(locality_penalty=args.penalty, latencies={  # type: ignore[arg-type]
                "slurm": Latencies(start_latency_s=s_start * f),
                "pal": Latencies(visible_after_s=p_vis * f, start_latency_s=p_start * f, release_latency_s=p_rel * f)},
                **policy)
            sweep_s.append(predict(plan, cluster, "slurm", s).metrics)
            sweep_p.append(predict(plan, cluster, "pal", s).metrics)
        for name, runs in ((BASELINE_POLICY, sweep_s), (pal_name, sweep_p)):
            mk = [m.makespan_s / 3600 for m in runs]
            avg = [m.avg_jct_s / 3600 for m in runs]
            p99 = [m.p99_jct_s / 3600 for m in runs]
            print(f"   latencies x0.8..1.2, {name:<14} avg JCT {min(avg):.2f}-{max(avg):.2f} h "
                  f"(median {statistics.median(avg):.2f}), p99 {min(p99):.1f}-{max(p99):.1f} h, "
                  f"makespan {min(mk):.1f}-{max(mk):.1f} h "
                  f"(median {statistics.median(mk):.1f}; {sum(m > 1.5 * min(mk) for m in mk)} of 21 runs "
                  f"over 1.5x the shortest)")
    return 0


def _ratios(plan, cluster, settings) -> tuple[float, float, float]:  # noqa: ANN001 - pal/slurm avg, makespan; slurm makespan
    from pal_eval.replay.experiment import predict

    a, b = predict(plan, cluster, "slurm", settings).metrics, predict(plan, cluster, "pal", settings).metrics
    return b.avg_jct_s / a.avg_jct_s, b.makespan_s / a.makespan_s, a.makespan_s


def sweep(traces, ks, cluster, estimate, lat, penalty, policy, shakes) -> int:  # noqa: ANN001 - see --sweep-k
    from pal_eval.replay.experiment import ArmSettings
    from pal_eval.replay.plan import plan_replay
    from pal_slurm.simulate.shake import shaken
    from pal_slurm.simulate.traces import read_trace_file

    ideal = ArmSettings(locality_penalty=penalty, **policy)
    real = ArmSettings(locality_penalty=penalty, latencies=lat, **policy)
    print("pal / slurm of average JCT and makespan: step 1 ideal (continuous estimates), 2 whole-minute limits, "
          "3 + latencies; 'limits' = |2 - 1| / 1, 'latency' = |3 - 2| / 2; one arm's real minutes at k")
    for path in traces:
        base = read_trace_file(path)
        copies = [shaken(base, seed) for seed in range(1, shakes + 1)] or [base]
        print(f"\n== {base.name}" + (f" (each figure the mean of {shakes} shaken copies)" if shakes else ""))
        print(f"   {'k (s/h)':>8} {'avg 1':>7} {'avg 2':>7} {'avg 3':>7} {'limits':>7} {'latency':>8}   "
              f"{'mk 1':>6} {'mk 2':>6} {'mk 3':>6} {'limits':>7} {'latency':>8}   {'arm min':>7}")
        for k in ks:
            figs = []
            for trace in copies:
                fine = plan_replay(trace, seconds_per_hour=1e9, estimate=estimate, nodes=16, gpus_per_node=4)
                plan = plan_replay(trace, seconds_per_hour=k, estimate=estimate, nodes=16, gpus_per_node=4)
                exact = type(plan)(trace=type(plan.trace)(name=trace.name, jobs=tuple(
                    _with_limit(j.job, estimate.before_start(j.job)) for j in fine.jobs)), jobs=plan.jobs,
                    seconds_per_hour=k, nodes=16, gpus_per_node=4, estimate=plan.estimate)
                figs.append((*_ratios(exact, cluster, ideal)[:2], *_ratios(plan, cluster, ideal)[:2],
                             *_ratios(plan, cluster, real)))
            a1, m1, a2, m2, a3, m3, mk = (statistics.fmean(col) for col in zip(*figs))
            print(f"   {k:>8g} {a1:>7.3f} {a2:>7.3f} {a3:>7.3f} {abs(a2 - a1) / a1:>7.1%} {abs(a3 - a2) / a2:>8.1%}   "
                  f"{m1:>6.3f} {m2:>6.3f} {m3:>6.3f} {abs(m2 - m1) / m1:>7.1%} {abs(m3 - m2) / m2:>8.1%}   "
                  f"{mk / 3600 * k / 60:>7.0f}")
    return 0


def _with_limit(job, limit_s):  # noqa: ANN001, ANN202 - a TraceJob with a continuous limit
    from dataclasses import replace

    return replace(job, limit_s=limit_s)


if __name__ == "__main__":
    sys.exit(main())
