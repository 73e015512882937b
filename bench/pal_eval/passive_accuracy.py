"""How well passive speed recovers a simulated fleet's true factors (bench/passive_accuracy.py)."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass

import numpy as np

from pal_eval.recurring import Workload, draw_fingerprints, gpu_keys, job_runs, simulate, trace_of
from pal_eval.targets import Targets
from pal_slurm.classification.passive import JobRun, PassiveResult, estimate
from pal_slurm.placement.model import Cluster
from pal_slurm.simulate.fleets import parametric_from_spec

#: the class whose factors are the truth compared against
CLASS = "A"
#: a true factor at or above this is one of the fleet's 1.5x outliers
OUTLIER_TRUTH = 1.45
#: an estimate (or, unresolved, the pace of its runs) at or above this finds a GPU slow
SEEN_SLOW = 1.3
SPEARMAN_TARGET = 0.9
MAE_TARGET = 0.02


def ranks(v: np.ndarray) -> np.ndarray:
    """0-based ranks of `v`, ties sharing their mean rank."""
    order = np.argsort(v, kind="stable")
    _, first, counts = np.unique(v[order], return_index=True, return_counts=True)
    out = np.empty(v.size)
    out[order] = np.repeat(first + (counts - 1) / 2.0, counts)
    return out


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rank correlation."""
    return float(np.corrcoef(ranks(x), ranks(y))[0, 1])


@dataclass(frozen=True)
class Accuracy:
    eligible: int
    resolved: int
    spearman: float
    mae: float
    p90: float
    worst: float
    company: Counter[int]  # unresolved: size of the company they never ran without -> GPUs
    outliers: list[str]  # one line each
    found: int
    missed: int
    false_alarms: int  # healthy GPUs estimated at >= SEEN_SLOW
    suspects: int  # healthy GPUs without an estimate whose jobs ran at >= SEEN_SLOW


def accuracy(result: PassiveResult, cluster: Cluster, runs: list[JobRun], min_jobs: int) -> Accuracy:
    """Class-A figures over the GPUs with at least `min_jobs` finished class-A jobs."""
    keys = gpu_keys(cluster)
    truth = dict(zip(keys, cluster.pv(CLASS)))
    jobs = Counter(g for r in runs if r.job_class == CLASS for g in r.gpus)
    eligible = [k for k in keys if jobs[k] >= min_jobs]
    est = {e.gpu: e for e in result.estimates if e.job_class == CLASS}
    bound = {b.gpu: b for b in result.bounds if b.job_class == CLASS}
    resolved = [k for k in eligible if k in est]
    t = np.array([truth[k] for k in resolved])
    e = np.array([est[k].factor for k in resolved])
    err = np.abs(e / (t / np.median(t)) - 1) if resolved else np.zeros(1)
    lines, found, missed = [], 0, 0
    for k in (k for k in keys if truth[k] >= OUTLIER_TRUTH):
        if k in est:
            ok = est[k].factor >= SEEN_SLOW
            lines.append(f"{k}: true {truth[k]:.3f}, estimate {est[k].factor:.3f} [{est[k].low:.3f}-{est[k].high:.3f}] "
                         f"from {est[k].paced} of its {est[k].jobs} jobs: {'found' if ok else 'MISSED'}")
        elif k in bound:
            ok = bound[k].upper >= SEEN_SLOW
            lines.append(f"{k}: true {truth[k]:.3f}, no estimate; its {bound[k].jobs} jobs ran at {bound[k].upper:.3f} "
                         f"always with {len(bound[k].always_with)} other GPU(s): "
                         f"{'found as one of that group' if ok else 'MISSED'}")
        else:
            ok = False
            lines.append(f"{k}: true {truth[k]:.3f}, no class-{CLASS} job: MISSED")
        found, missed = found + ok, missed + (not ok)
    return Accuracy(eligible=len(eligible), resolved=len(resolved), spearman=spearman(t, e) if resolved else 0.0,
                    mae=float(np.median(err)), p90=float(np.percentile(err, 90)), worst=float(err.max()),
                    company=Counter(len(bound[k].always_with) + 1 for k in eligible if k in bound), outliers=lines,
                    found=found, missed=missed,
                    false_alarms=sum(e.factor >= SEEN_SLOW and truth[k] < OUTLIER_TRUTH for k, e in est.items()),
                    suspects=sum(b.upper >= SEEN_SLOW and truth[k] < OUTLIER_TRUTH for k, b in bound.items()))


