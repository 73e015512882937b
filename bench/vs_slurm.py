#!/usr/bin/env python3
"""pal-slurm's default policy against Slurm as shipped, over a matrix of fleets, traces and lambdas.

The claim an admin asks about: does pal-slurm ever make my jobs finish later, and how much
sooner do they finish where my GPUs really differ? Event mode (continuous time, no
preemption), 16 x 4 GPUs, FIFO, jobs in the shape they are submitted as (one node when it
fits, else the fewest nodes that split them evenly; the same slots on every node where the
placer steers them), runtimes known to the policies only as the true runtime x U[1, 5]
(padded time limits). Baselines:

- `slurm-backfill`: Slurm as shipped (cons_tres's first fit, sched/backfill on limits);
- the same on the cluster left after `pal gpus drain`'s recommendation (every node with a
  GPU at PerfVar >= [report] drain_perfvar, 1.3, drained). What pal-slurm adds beyond
  draining is its value.

`--baseline slurm-reserving` compares against Slurm's own backfill planning and node choice
instead (pal_slurm.placement.slurm_reserving: the model the real-Slurm replay predicts plain
Slurm with), where the default measures the variability choice alone on one shared mechanism.

Fleets (variability models, pal_slurm.simulate.fleets): Longhorn's per-run draw, seeds 42,
1, 2, 3 (the PAL artifact's draw, kept for continuity: its outliers are single warm-up
runs); Longhorn per GPU (each GPU the median of its runs, as `pal classify` sees it);
parametric narrow, wide and wide-2x, seeds 1 and 2; uniform 1.0. Traces: the six
Sia-Philly workloads (PAL artifact, hal-uw/blox-pal, MIT). Lambda 1.0, 1.7, 3.0.

**Input shaking.** A scheduler is chaotic: moving every arrival by at most a trace minute
moves plain Slurm's own average JCT on one trace by tens of percent. So each cell runs
`--shakes` copies of its trace (arrivals moved by up to 5 trace minutes, seeds 1..N; the
pal and Slurm arms see the same copies) and compares the means. One cell's ratio is
mean(policy) / mean(baseline) over those copies.

Prints one line per fleet: the geomean over its cells of avg JCT, p99 JCT and makespan
against Slurm, its worst cell, the avg JCT against Slurm after drain, the share of the
baseline's variability tax the policy removes (of all of it, and of the part above the floor
no schedule keeping the jobs' shapes can go below: pal_slurm.simulate.tax.unavoidable_tax)
and the queue wait it adds; then the targets, one line each ("target met" / "TARGET MISSED"):
no cell worse than 1.02 x the baseline; on the uniform fleet (against slurm-backfill) every
start identical; on the spread fleets (wide-*) geomean avg JCT <= 0.80 and makespan <= 0.90,
<= 0.92 after drain, tax removed >= 80 % (all of it, and of the avoidable part) with the added
wait under 2 %. Exit status 1 when one is missed.

Usage: bench/vs_slurm.py [--policy pal-guard] [--shakes 4] [--lambdas 1.0,1.7,3.0]
                         [--fleets NAME,...] [--traces 1,...,6] [--jobs N] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from targets import Targets  # noqa: E402

#: the model of Slurm each cell compares against (--baseline; set in every worker by _use_baseline)
BASE = "slurm-backfill"
METRICS = ("avg_jct_s", "p99_jct_s", "makespan_s")
ARTIFACT = Path(os.environ.get("PAL_ARTIFACT_DIR", REPO / "tests/data/pal-artifact"))
FLEETS = ("longhorn-run-42", "longhorn-run-1", "longhorn-run-2", "longhorn-run-3", "longhorn-gpu",
          "narrow-1", "narrow-2", "wide-1", "wide-2", "wide-2x-1", "wide-2x-2", "uniform")
#: fleets whose GPUs really differ: the gain targets apply to them
SPREAD = ("wide-1", "wide-2", "wide-2x-1", "wide-2x-2")


@dataclass(frozen=True)
class Cell:
    fleet: str
    trace: int
    lam: float


def fleet_cluster(name: str):  # noqa: ANN201 - a Cluster
    """The fleet's cluster, the same in every run (its own seed)."""
    from pal_slurm.simulate.artifact_draw import load_artifact_profiles
    from pal_slurm.simulate.fleets import PerGpuVariability, parametric_from_spec
    from pal_slurm.simulate.runner import ArtifactVariability

    if name.startswith("longhorn"):
        profiles = load_artifact_profiles(ARTIFACT / "variability/longhorn")
        if name == "longhorn-gpu":
            return PerGpuVariability(profiles, 16, 4).cluster(random.Random(42))
        return ArtifactVariability(profiles, 16, 4).cluster(random.Random(int(name.rsplit("-", 1)[1])))
    preset, _, seed = name.rpartition("-") if name != "uniform" else ("uniform", "", "1")
    return parametric_from_spec(preset, 16, 4, int(seed)).cluster(random.Random(0))


