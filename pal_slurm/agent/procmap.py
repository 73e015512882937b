"""Which Slurm job a GPU process belongs to, from its cgroup: the second source of the job -> GPU map.

Why a second source: on Slurm 22.05 (seen on the test cluster, 22.05.8) the Prolog's
environment lists only the GPU of the *last* GRES type of a job. With pal's per-slot GRES
types (`v100_g0` .. `v100_g3`, one GPU each) a 2-GPU job therefore gets a mapping file
with one GPU (`SLURM_JOB_GPUS=1` while the job itself sees `0,1`). So every few seconds
the agent also asks the GPU interface which processes run on each GPU, and reads their
cgroup: with `ProctrackType=proctrack/cgroup` (what GPU clusters use to confine GPUs) a
job's processes live under `.../job_<id>/...` on cgroup v1 and v2. A GPU whose processes
belong to a job of the mapping directory is added to that job. Without cgroups (or when
NVML sees processes of another PID namespace) nothing is found and the prolog's list stands.

`job_id_from_cgroup` is pure; `read_job_id` reads /proc (world-readable, no capability).
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["job_id_from_cgroup", "read_job_id"]

_JOB = re.compile(r"/job_(\d+)(?:/|$)")


def job_id_from_cgroup(text: str) -> str | None:
    """The Slurm job id in a /proc/<pid>/cgroup text (any hierarchy line), or None."""
    for line in text.splitlines():
        path = line.split(":", 2)[-1]
        match = _JOB.search(path)
        if match:
            return match.group(1)
    return None


def read_job_id(pid: int, proc: Path = Path("/proc")) -> str | None:
    """The job of process `pid`; None when it is gone, not in a Slurm cgroup, or unreadable."""
    try:
        return job_id_from_cgroup((proc / str(pid) / "cgroup").read_text(errors="replace"))
    except OSError:
        return None
