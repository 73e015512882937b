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
import sys
from pathlib import Path

from pal_eval.node_choice import run


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="+", type=Path, help="a bench/replay.py --out directory (with replay.json)")
    ap.add_argument("--json", action="store_true", help="print the counts as JSON")
    args = ap.parse_args()
    return run(args.out, args.json)


if __name__ == "__main__":
    sys.exit(main())
