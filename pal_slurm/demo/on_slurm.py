"""`pal demo --slurm`: the placement flow on a real Slurm cluster, for a newcomer.

It starts the test cluster of the source checkout (tests/services/slurm-cluster.sh: munge,
slurmctld, four slurmd with four fake V100s each), gives its 16 GPUs a classified SQLite
database, runs `pal placer` in enforce mode with the submit filter switched on, submits
three GPU jobs with plain `sbatch`, and shows which GPU each job got and how good that GPU
is for the job's class. Afterwards the filter is switched off again (kill switch) and the
placer stopped; the cluster keeps running.

Everything goes through the production paths: the real filter in slurmctld, the real
daemon as a separate process, the real `pal explain`. The classified test GPUs are
demo/cluster_gpus.py's (shared with the real-cluster tests, so the demo and the tests place
on the same fleet), the cluster demo/slurm_cluster.py's, the jobs demo/slurm_jobs.py's; the
background placer is placer/process.py's.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pal_slurm.demo.cluster_gpus import make_db
from pal_slurm.demo.slurm_cluster import DemoCluster, find_cluster_script, start_cluster
from pal_slurm.demo.slurm_jobs import DEMO_JOBS, JobResult, collect_job, submit_job
from pal_slurm.errors import PalError
from pal_slurm.placer.process import PlacerProcess, wait_heartbeat, write_config
from pal_slurm.slurm.command import run_command

log = logging.getLogger(__name__)

Say = Callable[[str], None]


@dataclass
class SlurmDemoResult:
    db_url: str
    cluster_dir: str
    jobs: list[JobResult]
    explain_job: str | None
    explain: str
    stop_hint: str
    placer_log: str
    free: dict[tuple[str, int], dict[str, float]] = field(default_factory=dict)  # at submission
    savings: str = ""  # `pal report savings` after the jobs

    def as_dict(self) -> dict[str, Any]:
        return {"db_url": self.db_url, "cluster_dir": self.cluster_dir, "jobs": [j.as_dict() for j in self.jobs],
                "explain_job": self.explain_job, "explain": self.explain, "stop_hint": self.stop_hint,
                "placer_log": self.placer_log, "savings": self.savings,
                "free_at_submission": [{"node": n, "minor": m, "slowdown": {c: round(v, 6) for c, v in sf.items()}}
                                       for (n, m), sf in sorted(self.free.items())]}


def require_root(euid: int | None = None) -> None:
    if (os.geteuid() if euid is None else euid) != 0:
        raise PalError("pal demo --slurm must run as root (it installs and starts Slurm daemons and "
                       "creates GPU device files)")


def run_slurm_demo(out_dir: Path, *, say: Say = print, job_timeout_s: float = 90.0) -> SlurmDemoResult:
    """The whole flow; the cluster is left running, the filter off and the placer stopped."""
    require_root()
    script = find_cluster_script()
    work = out_dir.resolve() / "slurm"
    try:
        (work / "jobs").mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PalError(f"cannot create the demo directory {work}: {exc.strerror}") from exc
    cluster = start_cluster(script, say)
    _refuse_busy(cluster)
    (work / "pal.db").unlink(missing_ok=True)  # ours: each demo starts from an empty database
    db_url = make_db(work)
    say(f"3/6 classified the cluster's 16 GPUs into {db_url}")
    # a final stop (the demo switches the filter off): no restart grace, the placer says goodbye
    config = write_config(work, db_url, cluster.state_file, mode="enforce", interval=0.5, restart_grace_s=0)
    placer_log = work / "placer.log"
    placer_log.unlink(missing_ok=True)
    placer = PlacerProcess(config, cluster.env, placer_log)
    jobs: list[JobResult] = []
    free_before: dict[tuple[str, int], dict[str, float]] = {}
    try:
        wait_heartbeat(cluster.state_file, placer)
        cluster.kill_switch.unlink(missing_ok=True)
        say(f"4/6 pal placer runs in enforce mode (log {placer_log}); the submit filter is on")
        free_before = _free_slowdowns(cluster, db_url)
        ids = [(j, submit_job(cluster, work, j)) for j in DEMO_JOBS]
        say("5/6 submitted with plain sbatch: " + ", ".join(f"{jid} ({j.label})" for j, jid in ids))
        jobs = [collect_job(cluster, work, j, jid, free_before, job_timeout_s) for j, jid in ids]
        _wait_accounted(db_url, len(ids))
    finally:
        cluster.kill_switch.touch()
        rc = placer.stop()
        if rc not in (0, -signal.SIGTERM):
            # it may have died holding jobs: the fail-safe releases them (nobody stuck)
            log.warning("pal placer exited with status %s (log %s); running the fail-safe", rc, placer_log)
            log.warning("fail-safe: %s", _pal(config, "placer", "release-stale", "--max-age", "0", env=cluster.env))
    say(f"6/6 submit filter off again (kill switch {cluster.kill_switch}); placer stopped")
    explain_job = next((j.job_id for j in jobs if j.job_class == "A"), jobs[0].job_id if jobs else None)
    explain = _explain(config, explain_job) if explain_job else ""
    savings = _pal(config, "report", "savings", "--since", "1d")
    return SlurmDemoResult(db_url=db_url, cluster_dir=str(cluster.dir), jobs=jobs, explain_job=explain_job,
                           explain=explain, stop_hint=cluster.stop_hint(), placer_log=str(placer_log),
                           free=free_before, savings=savings)


def _wait_accounted(db_url: str, jobs: int, timeout_s: float = 15.0) -> None:
    """Until the placer has written the finished jobs' accounting (it sees a job end within a cycle
    or two) or `timeout_s` passed: `pal report savings` then counts every demo job."""
    from sqlalchemy import func, select

    from pal_slurm.db.engine import make_engine
    from pal_slurm.db.models import JobAccounting

    engine = make_engine(db_url)
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            with engine.connect() as conn:
                if conn.execute(select(func.count()).select_from(JobAccounting)).scalar_one() >= jobs:
                    return
            time.sleep(0.5)
        log.warning("the placer has not accounted all %d demo jobs after %.0f s", jobs, timeout_s)
    finally:
        engine.dispose()


def _refuse_busy(cluster: DemoCluster) -> None:
    """Two placers on one cluster steal each other's held jobs: leave a cluster alone whose filter is on."""
    from pal_slurm.slurm.filter_state import heartbeat_age

    if cluster.kill_switch.exists():
        return
    age = heartbeat_age(str(cluster.state_file))
    state = "no heartbeat" if age is None else f"heartbeat {age:.0f} s old"
    raise PalError(f"the submit filter of the cluster in {cluster.dir} is on ({state}): another placer or a test "
                   f"run uses it; stop that first, or `touch {cluster.kill_switch}` when nothing does")


