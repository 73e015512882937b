"""What a replay on real Slurm can show, in the simulator (bench/replay_sensitivity.py): the pal /
slurm ratios step by step from the ideal simulation to a real cluster's whole-minute limits and
latencies, the baseline's lottery under latencies +-20 %, and (--sweep-k) the time-scale table."""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from pal_eval.paths import artifact_dir, longhorn, sia_philly
from pal_eval.replay.arms import ArmSettings, Latencies
from pal_eval.replay.fleet import draw_fleet
from pal_eval.replay.plan import ReplayPlan, plan_replay
from pal_eval.replay.prediction import BASELINE_POLICY, predict
from pal_slurm.placement.variability import cluster_from_variability
from pal_slurm.simulate.artifact_draw import draw_artifact, load_artifact_profiles
from pal_slurm.simulate.estimates import RuntimeEstimate, parse_runtime_estimate
from pal_slurm.simulate.shake import shaken
from pal_slurm.simulate.trace_files import read_trace_file

#: each arm's latencies (real seconds): what bench/replay.py's calibration measures
ArmLatencies = dict[str, Latencies]


def run(args: argparse.Namespace) -> int:
    """args: bench/replay_sensitivity.py's options."""
    artifact = artifact_dir()
    traces = args.trace or [sia_philly(artifact, w) for w in (1, 4)]
    if args.sweep_k:
        var = draw_fleet(args.fleet, load_artifact_profiles(longhorn(artifact)), 16, 4, args.seed)
    else:
        var = draw_artifact(load_artifact_profiles(longhorn(artifact)), 64, random.Random(args.seed))
    cluster = cluster_from_variability(var, 16, 4)
    s_start, p_vis, p_start, p_rel = (float(x) for x in args.latencies.split(","))
    estimate = parse_runtime_estimate(args.estimate)
    policy = {"placer_policy": args.policy} if args.policy else {}

    def latencies(f: float = 1.0) -> ArmLatencies:
        """The measured latencies, each times `f`."""
        return {"slurm": Latencies(start_latency_s=s_start * f),
                "pal": Latencies(visible_after_s=p_vis * f, start_latency_s=p_start * f, release_latency_s=p_rel * f)}

    if args.sweep_k:
        try:
            ks = [float(x) for x in args.sweep_k.split(",") if x.strip()]
        except ValueError:
            print(f"replay_sensitivity: --sweep-k wants numbers, got {args.sweep_k!r}", file=sys.stderr)
            return 2
        return sweep(traces, ks, cluster, estimate, latencies(), args.penalty, policy, args.shakes)
    for path in traces:
        steps(path, args.seconds_per_hour, cluster, estimate, latencies, args.penalty, policy)
    return 0


def exact_limits(trace: Any, k: float, estimate: RuntimeEstimate) -> tuple[ReplayPlan, ReplayPlan]:
    """The trace's replay plan at k, and the same plan with each job's continuous estimate as its
    limit instead of whole minutes (step 1)."""
    plan = plan_replay(trace, seconds_per_hour=k, estimate=estimate, nodes=16, gpus_per_node=4)
    fine = plan_replay(trace, seconds_per_hour=1e9, estimate=estimate, nodes=16, gpus_per_node=4)
    exact = type(plan)(trace=type(plan.trace)(name=trace.name, jobs=tuple(
        replace(j.job, limit_s=estimate.before_start(j.job)) for j in fine.jobs)), jobs=plan.jobs,
        seconds_per_hour=k, nodes=16, gpus_per_node=4, estimate=plan.estimate)
    return plan, exact


def steps(path: Path, k: float, cluster: Any, estimate: RuntimeEstimate, latencies: Any, penalty: float,
          policy: dict[str, str]) -> None:
    """One trace: steps 1-3, then step 3 with every latency x 0.8..1.2 (the lottery)."""
    trace = read_trace_file(path)
    plan, exact = exact_limits(trace, k, estimate)
    pal_name = ArmSettings(**policy).placer_policy  # type: ignore[arg-type]
    print(f"\n== {trace.name}: {pal_name} / {BASELINE_POLICY} (avg JCT, p99 JCT, makespan); "
          f"{BASELINE_POLICY}'s own figures in trace hours")
    for label, p, lat in (("1 ideal, estimates x U[1,5]", exact, {}),
                          (f"2 + limits in whole minutes (k={k:g})", plan, {}),
                          ("3 + measured latencies", plan, latencies())):
        s = ArmSettings(locality_penalty=penalty, latencies=lat, **policy)  # type: ignore[arg-type]
        a, b = predict(p, cluster, "slurm", s).metrics, predict(p, cluster, "pal", s).metrics
        print(f"   {label:<36} {b.avg_jct_s / a.avg_jct_s:6.3f} {b.p99_jct_s / a.p99_jct_s:6.3f} "
              f"{b.makespan_s / a.makespan_s:6.3f}   (slurm avg {a.avg_jct_s / 3600:.2f} h, "
              f"makespan {a.makespan_s / 3600:.1f} h)")
    sweep_s, sweep_p = [], []
    for i in range(21):
        s = ArmSettings(locality_penalty=penalty, latencies=latencies(0.8 + 0.02 * i), **policy)  # type: ignore[arg-type]
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


def _ratios(plan, cluster, settings) -> tuple[float, float, float]:  # noqa: ANN001 - pal/slurm avg, makespan; slurm makespan
    a, b = predict(plan, cluster, "slurm", settings).metrics, predict(plan, cluster, "pal", settings).metrics
    return b.avg_jct_s / a.avg_jct_s, b.makespan_s / a.makespan_s, a.makespan_s


def sweep(traces, ks, cluster, estimate, lat, penalty, policy, shakes) -> int:  # noqa: ANN001 - see --sweep-k
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
                plan, exact = exact_limits(trace, k, estimate)
                figs.append((*_ratios(exact, cluster, ideal)[:2], *_ratios(plan, cluster, ideal)[:2],
                             *_ratios(plan, cluster, real)))
            a1, m1, a2, m2, a3, m3, mk = (statistics.fmean(col) for col in zip(*figs))
            print(f"   {k:>8g} {a1:>7.3f} {a2:>7.3f} {a3:>7.3f} {abs(a2 - a1) / a1:>7.1%} {abs(a3 - a2) / a2:>8.1%}   "
                  f"{m1:>6.3f} {m2:>6.3f} {m3:>6.3f} {abs(m2 - m1) / m1:>7.1%} {abs(m3 - m2) / m2:>8.1%}   "
                  f"{mk / 3600 * k / 60:>7.0f}")
    return 0
