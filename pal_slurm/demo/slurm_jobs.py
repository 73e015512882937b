"""The jobs `pal demo --slurm` submits with plain sbatch, what each ran on (its own output and its
admin comment), what its GPUs are worth for its class against the GPUs free at submission,
and the lines the CLI prints for it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pal_slurm.demo.slurm_cluster import DemoCluster
from pal_slurm.errors import PalError
from pal_slurm.placer.tag import Tag

__all__ = ["DEMO_JOBS", "DemoJob", "JobResult", "collect_job", "pace_range", "render_job", "submit_job"]


@dataclass(frozen=True)
class DemoJob:
    """One job the demo submits: a label, the sbatch options that make it, its class hint."""

    label: str
    gpus: int
    pal_class: str | None  # None: no hint (auto)


DEMO_JOBS = (DemoJob("class-A job, 1 GPU", 1, "A"), DemoJob("class-D job, 1 GPU", 1, "D"),
             DemoJob("2-GPU job, no class hint", 2, None))


@dataclass
class JobResult:
    label: str
    job_id: str
    state: str
    job_class: str | None  # from the placer's admin comment
    node: str | None
    gpus: list[int]  # SLURM_JOB_GPUS
    admin_comment: str
    slowdown: list[float]  # per GPU, for the job's class
    best: float | None  # best and worst slowdown among the GPUs free at submission, for its class
    worst: float | None
    class_a: list[float] = field(default_factory=list)  # class A slowdown of its GPUs (why D went there)

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("label", "job_id", "state", "job_class", "node", "gpus",
                                              "admin_comment", "slowdown", "best", "worst", "class_a")}


def submit_job(cluster: DemoCluster, work: Path, job: DemoJob) -> str:
    """Plain sbatch: a GPU count and, for a hint, --pal-class (the comment form without the SPANK plugin)."""
    from pal_slurm.slurm.command import run_command

    argv = ["sbatch", "--parsable", f"--job-name=pal-demo-{job.pal_class or 'auto'}",
            f"--output={work / 'jobs'}/%j.out", f"--gres=gpu:{job.gpus}", "--time=5"]
    if job.pal_class:
        spank = (cluster.dir / "lib" / "pal_spank.so").exists()
        argv.append(f"--pal-class={job.pal_class}" if spank else f"--comment=pal:class={job.pal_class}")
    argv.append("--wrap=echo SLURMD_NODENAME=$SLURMD_NODENAME; echo SLURM_JOB_GPUS=$SLURM_JOB_GPUS; "
                "echo CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES; sleep 1")
    out = run_command(argv, timeout=30, env=cluster.env).stdout.strip()
    job_id = out.split(";")[0]
    if not job_id.isdigit():
        raise PalError(f"sbatch printed {out[:80]!r}, not a job id")
    return job_id


_FINISHED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
             "BOOT_FAIL", "DEADLINE")


def _job_record(cluster: DemoCluster, job_id: str) -> dict[str, str]:
    from pal_slurm.slurm.command import run_command
    from pal_slurm.slurm.nodeinfo import parse_kv_line

    out = run_command(["scontrol", "show", "job", "-o", job_id], timeout=20, env=cluster.env, check=False).stdout
    line = next((ln for ln in out.splitlines() if ln.startswith("JobId=")), "")
    return parse_kv_line(line) if line else {}


def collect_job(cluster: DemoCluster, work: Path, job: DemoJob, job_id: str,
                free: Mapping[tuple[str, int], Mapping[str, float]], timeout: float) -> JobResult:
    """Wait for the job to end; what it ran on (its own output) and what that GPU is worth for its class."""
    deadline = time.monotonic() + timeout
    rec: dict[str, str] = {}
    while time.monotonic() < deadline:
        rec = _job_record(cluster, job_id)
        if rec.get("JobState") in _FINISHED:
            break
        time.sleep(0.3)
    state = rec.get("JobState") or "UNKNOWN"
    comment = rec.get("AdminComment", "")
    tag = Tag.parse(comment)
    cls = tag.job_class or None if tag is not None and tag.placed else None
    env = _job_output(work / "jobs" / f"{job_id}.out")
    node = env.get("SLURMD_NODENAME") or None
    gpus = [int(g) for g in env.get("SLURM_JOB_GPUS", "").split(",") if g.strip().isdigit()]
    key = cls or job.pal_class or "A"
    sfs = [free[(node, g)][key] for g in gpus if node and (node, g) in free]
    best, worst = pace_range(free, key, job.gpus)
    return JobResult(label=job.label, job_id=job_id, state=state, job_class=cls, node=node, gpus=gpus,
                     admin_comment=comment, slowdown=[round(s, 6) for s in sfs],
                     best=None if best is None else round(best, 6), worst=None if worst is None else round(worst, 6),
                     class_a=[round(free[(node, g)]["A"], 6) for g in gpus
                              if node and (node, g) in free and "A" in free[(node, g)]])


def pace_range(free: Mapping[tuple[str, int], Mapping[str, float]], cls: str,
               gpus: int) -> tuple[float | None, float | None]:
    """Best and worst pace (the largest slowdown of its GPUs: a synchronous job runs at its slowest
    GPU's pace) a `gpus`-GPU job of class `cls` could get on one node among the `free` GPUs."""
    per_node: dict[str, list[float]] = {}
    for (node, _minor), sf in free.items():
        if cls in sf:
            per_node.setdefault(node, []).append(sf[cls])
    fits = [sorted(v) for v in per_node.values() if len(v) >= gpus]
    if gpus < 1 or not fits:
        return None, None
    return min(v[gpus - 1] for v in fits), max(v[-1] for v in fits)


def _job_output(path: Path, wait_s: float = 5.0) -> dict[str, str]:
    deadline = time.monotonic() + wait_s
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    return dict(m.groups() for m in re.finditer(r"^([A-Z_]+)=(.*)$", text, flags=re.MULTILINE))


def render_job(j: JobResult) -> list[str]:
    """Lines for one job (the CLI prints them)."""
    where = f"{j.node} GPU {','.join(map(str, j.gpus))}" if j.node and j.gpus else "no GPU seen in its output"
    cls = j.job_class or "-"
    lines = [f"job {j.job_id}  {j.label}: {j.state} on {where}, class {cls}"]
    if j.slowdown and j.best is not None:
        mine = max(j.slowdown)
        what = "single GPUs" if len(j.gpus) == 1 else f"sets of {len(j.gpus)} GPUs on one node"
        lines.append(f"    slowdown for class {cls}: {', '.join(f'{s:.3f}' for s in j.slowdown)} "
                     f"(the job runs at {mine:.3f}); {what} free at submission: "
                     f"best {j.best:.3f}, worst {j.worst:.3f}")
        if j.best == j.worst and j.class_a:
            lines.append(f"    class {cls} runs the same on every GPU, so it took a GPU that is slow for class A "
                         f"({', '.join(f'{s:.3f}' for s in j.class_a)}), keeping fast ones free")
    tag = Tag.parse(j.admin_comment)
    if tag is None or not tag.placed:
        lines.append(f"    not placed by pal-slurm: {j.admin_comment or '(no admin comment)'}")
    else:
        lines.append(f"    AdminComment: {j.admin_comment}")
    return lines
