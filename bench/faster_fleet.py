#!/usr/bin/env python3
"""Slurm as shipped on a uniformly faster fleet, against itself: does the no-harm matrix call a pure
speedup harm?

Why: `bench/vs_slurm.py` asks that no cell of its matrix be worse than 1.02 x slurm-backfill. Its
worst cells are single trace structures (a wide job that starts minutes earlier than under Slurm
and so ahead of a burst of small jobs). This script separates that from placement: the *same*
policy, slurm-backfill, on the same fleet with every GPU `scale` times its PerfVar (every job runs
that much faster, nothing else changes), over the same shaken copies. A cell above 1.02 here is
one where finishing work sooner, by itself, makes the mean job finish later: no GPU choice
caused it, and no policy that speeds anything up can be sure to avoid it.

Same matrix as vs_slurm (event mode, 16 x 4 GPUs, FIFO, runtimes known x U[1,5], arrivals shaken
by up to 5 trace minutes, seeds 1..N). Prints per fleet and scale the cells above 1.02 (avg JCT,
p99 JCT, makespan) and the worst.

Usage: bench/faster_fleet.py [--fleets wide-1,...] [--scales 0.99,0.97,0.95] [--shakes 6]
                             [--traces 1,...,6] [--lambdas 1.0,1.7,3.0] [--jobs N]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from vs_slurm import ARTIFACT, BASE, METRICS, Cell, fleet_cluster, matrix_cells, mean  # noqa: E402


def scaled(cluster, scale: float):  # noqa: ANN001, ANN201 - Cluster in, Cluster out
    """The same fleet with every GPU's PerfVar times `scale` (its factors, what a policy chooses
    by, unchanged: only the run times move)."""
    from dataclasses import replace

    return replace(cluster, perfvar={k: tuple(v * scale for v in values) for k, values in cluster.perfvar.items()})


def run_cell(cell: Cell, scales: tuple[float, ...], shakes: int) -> dict[float, dict[str, float]]:
    """scale -> metric -> mean(faster) / mean(as is) over the shaken copies."""
    from pal_slurm.placement.policies import get_policy
    from pal_slurm.simulate.estimates import parse_runtime_estimate
    from pal_slurm.simulate.event import EventOptions, simulate_events
    from pal_slurm.simulate.shake import shaken
    from pal_slurm.simulate.traces import read_trace_file

    cluster = fleet_cluster(cell.fleet)
    trace = read_trace_file(ARTIFACT / "traces/sia-philly" / f"workload-{cell.trace}.csv", max_gpus=64)
    opts = EventOptions(locality_penalty=cell.lam, runtime_estimate=parse_runtime_estimate("uniform:1:5"))
    copies = [shaken(trace, seed) for seed in range(1, shakes + 1)]

    def means(c):  # noqa: ANN001, ANN202
        ms = [simulate_events(t, c, get_policy(BASE), opts).metrics for t in copies]
        return {k: mean([getattr(m, k) for m in ms]) for k in METRICS}

    base = means(cluster)
    out = {}
    for s in scales:
        fast = means(scaled(cluster, s))
        out[s] = {k: fast[k] / base[k] for k in METRICS}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fleets", default="wide-1,wide-2,longhorn-gpu,longhorn-run-3")
    ap.add_argument("--scales", default="0.99,0.97,0.95", help="PerfVar multipliers below 1 (faster GPUs)")
    ap.add_argument("--shakes", type=int, default=6)
    ap.add_argument("--traces", default="1,2,3,4,5,6")
    ap.add_argument("--lambdas", default="1.0,1.7,3.0")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes")
    args = ap.parse_args()
    cells = matrix_cells(args)
    try:
        scales = tuple(float(s) for s in args.scales.split(",") if s)
    except ValueError as exc:
        cells = f"--scales takes numbers: {exc}"
    else:
        if not scales or any(not 0 < s <= 1 for s in scales):
            cells = "--scales must be numbers in (0, 1]"
    if isinstance(cells, str):
        print(f"faster_fleet: {cells}", file=sys.stderr)
        return 2
    fleets = list(dict.fromkeys(c.fleet for c in cells))
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=max(args.jobs, 1)) as pool:
        results = dict(zip(cells, pool.map(run_cell, cells, [scales] * len(cells), [args.shakes] * len(cells))))
    print(f"{len(cells)} cells x {args.shakes} shaken copies x {len(scales) + 1} fleets in "
          f"{time.perf_counter() - t0:.0f} s: {BASE} on the fleet with every PerfVar x scale, against itself "
          f"on the fleet as it is (< 1 is better)")
    print(f"{'fleet':<16}{'scale':>6}  {'cells > 1.02':>13}  {'worst cell (metric ratio)':<30}")
    for f in fleets:
        for s in scales:
            ratios = [(q, f"w{c.trace} l{c.lam:g} {k.removesuffix('_s').replace('_jct', '')}")
                      for c, r in results.items() if c.fleet == f for k, q in r[s].items()]
            over = sum(q > 1.02 for q, _ in ratios)
            worst = max(ratios)
            print(f"{f:<16}{s:>6.2f}  {over:>5} of {len(ratios):<5}  {worst[1]} {worst[0]:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
