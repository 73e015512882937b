"""What passive speed buys on a drifting fleet: one simulated month, four arms (bench/drift_month.py).

The fleet, the month of recurring jobs and the drift are the same for every arm; what differs is
the policy and what it ranks by (pal_slurm.simulate.drift, pal_slurm.simulate.learning):

- slurm: slurm-backfill, blind to variability;
- snapshot: pal-guard on the benchmark snapshot of t = 0, never updated (no flag, no re-profile,
  so no drifted GPU is ever repaired);
- passive: pal-guard on passive speed, learned every hour from the jobs that finished
  (`PassiveBelief`), its fail-slow flags re-profiled after a delay;
- oracle: pal-guard on the true factors at every moment, every drifted GPU re-profiled the same
  delay after its drift: the floor of what knowing the fleet can give.
- on request, variants of passive (`VARIANTS`): passive-paced, every passive factor resting on
  enough paced jobs placed by (the placer's rule), not only those that disagree with the benchmark;
  passive-all-runs, every run of the window counting for a GPU as `pal gpus learn` has it, also
  those begun before the GPU's latest re-profile; flags-only, placement never takes a passive factor
  (only the fail-slow flags and their re-profiles act); factors-only, no fail-slow monitor
  (placement by passive factors alone, nothing re-profiled, nothing repaired).

The tax is the variability tax of pal_slurm.simulate.tax, charged at the TRUE pace of each stretch
of a job's run; "removed" is (tax_snapshot - tax_passive) / (tax_snapshot - tax_oracle).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from pal_eval.recurring import Workload, draw_fingerprints, trace_of
from pal_eval.targets import Targets

HOUR = 3600.0
TARGET = 0.80
ARMS = ("slurm", "snapshot", "passive", "oracle")
#: the passive arm and its variants: what each changes of the learner's settings
VARIANTS: dict[str, dict[str, object]] = {
    "passive": {}, "passive-paced": {"use": "paced"}, "passive-all-runs": {"since_profile": False},
    "flags-only": {"use_min_paced": 10**9}, "factors-only": {"flags": False},
}
EXTRA_ARMS = tuple(k for k in VARIANTS if k not in ARMS)


@dataclass(frozen=True)
class Setup:
    """The knobs of one month: fleet, workload, drift, the passive arm's learning."""

    nodes: int = 32
    gpus_per_node: int = 8
    fleet: str = "wide"
    seed: int = 1
    workload: Workload = Workload(days=30.0)
    share: float = 0.05
    factor: float = 1.3
    recover_share: float = 0.5
    window_days: float = 14.0
    use_min_paced: int = 10
    reprofile_delay_h: float = 2.0
    every_h: float = 1.0


@dataclass(frozen=True)
class Arm:
    name: str
    result: object  # SimResult
    belief: object
    fleet: object  # TrueFleet
    wall_s: float


def _arm(name: str, setup: Setup, cluster, trace, spec) -> Arm:  # type: ignore[no-untyped-def]
    from pal_slurm.placement.policies import get_policy
    from pal_slurm.simulate.drift import Drifting, FixedBelief, OracleBelief, TrueFleet
    from pal_slurm.simulate.estimates import parse_runtime_estimate
    from pal_slurm.simulate.event import EventOptions, simulate_events
    from pal_slurm.simulate.learning import LearnSettings, PassiveBelief

    fleet = TrueFleet.of(cluster, spec)
    learn = replace(LearnSettings(every_s=setup.every_h * HOUR, window_s=setup.window_days * 24 * HOUR,
                                  use_min_paced=setup.use_min_paced, reprofile_delay_s=setup.reprofile_delay_h * HOUR),
                    **VARIANTS.get(name, {}))  # type: ignore[arg-type]
    beliefs: dict[str, Callable[[], object]] = {
        "slurm": lambda: FixedBelief(cluster), "snapshot": lambda: FixedBelief(cluster),
        "oracle": lambda: OracleBelief(fleet, setup.reprofile_delay_h * HOUR),
    }
    belief = beliefs[name]() if name in beliefs else PassiveBelief(cluster, learn)
    # as bench/pal_eval/recurring.simulate: FIFO, the time limits as the estimates, no locality
    # penalty (every fingerprint keeps one shape, so a penalty would only scale its baseline)
    opts = EventOptions(order="fifo", locality_penalty=1.0, runtime_estimate=parse_runtime_estimate("limit"))
    policy = get_policy("slurm-backfill" if name == "slurm" else "pal-guard")
    t0 = time.perf_counter()
    result = simulate_events(trace, cluster, policy, opts, drift=Drifting(fleet, belief))  # type: ignore[arg-type]
    return Arm(name, result, belief, fleet, time.perf_counter() - t0)


