"""Passive speed end to end at site scale: `pal gpus learn` over a million ledger rows in a real
database (bench/passive_db_speed.py)."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

from sqlalchemy import insert, select

from pal_eval.passive_speed import TARGET_MB, TARGET_S, synthetic_runs
from pal_eval.targets import Targets
from pal_slurm.db import migrate
from pal_slurm.db.engine import make_engine, session_scope
from pal_slurm.db.models import Gpu, JobAccounting, Node

#: the ledger rows' end times spread over the days before now (inside the default 30-day window)
SPAN_DAYS = 28.0
CHUNK = 20_000


def build(url: str, n_runs: int, nodes: int, gpus_per_node: int, fingerprints: int) -> float:
    """The fleet's nodes and GPUs and `n_runs` ledger rows (pal_eval.passive_speed's synthetic runs, as
    the placer's ledger writes them); the seconds it took."""
    t0 = time.perf_counter()
    engine = make_engine(url)
    migrate.upgrade(engine)
    runs = synthetic_runs(n_runs, nodes, gpus_per_node, fingerprints, seed=1)
    epoch0 = datetime(2026, 1, 1, tzinfo=UTC)
    with session_scope(engine) as s:
        s.execute(insert(Node), [{"name": f"node{n:05d}"} for n in range(nodes)])
        ids = dict(s.execute(select(Node.name, Node.id)).all())
        s.execute(insert(Gpu), [{"uuid": f"GPU-{n:05d}-{m}", "node_id": ids[f"node{n:05d}"], "minor_number": m,
                                 "model": "NVIDIA H100 80GB HBM3", "first_seen": epoch0, "last_seen": epoch0}
                                for n in range(nodes) for m in range(gpus_per_node)])
    end0 = datetime.now(UTC) - timedelta(days=SPAN_DAYS)
    step = SPAN_DAYS * 86400.0 / max(1, len(runs))
    for lo in range(0, len(runs), CHUNK):
        rows = []
        for i, r in enumerate(runs[lo:lo + CHUNK], start=lo):
            ended = end0 + timedelta(seconds=i * step)
            gpus = [{"node": g.split(":")[0], "minor": int(g.split(":")[1]), "slowdown": None} for g in r.gpus]
            rows.append({"slurm_job_id": str(100000 + i), "mode": "observe", "job_class": r.job_class,
                         "partition": "gpu", "account": "acct", "user": "user", "gpus": gpus, "n_gpus": len(gpus),
                         "slowest_gpus": "", "started_at": ended - timedelta(seconds=r.runtime_s),
                         "ended_at": ended, "runtime_s": r.runtime_s, "fingerprint": r.fingerprint,
                         "time_limit_s": r.runtime_s * 3.0})
        with session_scope(engine) as s:
            s.execute(insert(JobAccounting), rows)
    engine.dispose()
    return time.perf_counter() - t0


def measure(url: str) -> dict[str, float]:
    """`learn` (the dry run of `pal gpus learn`) on `url`, in this process: wall, CPU, peak RSS."""
    from pal_slurm.config import DatabaseConfig, PalConfig
    from pal_slurm.services.passive import learn

    engine = make_engine(url)
    cfg = PalConfig(database=DatabaseConfig(url=url))
    t0, c0 = time.perf_counter(), time.process_time()
    out = learn(engine, cfg)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"wall_s": wall, "cpu_s": cpu, "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "runs": float(out.runs), "estimates": float(len(out.result.estimates)),
            "bounds": float(len(out.result.bounds))}


def run(url: str, n_runs: int, nodes: int, gpus_per_node: int, fingerprints: int, target_s: float,
        target_mb: float) -> int:
    took = build(url, n_runs, nodes, gpus_per_node, fingerprints)
    print(f"setup: {n_runs:,} ledger rows of {fingerprints:,} fingerprints on {nodes * gpus_per_node:,} GPUs "
          f"({nodes} x {gpus_per_node}) written to {url.split(':', 1)[0]} in {took:.0f} s")
    child = subprocess.run([sys.executable, "-c", "import json, sys; from pal_eval.passive_db_speed import measure; "
                            "print(json.dumps(measure(sys.argv[1])))", url],
                           capture_output=True, text=True, check=False, cwd=sys.path[0] or None)
    if child.returncode != 0:
        print(child.stderr.strip()[-2000:])
        return 1
    got = json.loads(child.stdout.strip().splitlines()[-1])
    print(f"learn (dry run, a fresh process): {got['wall_s']:.1f} s wall ({got['cpu_s']:.1f} s CPU) for "
          f"{got['runs']:,.0f} runs read: {got['estimates']:,.0f} estimates, {got['bounds']:,.0f} bounds; peak memory "
          f"(max RSS) {got['peak_mb']:.0f} MB")
    targets = Targets()
    targets.check(f"pal gpus learn over {n_runs:,} ledger rows, wall", got["wall_s"], "<", target_s, "s", digits=1)
    targets.check("its peak memory (max RSS)", got["peak_mb"], "<", target_mb, "MB", digits=0)
    return targets.exit_status()


__all__ = ["TARGET_MB", "TARGET_S", "build", "measure", "run"]
