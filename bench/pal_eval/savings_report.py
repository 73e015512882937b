"""`pal report savings` on a database of accounted jobs, timed (bench/savings_report.py)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

from pal_eval.paths import REPO
from pal_eval.targets import Targets

TARGET_S = 2.0


def fill(url: str, jobs: int, seed: int = 1) -> None:
    from pal_slurm.db import migrate
    from pal_slurm.db.accounting_store import AccountingSink
    from pal_slurm.db.engine import make_engine
    from pal_slurm.placer.ledger import Alternative, account
    from pal_slurm.placement.variability import GpuVariability
    from pal_slurm.slurm.model import SlurmJob

    engine = make_engine(url, create=True)
    migrate.upgrade(engine)
    rng = np.random.default_rng(seed)
    nodes = [f"gpu{i:03d}" for i in range(512)]
    factors = {(n, m): GpuVariability(perfvar={"A": f}, slowdown={"A": f})
               for n in nodes for m, f in zip(range(4), rng.uniform(0.95, 1.3, 4))}
    now = datetime.now(UTC).timestamp()
    sink = AccountingSink(lambda: engine, max_pending=jobs)
    for i in range(jobs):
        n = int(rng.choice([1, 2, 4, 8]))
        node = nodes[int(rng.integers(0, len(nodes) - 1))]
        gpus = [(node, m) for m in range(min(n, 4))] + ([(nodes[nodes.index(node) + 1], m) for m in range(4)] if n == 8 else [])
        if i % 50 == 0:
            gpus = []  # unaccounted: no GPU record
        runtime = float(rng.uniform(60, 8 * 3600))
        end = now - float(rng.uniform(0, 7 * 86400 - 3600))
        job = SlurmJob(job_id=str(i), name="j", user=f"u{i % 97}", state="COMPLETED", state_reason="None",
                       priority=1, partition=f"p{i % 5}", submit_time=end - runtime - 60, account=f"a{i % 13}")
        alt = Alternative("placer", "A", float(rng.uniform(0.95, 1.1)), 1)
        sink.add([account(job, "A", gpus, end - runtime, end, factors, 1, alt, "observe")])
        if len(sink.pending) >= 10_000:
            sink.flush()
    sink.flush()
    engine.dispose()


def run(args: argparse.Namespace) -> int:
    """args: bench/savings_report.py's options."""
    with tempfile.TemporaryDirectory() as tmp:
        url = args.db or f"sqlite:///{Path(tmp) / 'pal.db'}"
        t0 = time.perf_counter()
        fill(url, args.jobs)
        print(f"filled {args.jobs} job records in {time.perf_counter() - t0:.1f} s")

        from pal_slurm.db.accounting_store import load_cells
        from pal_slurm.db.engine import make_engine
        from pal_slurm.savings import savings

        engine = make_engine(url)
        cutoff = datetime.now(UTC) - timedelta(days=7)
        t0 = time.perf_counter()
        cells, pace = load_cells(engine, cutoff, "partition")
        t1 = time.perf_counter()
        data = savings(cells, pace, by="partition", since="7d")
        t2 = time.perf_counter()
        print(f"in-process: {data['jobs']} jobs, the database's sums {t1 - t0:.2f} s ({len(cells)} cells, "
              f"{len(pace)} GPU sets), report {t2 - t1:.2f} s, total {t2 - t0:.2f} s")
        print(f"  {data['headline']}")
        env = {**os.environ, "PAL_CONFIG": ""}
        cmd = [sys.executable, "-m", "pal_slurm", "--db", url, "report", "savings", "--by", "partition",
               "--format", "json"]
        t0 = time.perf_counter()
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False, cwd=REPO)
        wall = time.perf_counter() - t0
        if done.returncode != 0:
            print(done.stderr, file=sys.stderr)
            return 1
        print(f"pal report savings --by partition --format json (subprocess, start-up included): {wall:.2f} s")
        engine.dispose()
    targets = Targets()
    targets.check(f"pal report savings on {args.jobs} jobs (CLI)", wall, "<", args.target_s, "s", digits=2)
    return targets.exit_status()