def _free_slowdowns(cluster: DemoCluster, db_url: str) -> dict[tuple[str, int], dict[str, float]]:
    """Slowdown per class of every GPU that is free now (what the placer can choose from)."""
    from pal_slurm.db.engine import make_engine
    from pal_slurm.placer import cluster_view
    from pal_slurm.placer.factors import load_factors
    from pal_slurm.slurm.cli_backend import CliBackend

    engine = make_engine(db_url)
    try:
        factors = load_factors(engine, ("A", "B", "C", "D"))
    finally:
        engine.dispose()
    backend = CliBackend(timeout=20, env=cluster.env)
    classes = sorted({c for v in factors.by_slot.values() for c in v.slowdown})
    view = cluster_view.build_view(backend.nodes(), backend.jobs(), factors.by_slot, classes)
    return {(s.node, s.minor): {c: view.cluster.sf(c)[i] for c in classes}
            for i, s in enumerate(view.slots) if i in view.free}


def _pal(config: Path, *args: str, env: Mapping[str, str] | None = None) -> str:
    """A `pal` command exactly as an admin would run it; its output (stdout, then stderr)."""
    proc = run_command([sys.executable, "-m", "pal_slurm", "--config", str(config), *args], timeout=60,
                       env=env, check=False)
    return (proc.stdout + proc.stderr).rstrip()


def _explain(config: Path, job_id: str) -> str:
    return _pal(config, "explain", job_id)


__all__ = ["SlurmDemoResult", "require_root", "run_slurm_demo"]