def drift_tax(result, cluster) -> float:  # type: ignore[no-untyped-def]
    """The part of a run's tax the drift added: its tax less what each job would have paid on its
    GPUs at their speed of t = 0 (GPU-seconds)."""
    static = sum(max(0.0, o.gpus * o.nominal_s * (max(cluster.pv(o.job_class)[g] for g in o.gpu_ids) - 1.0))
                 for o in result.outcomes)
    return float(result.metrics.tax_gpu_s - static)


def _h(seconds: float) -> str:
    return f"{seconds / HOUR:.1f} h"


def detection(arm: Arm, keys: Sequence[str], setup: Setup) -> list[str]:
    """One line per drifted GPU of a learning arm (when its flag came, after how many of its jobs),
    then the flags on GPUs that had not drifted."""
    fleet, belief = arm.fleet, arm.belief
    outcomes = arm.result.outcomes  # type: ignore[attr-defined]
    start = {d.gpu: d.at_s for d in fleet.slowdowns}  # type: ignore[attr-defined]
    first_flag: dict[int, object] = {}  # a drifted GPU's first flag after its drift
    false = []  # flags on GPUs running at their speed of t = 0 then
    for f in belief.flags:  # type: ignore[attr-defined]
        if f.gpu in start and f.at >= start[f.gpu]:
            first_flag.setdefault(f.gpu, f)
        else:
            false.append(f)
    lines = []
    delays, counts = [], []
    for d in fleet.slowdowns:  # type: ignore[attr-defined]
        f = first_flag.get(d.gpu)
        what = "fixable" if d.recovers else "stays slow"
        if f is None:
            lines.append(f"  {keys[d.gpu]:>10}  drifted at {_h(d.at_s):>8} ({what}): never flagged")
            continue
        jobs = [o for o in outcomes if d.gpu in o.gpu_ids and d.at_s < o.finish_time <= f.at]
        of_class = sum(1 for o in jobs if o.job_class == f.job_class)
        delays.append((f.at - d.at_s) / HOUR)
        counts.append(len(jobs))
        lines.append(f"  {keys[d.gpu]:>10}  drifted at {_h(d.at_s):>8} ({what}): flagged {_h(f.at - d.at_s)} later "
                     f"(class {f.job_class}), after {len(jobs)} of its jobs ended ({of_class} of class "
                     f"{f.job_class}; CUSUM {f.cusum_jobs} jobs), re-profiled {_h(f.reprofiled_at - d.at_s)} after "
                     f"the drift" if f.reprofiled_at is not None else
                     f"  {keys[d.gpu]:>10}  drifted at {_h(d.at_s):>8} ({what}): flagged {_h(f.at - d.at_s)} later, "
                     f"not yet re-profiled at the end")
    gpus = sorted({f.gpu for f in false})  # type: ignore[attr-defined]
    nodes = sorted({keys[g].split(":")[0] for g in gpus})
    n_flags = len(false)
    head = (f"  flagged {len(delays)} of {len(fleet.slowdowns)} drifted GPUs"  # type: ignore[attr-defined]
            + (f": median {sorted(delays)[len(delays) // 2]:.1f} h after the drift (range {min(delays):.1f}-"
               f"{max(delays):.1f} h), median {sorted(counts)[len(counts) // 2]} of its jobs ended before the flag "
               f"(range {min(counts)}-{max(counts)})" if delays else ""))
    tail = (f"  flags on GPUs running at their speed of t = 0: {n_flags} ({len(gpus)} GPUs on {len(nodes)} nodes; "
            f"the re-profile measured them as they were)")
    visits = {(keys[f.gpu].split(":")[0], f.reprofiled_at) for f in belief.flags  # type: ignore[attr-defined]
              if f.reprofiled_at is not None}
    cost = (f"  re-profiles: {sum(f.reprofiled_at is not None for f in belief.flags)} GPUs in "  # type: ignore[attr-defined]
            f"{len(visits)} node visits (the profiling jobs' own node time is not simulated)")
    return [head, *lines, tail, cost]