def run_cell(cell: Cell, policy: str, shakes: int) -> dict:
    """Every shaken copy of the cell's trace under the policy, Slurm, and Slurm after drain."""
    from pal_slurm.errors import InputError
    from pal_slurm.placement.policies import get_policy
    from pal_slurm.simulate.drain import check_drain_fits, drained
    from pal_slurm.simulate.estimates import parse_runtime_estimate
    from pal_slurm.simulate.event import EventOptions, simulate_events
    from pal_slurm.simulate.shake import shaken
    from pal_slurm.simulate.traces import read_trace_file

    cluster = fleet_cluster(cell.fleet)
    after, drained_nodes = drained(cluster)
    trace = read_trace_file(ARTIFACT / "traces/sia-philly" / f"workload-{cell.trace}.csv", max_gpus=64)
    opts = EventOptions(locality_penalty=cell.lam, runtime_estimate=parse_runtime_estimate("uniform:1:5"))
    drain_ok: str | None = None
    try:
        check_drain_fits(trace, after, drained_nodes)
    except InputError as exc:
        drain_ok = str(exc)
    out: dict = {"runs": {policy: [], BASE: [], "drain": []}, "drained": list(drained_nodes), "drain_error": drain_ok}
    for seed in range(1, shakes + 1):
        t = shaken(trace, seed)
        for name, c, pol in ((policy, cluster, policy), (BASE, cluster, BASE), ("drain", after, BASE)):
            if name == "drain" and drain_ok is not None:
                continue
            r = simulate_events(t, c, get_policy(pol), opts)
            m = r.metrics
            out["runs"][name].append({
                "avg_jct_s": m.avg_jct_s, "p99_jct_s": m.p99_jct_s, "makespan_s": m.makespan_s,
                "tax_gpu_s": m.tax_gpu_s, "tax_share": m.tax_share, "wait_s": m.avg_queue_delay_s,
                "best_free_gpu_s": r.tax_best_free_gpu_s, "floor_gpu_s": r.tax_unavoidable_gpu_s,
                "starts": [(o.start_time, o.gpu_ids) for o in r.outcomes] if cell.fleet == "uniform" else None})
    return out


def mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def geomean(xs: list[float]) -> float:
    return math.exp(sum(map(math.log, xs)) / len(xs))


def matrix_cells(args: argparse.Namespace) -> list[Cell] | str:
    """The cells of `--fleets`, `--traces` and `--lambdas` (and `--shakes` checked), or what is wrong
    with them, in words (shared with bench/faster_fleet.py)."""
    if not (ARTIFACT / "traces").is_dir():
        return f"no artifact data at {ARTIFACT} (set PAL_ARTIFACT_DIR)"
    fleets = [f for f in args.fleets.split(",") if f]
    unknown = sorted(set(fleets) - set(FLEETS))
    if unknown:
        return f"unknown fleet(s) {unknown}; known: {', '.join(FLEETS)}"
    if args.shakes < 1:
        return "--shakes must be at least 1"
    try:
        traces = [int(t) for t in args.traces.split(",") if t]
        lambdas = [float(lam) for lam in args.lambdas.split(",") if lam]
    except ValueError as exc:
        return f"--traces takes workload numbers (1,...,6) and --lambdas numbers: {exc}"
    missing = [t for t in traces if not (ARTIFACT / "traces/sia-philly" / f"workload-{t}.csv").is_file()]
    if missing:
        return f"no such trace(s) {missing} under {ARTIFACT / 'traces/sia-philly'}"
    if not fleets or not traces or not lambdas:
        return "--fleets, --traces and --lambdas need at least one value each"
    return [Cell(f, t, lam) for f in fleets for t in traces for lam in lambdas]


