"""How often the simulator's node choosers name the GPUs a real slurmctld gave, job by job
(bench/node_choice.py), from the plain-Slurm arms a replay stored."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

from pal_eval.replay.fleet import node_names
from pal_slurm.placement.cons_tres_fit import tightest_fit_nodes
from pal_slurm.placement.first_fit import first_fit_nodes

Chooser = Callable[[np.ndarray, int, int], "np.ndarray | None"]
CHOOSERS: dict[str, Chooser] = {"first fit": first_fit_nodes, "cons_tres fit": tightest_fit_nodes}


def check_run(jobs: list[dict], names: list[str], gpus_per_node: int) -> dict[str, int]:
    """Counts of jobs each chooser names exactly, of the jobs checked, and of those left out."""
    ordered = sorted(jobs, key=lambda j: j["start"])
    out = {"jobs": 0, "left out": 0, **{name: 0 for name in CHOOSERS}}
    for i, job in enumerate(ordered):
        busy = {(p[0], int(p[1])) for other in ordered[:i] if other["end"] > job["start"]
                for p in other["placed_on"]}
        real = sorted((p[0], int(p[1])) for p in job["placed_on"])
        if any(p in busy for p in real):
            out["left out"] += 1
            continue
        free = {n: [s for s in range(gpus_per_node) if (n, s) not in busy] for n in names}
        counts = np.array([len(free[n]) for n in names])
        per_node = job["gpus"] // job["nodes"]
        out["jobs"] += 1
        for name, choose in CHOOSERS.items():
            picked = choose(counts, per_node, job["nodes"])
            if picked is None:
                continue
            gpus = sorted((names[int(v)], s) for v in picked for s in free[names[int(v)]][:per_node])
            out[name] += gpus == real
    return out


def run(outs: list[Path], as_json: bool) -> int:
    """Every complete plain-Slurm arm under each of `outs` (bench/replay.py --out directories)."""
    rows = []
    for out in outs:
        found = stored_runs(out)
        if isinstance(found, str):
            print(f"node_choice: {found}", file=sys.stderr)
            return 2
        rows += found
    if not rows:
        print("node_choice: no plain-Slurm arm results found", file=sys.stderr)
        return 2
    if as_json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"{'run':<56}{'jobs':>6}{'left out':>10}" + "".join(f"{c:>16}" for c in CHOOSERS))
    for r in rows:
        print(f"{r['run']:<56}{r['jobs']:>6}{r['left out']:>10}"
              + "".join(f"{r[c]:>9} {r[c] / max(r['jobs'], 1):>5.0%}" for c in CHOOSERS))
    return 0


def stored_runs(out: Path) -> list[dict] | str:
    """One row per complete plain-Slurm arm under `out`, or what is wrong with it, in words."""
    summary = out / "replay.json"
    if not summary.is_file():
        return f"{summary}: not found (give a bench/replay.py --out directory)"
    rows = []
    f = summary
    try:
        meta = json.loads(summary.read_text())
        names = node_names(int(meta["nodes"]))
        for f in sorted(out.glob("*/rep*-seed*/slurm.json")):
            res = json.loads(f.read_text())
            if not res.get("complete", True):
                continue
            rows.append({"run": str(f.relative_to(out.parent)),
                         **check_run(res["run"]["jobs"], names, int(meta["gpus_per_node"]))})
    except (ValueError, KeyError, TypeError, IndexError) as exc:
        return f"{f}: not a bench/replay.py result ({type(exc).__name__}: {exc})"
    return rows