def run(setup: Setup, arms: Sequence[str]) -> int:
    from pal_slurm.simulate.drift import DriftSpec
    from pal_slurm.simulate.fleets import parametric_from_spec
    from pal_slurm.simulate.learning import gpu_keys

    cluster = parametric_from_spec(setup.fleet, setup.nodes, setup.gpus_per_node, setup.seed).fleet
    trace = trace_of(draw_fingerprints(setup.workload.fingerprints, setup.seed), setup.workload, cluster.size,
                     setup.seed)
    spec = DriftSpec(share=setup.share, factor=setup.factor, span_hours=setup.workload.days * 24,
                     recover_share=setup.recover_share, seed=setup.seed)
    w = setup.workload
    from pal_slurm.simulate.drift import draw

    drifted = draw(spec, cluster.size)
    print(f"drifting month: {setup.nodes} x {setup.gpus_per_node} = {cluster.size} GPUs, parametric {setup.fleet} "
          f"fleet, seed {setup.seed}; {len(trace.jobs):,} recurring jobs of {w.fingerprints} fingerprints over "
          f"{w.days:g} days at {w.load:.0%} offered load; {len(drifted)} GPUs ({setup.share:.0%}) turn "
          f"{setup.factor:g}x slower for classes {', '.join(spec.classes)} at moments spread over the month, "
          f"{sum(d.recovers for d in drifted)} of them fixable by a re-profile", flush=True)
    print(f"passive arm: every {setup.every_h:g} h, the last {setup.window_days:g} days of finished jobs (a GPU's "
          f"since its latest profile); its passive factor where it paced >= {setup.use_min_paced} jobs of the class "
          f"and disagrees with the benchmark beyond both uncertainties; a flagged GPU re-profiled "
          f"{setup.reprofile_delay_h:g} h later (the oracle: {setup.reprofile_delay_h:g} h after its drift)\n",
          flush=True)
    done: dict[str, Arm] = {}
    for name in arms:
        done[name] = a = _arm(name, setup, cluster, trace, spec)
        m = a.result.metrics  # type: ignore[attr-defined]
        base = done.get("slurm")
        bm = base.result.metrics if base else None  # type: ignore[attr-defined]
        ratio = (f"{m.avg_jct_s / bm.avg_jct_s:6.3f}  {m.makespan_s / bm.makespan_s:6.3f}" if bm else "   -        -")
        print(f"{name:<17} avg JCT {m.avg_jct_s / HOUR:6.3f} h  makespan {m.makespan_s / HOUR:6.1f} h  vs Slurm "
              f"{ratio}  tax {m.tax_gpu_s / HOUR:6.0f} GPU-h ({m.tax_share:5.2%} of GPU time), the drift's "
              f"{drift_tax(a.result, cluster) / HOUR:5.0f}  [{a.wall_s:.0f} s]", flush=True)
    targets = Targets()
    print()
    if {"snapshot", "passive", "oracle"} <= set(done):
        tax = {k: v.result.metrics.tax_gpu_s for k, v in done.items()}  # type: ignore[attr-defined]
        gap = tax["snapshot"] - tax["oracle"]
        print(f"the drift's avoidable tax (snapshot - oracle): {gap / HOUR:.0f} GPU-h")
        learners = [k for k in done if k not in ("slurm", "snapshot", "oracle")]
        own = {k: drift_tax(v.result, cluster) for k, v in done.items()}
        own_gap = own["snapshot"] - own["oracle"]
        for name in learners:
            share = (tax["snapshot"] - tax[name]) / gap if gap > 0 else float("nan")
            part = (own["snapshot"] - own[name]) / own_gap if own_gap > 0 else float("nan")
            print(f"  {name}: removes {(tax['snapshot'] - tax[name]) / HOUR:.0f} GPU-h of it, a share of {share:.3f} "
                  f"(of the tax the drift itself added: {part:.3f})")
        print()
        keys = gpu_keys(cluster)
        for name in [k for k in learners if k != "factors-only"]:
            print(f"{name}: fail-slow flags")
            for line in detection(done[name], keys, setup):
                print(line)
            print()
        share = (tax["snapshot"] - tax["passive"]) / gap if gap > 0 else float("nan")
        targets.check("share of the drift's avoidable tax passive speed removes", share, ">=", TARGET)
    return targets.exit_status()
