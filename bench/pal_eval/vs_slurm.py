"""pal-slurm's default policy against Slurm as shipped, over the matrix (bench/vs_slurm.py): each
cell's runs, each fleet's figures against the baseline, and the no-harm and gain targets."""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from pal_eval.matrix import METRICS, SPREAD, Cell, cell_inputs, fleet_cluster, matrix_cells, mean
from pal_eval.size_buckets import BUCKETS, fleet_sizes, run_sizes
from pal_eval.targets import Targets


def run_cell(cell: Cell, policy: str, base: str, shakes: int) -> dict:
    """Every shaken copy of the cell's trace under the policy, the baseline `base`, and the
    baseline on the cluster left after drain."""
    from pal_slurm.errors import InputError
    from pal_slurm.placement.policies import get_policy
    from pal_slurm.simulate.drain import check_drain_fits, drained
    from pal_slurm.simulate.event import simulate_events
    from pal_slurm.simulate.shake import shaken

    cluster = fleet_cluster(cell.fleet, cell.nodes, cell.gpus_per_node)
    after, drained_nodes = drained(cluster)
    trace, opts = cell_inputs(cell)
    drain_ok: str | None = None
    try:
        check_drain_fits(trace, after, drained_nodes)
    except InputError as exc:
        drain_ok = str(exc)
    out: dict = {"runs": {policy: [], base: [], "drain": []}, "drained": list(drained_nodes), "drain_error": drain_ok}
    for seed in range(1, shakes + 1):
        t = shaken(trace, seed)
        for name, c, pol in ((policy, cluster, policy), (base, cluster, base), ("drain", after, base)):
            if name == "drain" and drain_ok is not None:
                continue
            r = simulate_events(t, c, get_policy(pol), opts)
            m = r.metrics
            out["runs"][name].append({
                "avg_jct_s": m.avg_jct_s, "p99_jct_s": m.p99_jct_s, "makespan_s": m.makespan_s,
                "tax_gpu_s": m.tax_gpu_s, "tax_share": m.tax_share, "wait_s": m.avg_queue_delay_s,
                "best_free_gpu_s": r.tax_best_free_gpu_s, "floor_gpu_s": r.tax_unavoidable_gpu_s,
                "starts": [(o.start_time, o.gpu_ids) for o in r.outcomes] if cell.fleet == "uniform" else None,
                "sizes": run_sizes(r.outcomes, c) if name != "drain" else None})
    return out


@dataclass
class Fleet:
    """One fleet's figures: its row of the JSON report, its worst cell, its cells worse than
    1.02 beyond the noise, and (the uniform fleet) whether every start was the baseline's."""

    row: dict[str, Any]
    worst: tuple[float, str] = (0.0, "")
    harmed: list[str] = field(default_factory=list)
    identical: bool = True


def run(args: argparse.Namespace) -> int:
    """args: bench/vs_slurm.py's options."""
    cells = matrix_cells(args)
    if isinstance(cells, str):
        print(f"vs_slurm: {cells}", file=sys.stderr)
        return 2
    base = args.baseline
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=max(args.jobs, 1)) as pool:
        n = len(cells)
        results = dict(zip(cells, pool.map(run_cell, cells, [args.policy] * n, [base] * n, [args.shakes] * n)))
    c0 = cells[0]
    what = f"{c0.workload}" + (f" ({c0.jobs} jobs a trace)" if c0.workload == "llm" else "")
    print(f"{len(cells)} cells x {args.shakes} shaken copies x 3 arms in {time.perf_counter() - t0:.0f} s; "
          f"event mode, {c0.nodes}x{c0.gpus_per_node} GPUs, {what}, FIFO, runtimes known x U[1,5]; ratio = "
          f"{args.policy} / {base} of the means over the copies (< 1 is better)")
    print(f"{'fleet':<16}{'avg JCT':>9}{'p99':>7}{'mkspan':>8}  {'worst cell (metric ratio)':<34}"
          f"{'vs drain':>9}{'tax base':>9}{'removed':>9}{'of avoid.':>10}{'best-free':>10}{'+wait':>8}")
    report: dict = {"policy": args.policy, "baseline": base, "shakes": args.shakes, "fleets": {}}
    fleets = {f: fleet_figures(f, {c: r for c, r in results.items() if c.fleet == f}, args.policy, base)
              for f in dict.fromkeys(c.fleet for c in cells)}
    for f, figs in fleets.items():
        report["fleets"][f] = figs.row
        print_fleet(f, figs)
    print_sizes(fleets, args.policy, base)
    status = check_targets(fleets, base, len(cells), report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1, default=str))
    return status


