#!/usr/bin/env python3
"""Passive speed end to end at site scale: `pal gpus learn` reading a million ledger rows from a database.

bench/passive_speed.py times the estimator on rows already in memory; this one writes the same
synthetic runs (bench/pal_eval/passive_speed.py: 1,000,000 runs of 20,000 recurring fingerprints on
16,384 GPUs, 2,048 nodes x 8) into a database as the placer's ledger keeps them (job_accounting, with
the nodes and GPUs at their slots), ends spread over the last 28 days, then runs
`pal_slurm.services.passive.learn` (what `pal gpus learn` runs, without --apply) in a fresh process:
the ledger read (JSON GPU lists to physical GPUs), the estimate, the fail-slow pass (no classification
here: it has no benchmark to compare). Targets: under 30 s wall and 1 GB peak memory (max RSS of that
process). Exit status 1 when one is missed.

Usage: bench/passive_db_speed.py [--db URL] [--runs 1000000] [--nodes 2048] [--gpus-per-node 8]
                                 [--fingerprints 20000] [--target-s 30] [--target-mb 1024]
--db: an empty database (default: a new SQLite file in a temporary directory, removed after).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from pal_eval.passive_db_speed import TARGET_MB, TARGET_S, run


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", help="an empty database URL [default: a temporary SQLite file]")
    ap.add_argument("--runs", type=int, default=1_000_000)
    ap.add_argument("--nodes", type=int, default=2048)
    ap.add_argument("--gpus-per-node", type=int, default=8)
    ap.add_argument("--fingerprints", type=int, default=20_000)
    ap.add_argument("--target-s", type=float, default=TARGET_S)
    ap.add_argument("--target-mb", type=float, default=TARGET_MB)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="pal-passive-db-") as tmp:
        url = args.db or f"sqlite:///{Path(tmp) / 'pal.db'}"
        return run(url, args.runs, args.nodes, args.gpus_per_node, args.fingerprints, args.target_s, args.target_mb)


if __name__ == "__main__":
    sys.exit(main())