def run_seed(nodes: int, gpus_per_node: int, workload: Workload, seed: int, min_jobs: int) -> Accuracy:
    t0 = time.perf_counter()
    fleet = parametric_from_spec("wide", nodes, gpus_per_node, seed)
    cluster = fleet.fleet
    trace = trace_of(draw_fingerprints(workload.fingerprints, seed), workload, cluster.size, seed)
    sim = simulate(trace, cluster)
    runs = job_runs(trace, sim, cluster)
    t1 = time.perf_counter()
    result = estimate(runs)
    t2 = time.perf_counter()
    by_class = Counter(r.job_class for r in runs)
    print(f"\n== seed {seed}: {cluster.size} GPUs ({nodes} x {gpus_per_node}), wide fleet with {fleet.outlier_count} "
          f"GPUs at 1.5x; {len(runs)} jobs ({', '.join(f'{c} {n}' for c, n in sorted(by_class.items()))}) "
          f"of {workload.fingerprints} fingerprints over {workload.days:g} days, utilization "
          f"{sim.metrics.utilization:.2f}; simulated in {t1 - t0:.1f} s, estimated in {t2 - t1:.2f} s")
    print(f"skipped rows: {dict(result.skipped) or 'none'}; estimates {len(result.estimates)}, "
          f"bounds only {len(result.bounds)}, baselines {len(result.baselines)}")
    acc = accuracy(result, cluster, runs, min_jobs)
    print(f"class {CLASS}, GPUs with >= {min_jobs} finished jobs: {acc.eligible}; with an estimate {acc.resolved}; "
          f"the others by the company they never ran without (its size, the GPU included -> GPUs; 1: none, but never "
          f"clearly the slowest of a job): {dict(sorted(acc.company.items()))}")
    print(f"over the {acc.resolved} estimated: Spearman vs true factor {acc.spearman:.3f}, |error| median "
          f"{acc.mae:.2%}, p90 {acc.p90:.2%}, worst {acc.worst:.2%}")
    print(identifiable(result, cluster, runs, min_jobs))
    for line in acc.outliers:
        print("  outlier " + line)
    print(f"outliers found {acc.found}, missed {acc.missed}; healthy GPUs estimated at >= {SEEN_SLOW}: "
          f"{acc.false_alarms}; healthy GPUs without an estimate whose jobs ran at >= {SEEN_SLOW} (they share "
          f"the outliers' jobs: suspects the benchmark clears): {acc.suspects}")
    return acc


def identifiable(result: PassiveResult, cluster: Cluster, runs: list[JobRun], min_jobs: int, alone: int = 3) -> str:
    """How far the estimates reach what run times can tell: the GPUs with at least `min_jobs`
    class-A jobs that ran `alone` of them on no other GPU (their speed is in their own run times
    whatever the estimator) and how many of those got an estimate; and, for the record, Spearman
    over every such GPU with a bound's upper value standing in for a missing estimate (a job's
    pace says nothing of its GPUs that were not its slowest)."""
    keys = gpu_keys(cluster)
    truth = dict(zip(keys, cluster.pv(CLASS)))
    jobs = Counter(g for r in runs if r.job_class == CLASS for g in r.gpus)
    solo = Counter(r.gpus[0] for r in runs if r.job_class == CLASS and len(r.gpus) == 1)
    eligible = [k for k in keys if jobs[k] >= min_jobs]
    est = {e.gpu: e.factor for e in result.estimates if e.job_class == CLASS}
    upper = {b.gpu: b.upper for b in result.bounds if b.job_class == CLASS}
    ident = [k for k in eligible if solo[k] >= alone]
    both = [k for k in eligible if k in est or k in upper]
    rho = spearman(np.array([truth[k] for k in both]), np.array([est.get(k, upper.get(k, 0.0)) for k in both]))
    return (f"identifiable alone (>= {alone} class-{CLASS} jobs on that GPU only): {len(ident)}, estimated "
            f"{sum(k in est for k in ident)}; estimated from shared jobs: {sum(k in est for k in eligible) - sum(k in est for k in ident)}; "
            f"Spearman over all {len(both)} with a bound's upper value for a missing estimate: {rho:.3f}")


def run(nodes: int, gpus_per_node: int, workload: Workload, seeds: list[int], min_jobs: int) -> int:
    print(f"recurring workload: {workload}; placement slurm-backfill (blind to variability)")
    results = {s: run_seed(nodes, gpus_per_node, workload, s, min_jobs) for s in seeds}
    targets = Targets()
    print()
    targets.check("worst seed's Spearman (estimated GPUs)", min(a.spearman for a in results.values()), ">=",
                  SPEARMAN_TARGET)
    targets.check("worst seed's median |error| (estimated GPUs)", max(a.mae for a in results.values()) * 100, "<=",
                  MAE_TARGET * 100, "%", digits=2)
    targets.check("healthy GPUs estimated at >= 1.3 (all seeds)", sum(a.false_alarms for a in results.values()),
                  "<=", 0, digits=0)
    targets.state(all(a.missed == 0 for a in results.values()),
                  f"every 1.5x outlier found, on its own or as one of its group: "
                  f"{sum(a.found for a in results.values())} of {sum(a.found + a.missed for a in results.values())}")
    return targets.exit_status()