def fleet_figures(fleet: str, mine: dict[Cell, dict], policy: str, base: str) -> Fleet:
    """The fleet's cells against the baseline: per metric the geomean of the ratios of the means,
    the worst cell, against drain, the variability tax removed and the queue wait added."""
    from pal_slurm.simulate.metrics import geomean

    out = Fleet(row={})
    ratios: dict[str, list[float]] = {k: [] for k in METRICS}
    vs_drain: list[float] = []
    tax_p = tax_b = best_free = floor = wait_p = wait_b = 0.0
    for c, r in mine.items():
        runs = r["runs"]
        for k in METRICS:
            q = mean([x[k] for x in runs[policy]]) / mean([x[k] for x in runs[base]])
            ratios[k].append(q)
            label = f"w{c.trace} l{c.lam:g} {k.removesuffix('_s').replace('_jct', '')}"
            if q > out.worst[0]:
                out.worst = (q, f"{label} {q:.3f}")
            harm = beyond_noise([a[k] / b[k] for a, b in zip(runs[policy], runs[base])])
            if harm is not None:
                out.harmed.append(f"{fleet} {label} {harm}")
        if runs["drain"]:
            vs_drain.append(mean([x["avg_jct_s"] for x in runs[policy]]) / mean([x["avg_jct_s"] for x in runs["drain"]]))
        tax_p += sum(x["tax_gpu_s"] for x in runs[policy])
        tax_b += sum(x["tax_gpu_s"] for x in runs[base])
        best_free += sum(x["best_free_gpu_s"] or 0.0 for x in runs[base])
        floor += sum(x["floor_gpu_s"] or 0.0 for x in runs[base])
        wait_p += sum(x["wait_s"] for x in runs[policy])
        wait_b += sum(x["wait_s"] for x in runs[base])
        if fleet == "uniform":
            out.identical &= [x["starts"] for x in runs[policy]] == [x["starts"] for x in runs[base]]
    out.row = {"geomean": {k: geomean(v) for k, v in ratios.items()}, "worst": out.worst[1],
               "vs_drain_avg_jct": geomean(vs_drain) if vs_drain else None,
               "tax_removed": 1 - tax_p / tax_b if tax_b > 0 else 0.0,
               "tax_removable_best_free": 1 - best_free / tax_b if tax_b > 0 else 0.0,
               "added_wait_share": (wait_p - wait_b) / wait_b if wait_b > 0 else 0.0,
               "baseline_tax_unavoidable_share": floor / tax_b if tax_b > 0 else None,
               # of the tax above the floor no schedule keeping the jobs' shapes can go below
               "avoidable_tax_removed": (tax_b - tax_p) / (tax_b - floor) if tax_b > floor else None,
               "drained_nodes": next(iter(mine.values()))["drained"],
               "cells": {f"w{c.trace} l{c.lam:g}": {k: ratios[k][i] for k in METRICS} for i, c in enumerate(mine)},
               "baseline_tax_share": mean([x["tax_share"] for r in mine.values() for x in r["runs"][base]]),
               "sizes": fleet_sizes(mine.values(), policy, base)}
    return out


def beyond_noise(paired: list[float]) -> str | None:
    """The paired per-copy ratios' mean and standard error, when the mean is above 1.02 by more
    than two standard errors (one copy: no noise estimate, the ratio itself); else None."""
    m = mean(paired)
    se = math.sqrt(sum((x - m) ** 2 for x in paired) / (len(paired) - 1) / len(paired)) if len(paired) > 1 else 0.0
    return f"{m:.3f} +- {se:.3f}" if m - 2 * se > 1.02 else None


def print_fleet(fleet: str, figs: Fleet) -> None:
    row, g = figs.row, figs.row["geomean"]
    dr = f"{row['vs_drain_avg_jct']:.3f}" if row["vs_drain_avg_jct"] is not None else "-"
    of_avoidable = row["avoidable_tax_removed"]
    print(f"{fleet:<16}{g['avg_jct_s']:>9.3f}{g['p99_jct_s']:>7.3f}{g['makespan_s']:>8.3f}  {figs.worst[1]:<34}{dr:>9}"
          f"{row['baseline_tax_share']:>9.1%}{row['tax_removed']:>9.0%}"
          f"{'-' if of_avoidable is None else f'{of_avoidable:.0%}':>10}"
          f"{row['tax_removable_best_free']:>10.0%}{row['added_wait_share']:>+8.1%}")


def print_sizes(fleets: dict[str, Fleet], policy: str, base: str) -> None:
    """Per fleet: each size bucket's geomean avg JCT ratio, the share of multi-node jobs that held
    a GPU at >= 1.3x in each arm, and the largest job's mean wait in each (hours)."""
    print(f"\nby job size: geomean avg JCT {policy} / {base} per GPU-count bucket; multi-node jobs that held a "
          f"GPU at >= 1.3x ({policy} | {base}); the largest job's mean wait, h ({policy} | {base})")
    print(f"{'fleet':<16}" + "".join(f"{label:>8}" for label, _, _ in BUCKETS) + f"{'slow multi-node':>24}{'largest wait':>18}")
    for f, figs in fleets.items():
        sz = figs.row["sizes"]
        cols = "".join(f"{sz['buckets'][label]:>8.3f}" if label in sz["buckets"] else f"{'-':>8}"
                       for label, _, _ in BUCKETS)
        share = sz["slow_multi_node_share"]
        pct = " | ".join("-" if share[a] is None else f"{share[a]:.1%}" for a in (policy, base))
        wait = " | ".join("-" if sz["largest_job_wait_s"][a] is None else f"{sz['largest_job_wait_s'][a] / 3600:.2f}"
                          for a in (policy, base))
        print(f"{f:<16}{cols}{pct:>24}{wait:>18}")


