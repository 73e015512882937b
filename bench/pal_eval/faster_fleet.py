"""Slurm as shipped on a uniformly faster fleet, against itself (bench/faster_fleet.py): does the
no-harm matrix call a pure speedup harm?"""

from __future__ import annotations

import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace

from pal_eval.matrix import METRICS, Cell, cell_inputs, fleet_cluster, mean

#: Slurm as shipped: the one policy of both arms
BASE = "slurm-backfill"


def scaled(cluster, scale: float):  # noqa: ANN001, ANN201 - Cluster in, Cluster out
    """The same fleet with every GPU's PerfVar times `scale` (its factors, what a policy chooses
    by, unchanged: only the run times move)."""
    return replace(cluster, perfvar={k: tuple(v * scale for v in values) for k, values in cluster.perfvar.items()})


def run_cell(cell: Cell, scales: tuple[float, ...], shakes: int) -> dict[float, dict[str, float]]:
    """scale -> metric -> mean(faster) / mean(as is) over the shaken copies."""
    from pal_slurm.placement.policies import get_policy
    from pal_slurm.simulate.event import simulate_events
    from pal_slurm.simulate.shake import shaken

    cluster = fleet_cluster(cell.fleet, cell.nodes, cell.gpus_per_node)
    trace, opts = cell_inputs(cell)
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


def parse_scales(text: str) -> tuple[float, ...] | str:
    """--scales as numbers in (0, 1], or what is wrong with it, in words."""
    try:
        scales = tuple(float(s) for s in text.split(",") if s)
    except ValueError as exc:
        return f"--scales takes numbers: {exc}"
    if not scales or any(not 0 < s <= 1 for s in scales):
        return "--scales must be numbers in (0, 1]"
    return scales


def run(cells: list[Cell] | str, scales: tuple[float, ...] | str, shakes: int, jobs: int) -> int:
    """Per fleet and scale the cells above 1.02 and the worst; `cells` and `scales` as
    matrix_cells and parse_scales give them (a string: what is wrong, exit status 2)."""
    if isinstance(scales, str) or isinstance(cells, str):  # what is wrong with --scales first
        print(f"faster_fleet: {scales if isinstance(scales, str) else cells}", file=sys.stderr)
        return 2
    fleets = list(dict.fromkeys(c.fleet for c in cells))
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=max(jobs, 1)) as pool:
        results = dict(zip(cells, pool.map(run_cell, cells, [scales] * len(cells), [shakes] * len(cells))))
    print(f"{len(cells)} cells x {shakes} shaken copies x {len(scales) + 1} fleets in "
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
