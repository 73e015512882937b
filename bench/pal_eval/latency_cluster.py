"""The test cluster as bench/placer_latency.py measures on it: started if it is not running
(pal_eval.cluster), the commands that reach it, and what slurmctld says of its jobs and its
scheduler."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from pal_eval import cluster as test_cluster
from pal_slurm.slurm.nodeinfo import parse_kv_line

#: the job states in which a job still holds or waits for GPUs
ACTIVE = {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING"}


class Cluster:
    """The test cluster of PAL_TEST_SLURM_DIR (started if it is not running)."""

    def __init__(self) -> None:
        env = {**os.environ, "PAL_PYTHON": sys.executable}
        proc = test_cluster.start(env)
        if proc.returncode != 0:
            sys.exit(f"placer_latency: slurm-cluster.sh start failed: {proc.stderr.strip().splitlines()[-1:]}")
        self.env = test_cluster.exports(env)
        self.dir = Path(self.env["PAL_TEST_SLURM_DIR"])
        self.state_file = self.dir / "pal" / "filter-state"
        self.kill_switch = self.dir / "pal" / "filter-disabled"

    def run(self, argv: list[str], timeout: float = 30) -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False,
                              env={**os.environ, **self.env}, stdin=subprocess.DEVNULL)

    def jobs(self) -> dict[str, dict[str, str]]:
        """Every job slurmctld still knows (`scontrol show job -o`), by id."""
        out = self.run(["scontrol", "show", "job", "-o"]).stdout
        recs = [parse_kv_line(ln) for ln in out.splitlines() if ln.startswith("JobId=")]
        return {r["JobId"]: r for r in recs}

    def sched_config(self) -> str:
        out = self.run(["scontrol", "show", "config"]).stdout
        keep = ("SchedulerType", "SchedulerParameters", "SchedulerTimeSlice", "SelectType ")
        return "; ".join(" ".join(ln.split()) for ln in out.splitlines() if ln.startswith(keep))