def check_size_targets(fleets: dict[str, Fleet], targets: Targets, policy: str, base: str) -> None:
    """No size bucket's geomean worse than 1.02 on any fleet; on the spread fleets, the share of
    multi-node jobs that held a GPU at >= 1.3x at most a quarter of the baseline's."""
    worst = max(((q, f"{f} {label}") for f, figs in fleets.items()
                 for label, q in figs.row["sizes"]["buckets"].items()), default=(0.0, "none"))
    targets.check(f"worst size bucket, geomean avg JCT / {base} ({worst[1]})", worst[0], "<=", 1.02)
    mine = [figs.row["sizes"] for f, figs in fleets.items() if f in SPREAD]
    shares = [(sz["slow_multi_node_share"][policy], sz["slow_multi_node_share"][base]) for sz in mine]
    shares = [(p, b) for p, b in shares if p is not None and b]
    if shares:
        ratio = max(p / b for p, b in shares)
        targets.check(f"spread fleets: multi-node jobs that held a GPU at >= 1.3x, {policy}'s share / {base}'s, "
                      f"most of the fleets", ratio, "<=", 0.25)


def check_targets(fleets: dict[str, Fleet], base: str, n_cells: int, report: dict) -> int:
    """No cell worse than 1.02 x the baseline; the uniform fleet's starts; the spread fleets' gains."""
    from pal_slurm.simulate.metrics import geomean

    targets = Targets()
    print()
    all_worst = max(((figs.worst[0], f"{f} {figs.worst[1]}") for f, figs in fleets.items() if figs.worst[0] > 0),
                    key=lambda w: w[0], default=(0.0, ""))
    targets.check(f"worst cell / {base} (avg JCT, p99, makespan; {all_worst[1] or 'none'})", all_worst[0], "<=", 1.02)
    harmed = [h for figs in fleets.values() for h in figs.harmed]
    print(f"cells worse than 1.02 beyond the noise (paired per-copy ratio, mean - 2 SE > 1.02): {len(harmed)} "
          f"of {n_cells * len(METRICS)} (no target)" + "".join(f"\n  {h}" for h in harmed))
    report["harmed_beyond_noise"] = harmed
    check_size_targets(fleets, targets, report["policy"], base)
    identical = all(figs.identical for figs in fleets.values())
    if "uniform" in fleets and base == "slurm-backfill":
        targets.state(identical, f"uniform fleet, every start identical to {base}'s: {identical}")
    elif "uniform" in fleets:  # pal-guard keeps slurm-backfill's mechanism, so only that one can start alike
        print(f"uniform fleet, every start identical to {base}'s: {identical} (no target: pal-guard shares "
              f"slurm-backfill's mechanism, not {base}'s)")
    spread_rows = [figs.row for f, figs in fleets.items() if f in SPREAD]
    if spread_rows:
        dr_all = [r["vs_drain_avg_jct"] for r in spread_rows if r["vs_drain_avg_jct"] is not None]
        floor_share = max(r["baseline_tax_unavoidable_share"] or 0.0 for r in spread_rows)
        targets.check(f"spread fleets vs {base}: geomean avg JCT", geomean([r["geomean"]["avg_jct_s"] for r in spread_rows]),
                      "<=", 0.80)
        targets.check(f"spread fleets vs {base}: geomean makespan",
                      geomean([r["geomean"]["makespan_s"] for r in spread_rows]), "<=", 0.90)
        targets.check(f"spread fleets vs {base} after drain: geomean avg JCT", geomean(dr_all) if dr_all else math.nan,
                      "<=", 0.92)
        targets.check("spread fleets: tax removed, least of the fleets",
                      100 * min(r["tax_removed"] for r in spread_rows), ">=", 80, "%", digits=0)
        targets.check("spread fleets: added queue wait, most of the fleets",
                      100 * max(r["added_wait_share"] for r in spread_rows), "<", 2, "%", digits=1)
        targets.check(f"spread fleets: of the avoidable tax (above the floor no schedule keeping the jobs' shapes goes "
                      f"below, up to {floor_share:.0%} of the baseline's) removed, least of the fleets",
                      100 * min(r["avoidable_tax_removed"] or 0.0 for r in spread_rows), ">=", 80, "%", digits=0)
    return targets.exit_status()
