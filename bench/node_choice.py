#!/usr/bin/env python3
"""How often the simulator's node choosers name the GPUs a real slurmctld gave, job by job.

For every stored plain-Slurm arm result under OUT (bench/replay.py's `<trace>/rep<r>-seed<r>/
slurm.json`, beside its `replay.json`), each job's free GPUs at its start are rebuilt from the
run's own starts and ends (a job counts as running at a start when it started before and had
not ended), and two choosers are asked for the job's shape (its node count, GPUs per node):
first fit (pal_slurm.placement.first_fit, what the EASY policies share) and cons_tres's own
rule (pal_slurm.placement.cons_tres_fit, what `slurm-reserving` picks with). A job counts as
named when the chooser's nodes and, on each, the lowest free GPU slots are exactly the GPUs
Slurm gave. Jobs whose real GPUs look busy in the rebuilt state (a start and an end in the
same instant) are left out and counted.

Why: the replay's prediction of plain Slurm is only as good as its model of where Slurm puts
jobs; on a fleet with one very slow GPU, that decides the makespan (docs/evaluation.md, "The
third sitting").

Usage: bench/node_choice.py OUT [OUT ...] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pal_slurm.placement.cons_tres_fit import tightest_fit_nodes  # noqa: E402
from pal_slurm.placement.first_fit import first_fit_nodes  # noqa: E402
from pal_eval.replay.fleet import node_name  # noqa: E402

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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="+", type=Path, help="a bench/replay.py --out directory (with replay.json)")
    ap.add_argument("--json", action="store_true", help="print the counts as JSON")
    args = ap.parse_args()
    rows = []
    for out in args.out:
        summary = out / "replay.json"
        if not summary.is_file():
            print(f"node_choice: {summary}: not found (give a bench/replay.py --out directory)", file=sys.stderr)
            return 2
        f = summary
        try:
            meta = json.loads(summary.read_text())
            names = [node_name("pal-r", i, int(meta["nodes"])) for i in range(int(meta["nodes"]))]
            for f in sorted(out.glob("*/rep*-seed*/slurm.json")):
                res = json.loads(f.read_text())
                if not res.get("complete", True):
                    continue
                rows.append({"run": str(f.relative_to(out.parent)),
                             **check_run(res["run"]["jobs"], names, int(meta["gpus_per_node"]))})
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            print(f"node_choice: {f}: not a bench/replay.py result ({type(exc).__name__}: {exc})", file=sys.stderr)
            return 2
    if not rows:
        print("node_choice: no plain-Slurm arm results found", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"{'run':<56}{'jobs':>6}{'left out':>10}" + "".join(f"{c:>16}" for c in CHOOSERS))
    for r in rows:
        print(f"{r['run']:<56}{r['jobs']:>6}{r['left out']:>10}"
              + "".join(f"{r[c]:>9} {r[c] / max(r['jobs'], 1):>5.0%}" for c in CHOOSERS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