def _use_baseline(name: str) -> None:
    global BASE
    BASE = name


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policy", default="pal-guard")
    ap.add_argument("--baseline", default=BASE, choices=("slurm-backfill", "slurm-reserving"),
                    help="the model of Slurm to compare against: slurm-backfill (EASY and first fit, the mechanism "
                         "pal-slurm's policies share; the default) or slurm-reserving (Slurm's own backfill "
                         "planning and cons_tres's node choice, what the real-Slurm replay predicts Slurm with)")
    ap.add_argument("--shakes", type=int, default=4, help="shaken copies of each trace per cell (default 4)")
    ap.add_argument("--lambdas", default="1.0,1.7,3.0")
    ap.add_argument("--fleets", default=",".join(FLEETS))
    ap.add_argument("--traces", default="1,2,3,4,5,6")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes")
    ap.add_argument("--json", type=Path, help="also write every cell's figures here")
    args = ap.parse_args()
    cells = matrix_cells(args)
    if isinstance(cells, str):
        print(f"vs_slurm: {cells}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    _use_baseline(args.baseline)
    with ProcessPoolExecutor(max_workers=max(args.jobs, 1), initializer=_use_baseline,
                             initargs=(args.baseline,)) as pool:
        results = dict(zip(cells, pool.map(run_cell, cells, [args.policy] * len(cells), [args.shakes] * len(cells))))
    print(f"{len(cells)} cells x {args.shakes} shaken copies x 3 arms in {time.perf_counter() - t0:.0f} s; "
          f"event mode, 16x4 GPUs, FIFO, runtimes known x U[1,5]; ratio = {args.policy} / {BASE} of the means "
          f"over the copies (< 1 is better)")
    head = (f"{'fleet':<16}{'avg JCT':>9}{'p99':>7}{'mkspan':>8}  {'worst cell (metric ratio)':<34}"
            f"{'vs drain':>9}{'tax base':>9}{'removed':>9}{'of avoid.':>10}{'best-free':>10}{'+wait':>8}")
    print(head)
    report: dict = {"policy": args.policy, "baseline": BASE, "shakes": args.shakes, "fleets": {}}
    all_worst: tuple[float, str] = (0.0, "")
    harmed: list[str] = []  # cells worse than 1.02 beyond the noise of the shaken copies
    identical = True
    spread_rows: list[dict] = []
    fleets = list(dict.fromkeys(c.fleet for c in cells))
    for f in fleets:
        mine = {c: r for c, r in results.items() if c.fleet == f}
        ratios: dict[str, list[float]] = {k: [] for k in METRICS}
        vs_drain: list[float] = []
        worst = (0.0, "")
        tax_p = tax_b = best_free = floor = wait_p = wait_b = 0.0
        for c, r in mine.items():
            runs = r["runs"]
            for k in METRICS:
                q = mean([x[k] for x in runs[args.policy]]) / mean([x[k] for x in runs[BASE]])
                ratios[k].append(q)
                label = f"w{c.trace} l{c.lam:g} {k.removesuffix('_s').replace('_jct', '')}"
                if q > worst[0]:
                    worst = (q, f"{label} {q:.3f}")
                # beyond the noise: the paired per-copy ratios' mean is above 1.02 by more
                # than two standard errors (one copy: no noise estimate, the ratio itself)
                paired = [a[k] / b[k] for a, b in zip(runs[args.policy], runs[BASE])]
                m = mean(paired)
                se = (math.sqrt(sum((x - m) ** 2 for x in paired) / (len(paired) - 1) / len(paired))
                      if len(paired) > 1 else 0.0)
                if m - 2 * se > 1.02:
                    harmed.append(f"{f} {label} {m:.3f} +- {se:.3f}")
            if runs["drain"]:
                vs_drain.append(mean([x["avg_jct_s"] for x in runs[args.policy]])
                                / mean([x["avg_jct_s"] for x in runs["drain"]]))
            tax_p += sum(x["tax_gpu_s"] for x in runs[args.policy])
            tax_b += sum(x["tax_gpu_s"] for x in runs[BASE])
            best_free += sum(x["best_free_gpu_s"] or 0.0 for x in runs[BASE])
            floor += sum(x["floor_gpu_s"] or 0.0 for x in runs[BASE])
            wait_p += sum(x["wait_s"] for x in runs[args.policy])
            wait_b += sum(x["wait_s"] for x in runs[BASE])
            if f == "uniform":
                identical &= [x["starts"] for x in runs[args.policy]] == [x["starts"] for x in runs[BASE]]
        if worst[0] > all_worst[0]:
            all_worst = (worst[0], f"{f} {worst[1]}")
        g = {k: geomean(v) for k, v in ratios.items()}
        removed = 1 - tax_p / tax_b if tax_b > 0 else 0.0
        removable = 1 - best_free / tax_b if tax_b > 0 else 0.0
        # of the tax above the floor no schedule keeping the jobs' shapes can go below
        of_avoidable = (tax_b - tax_p) / (tax_b - floor) if tax_b > floor else None
        added = (wait_p - wait_b) / wait_b if wait_b > 0 else 0.0
        row = {"geomean": g, "worst": worst[1], "vs_drain_avg_jct": geomean(vs_drain) if vs_drain else None,
               "tax_removed": removed, "tax_removable_best_free": removable, "added_wait_share": added,
               "baseline_tax_unavoidable_share": floor / tax_b if tax_b > 0 else None,
               "avoidable_tax_removed": of_avoidable,
               "drained_nodes": next(iter(mine.values()))["drained"],
               "cells": {f"w{c.trace} l{c.lam:g}": {k: ratios[k][i] for k in METRICS}
                         for i, c in enumerate(mine)}}
        report["fleets"][f] = row
        if f in SPREAD:
            spread_rows.append(row)
        dr = f"{row['vs_drain_avg_jct']:.3f}" if vs_drain else "-"
        share = mean([x["tax_share"] for r in mine.values() for x in r["runs"][BASE]])
        row["baseline_tax_share"] = share
        print(f"{f:<16}{g['avg_jct_s']:>9.3f}{g['p99_jct_s']:>7.3f}{g['makespan_s']:>8.3f}  {worst[1]:<34}{dr:>9}"
              f"{share:>9.1%}{removed:>9.0%}{'-' if of_avoidable is None else f'{of_avoidable:.0%}':>10}"
              f"{removable:>10.0%}{added:>+8.1%}")
    targets = Targets()
    print()
    targets.check(f"worst cell / {BASE} (avg JCT, p99, makespan; {all_worst[1] or 'none'})", all_worst[0], "<=", 1.02)
    print(f"cells worse than 1.02 beyond the noise (paired per-copy ratio, mean - 2 SE > 1.02): {len(harmed)} "
          f"of {len(cells) * len(METRICS)} (no target)" + "".join(f"\n  {h}" for h in harmed))
    report["harmed_beyond_noise"] = harmed
    if "uniform" in fleets and BASE == "slurm-backfill":
        targets.state(identical, f"uniform fleet, every start identical to {BASE}'s: {identical}")
    elif "uniform" in fleets:  # pal-guard keeps slurm-backfill's mechanism, so only that one can start alike
        print(f"uniform fleet, every start identical to {BASE}'s: {identical} (no target: pal-guard shares "
              f"slurm-backfill's mechanism, not {BASE}'s)")
    if spread_rows:
        avg = geomean([r["geomean"]["avg_jct_s"] for r in spread_rows])
        mk = geomean([r["geomean"]["makespan_s"] for r in spread_rows])
        dr_all = [r["vs_drain_avg_jct"] for r in spread_rows if r["vs_drain_avg_jct"] is not None]
        dr = geomean(dr_all) if dr_all else math.nan
        rem = min(r["tax_removed"] for r in spread_rows)
        rem_avoidable = min(r["avoidable_tax_removed"] or 0.0 for r in spread_rows)
        floor_share = max(r["baseline_tax_unavoidable_share"] or 0.0 for r in spread_rows)
        wait = max(r["added_wait_share"] for r in spread_rows)
        targets.check(f"spread fleets vs {BASE}: geomean avg JCT", avg, "<=", 0.80)
        targets.check(f"spread fleets vs {BASE}: geomean makespan", mk, "<=", 0.90)
        targets.check(f"spread fleets vs {BASE} after drain: geomean avg JCT", dr, "<=", 0.92)
        targets.check("spread fleets: tax removed, least of the fleets", 100 * rem, ">=", 80, "%", digits=0)
        targets.check("spread fleets: added queue wait, most of the fleets", 100 * wait, "<", 2, "%", digits=1)
        targets.check(f"spread fleets: of the avoidable tax (above the floor no schedule keeping the jobs' shapes goes "
                      f"below, up to {floor_share:.0%} of the baseline's) removed, least of the fleets",
                      100 * rem_avoidable, ">=", 80, "%", digits=0)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1, default=str))
    return targets.exit_status()


if __name__ == "__main__":
    sys.exit(main())
