"""The end-to-start measurement of bench/placer_latency.py, runs (c) and (d): how long after a
job ends on a GPU the next job queued for it starts there, from the jobs' own time stamps."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

from pal_eval.latency_cluster import ACTIVE, Cluster

FILL = 16          # one-GPU jobs that fill the cluster in the end-to-start runs


@dataclass
class EndsRun:
    """One end-to-start run: per GPU, the delay from the end of the job on it to the next start."""

    name: str
    delays: dict[tuple[str, str], float] = field(default_factory=dict)  # (node, GPU ids) -> seconds
    queued: set[str] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)
    records: dict[str, dict[str, str]] = field(default_factory=dict)


STAMP = "echo START $(date +%s.%N) $SLURMD_NODENAME $SLURM_JOB_GPUS"


def _wait_states(cluster: Cluster, ids: list[str], want: set[str], timeout: float) -> dict[str, dict[str, str]]:
    deadline = time.time() + timeout
    while True:
        known = cluster.jobs()
        if all(known.get(j, {}).get("JobState") in want for j in ids) or time.time() > deadline:
            return known
        time.sleep(0.25)


def _stamps(path: Path) -> dict[str, list[str]]:
    try:
        return {ln.split()[0]: ln.split()[1:] for ln in path.read_text(encoding="utf-8").splitlines()
                if ln.startswith(("START ", "END "))}
    except OSError:
        return {}


def ends_run(cluster: Cluster, name: str, drain_s: float, out: Path) -> EndsRun:
    """(c)/(d): FILL one-GPU jobs ending one by one, FILL more queued behind them (bench/placer_latency.py's
    header)."""
    run = EndsRun(name)
    out.mkdir(parents=True)

    def submit(i: int, wrap: str) -> str | None:
        proc = cluster.run(["sbatch", "--parsable", f"--output={out}/%j.out", f"--job-name=end-{name}-{i}",
                            "--pal-class=A", "--gres=gpu:1", "--wrap", wrap])
        jid = proc.stdout.strip().split(";")[0]
        if proc.returncode != 0 or not jid.isdigit():
            run.problems.append(f"sbatch failed: {proc.stderr.strip()[:200]}")
            return None
        return jid

    first = [j for i in range(FILL) if (j := submit(i, f"{STAMP}; sleep {3 + 0.6 * i:.1f}; "
                                                       "echo END $(date +%s.%N)")) is not None]
    known = _wait_states(cluster, first, {"RUNNING"}, 60)
    late = [j for j in first if known.get(j, {}).get("JobState") != "RUNNING"]
    if late:
        run.problems.append(f"{len(late)} filling job(s) not running after 60 s: {late[:5]}")
    # each queued job outlasts the filling ones, so every GPU's next job is a queued one started once
    queued = [j for i in range(FILL) if (j := submit(FILL + i, f"{STAMP}; sleep {1 + 0.6 * FILL:.1f}")) is not None]
    run.queued = set(queued)
    known = _wait_states(cluster, first + queued, {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"},
                         drain_s + 4 + 1.2 * FILL)
    run.records = {j: known.get(j, {}) for j in first + queued}
    active = [j for j, r in run.records.items() if r.get("JobState") in ACTIVE]
    if active:
        cluster.run(["scancel", *active])
        run.problems.append(f"{len(active)} job(s) still pending/running: cancelled {active[:10]}")
    ends: dict[tuple[str, str], float] = {}
    starts: dict[tuple[str, str], list[float]] = {}
    for jid in first + queued:
        st = _stamps(out / f"{jid}.out")
        if len(st.get("START", [])) < 3:
            run.problems.append(f"job {jid}: no start stamp with node and GPUs in {out}/{jid}.out")
            continue
        t, node, gpus = float(st["START"][0]), st["START"][1], st["START"][2]
        if jid in run.queued:
            starts.setdefault((node, gpus), []).append(t)
        elif st.get("END"):
            ends[(node, gpus)] = float(st["END"][0])
        else:
            run.problems.append(f"job {jid}: no end stamp")
    for gpu, end in ends.items():
        after = [t for t in starts.get(gpu, []) if t >= end - 0.5]
        if after:
            run.delays[gpu] = min(after) - end
        else:
            run.problems.append(f"GPU {gpu}: no queued job started on it after its job ended")
    return run


def ends_summary(run: EndsRun) -> str:
    d = sorted(run.delays.values())
    if not d:
        return f"{run.name}: no end-to-start delays measured"
    return (f"{run.name:<9} GPUs {len(d):>2}  delay end->next start on those GPUs: median "
            f"{statistics.median(d):.3f} s  max {d[-1]:.3f} s")
