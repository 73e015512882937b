"""`pal demo --slurm`: the placement flow on a real Slurm cluster, for a newcomer.

It starts the test cluster of the source checkout (tests/services/slurm-cluster.sh: munge,
slurmctld, four slurmd with four fake V100s each), gives its 16 GPUs a classified SQLite
database, runs `pal placer` in enforce mode with the submit filter switched on, submits
three GPU jobs with plain `sbatch`, and shows which GPU each job got and how good that GPU
is for the job's class. Afterwards the filter is switched off again (kill switch) and the
placer stopped; the cluster keeps running.

Everything goes through the production paths: the real filter in slurmctld, the real
daemon as a separate process, the real `pal explain`. The database part (the classified
test GPUs) is shared with the real-cluster tests (tests/slurm/placer_support.py imports it
from here), so the demo and the tests place on the same fleet; the background placer is
placer/process.py's.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pal_slurm.errors import PalError, SlurmUnavailable
from pal_slurm.ingest.jsonl import dump_jsonl
from pal_slurm.ingest.records import GpuInfo, ProfileRecord
from pal_slurm.placer.process import PlacerProcess, wait_heartbeat, write_config
from pal_slurm.placer.tag import Tag
from pal_slurm.slurm.command import run_command

log = logging.getLogger(__name__)

Say = Callable[[str], None]

# --------------------------------------------------------------------------- the classified test GPUs

NODES = ("pal-n1", "pal-n2", "pal-n3", "pal-n4")

#: class A (resnet50) PerfVar per (node, minor): four well-separated groups, so the
#: classification finds several bins; n3 minor 2 is in the fastest, n1 minor 0 in the slowest
_GROUPS = (0.88, 0.97, 1.04, 1.13)
A_PERFVAR = {(n, m): _GROUPS[(i + m) % 4] + 0.002 * m for i, n in enumerate(NODES) for m in range(4)}
A_PERFVAR[("pal-n3", 2)] = 0.87
A_PERFVAR[("pal-n1", 0)] = 1.14


def records(seed_runs: int = 4) -> list[ProfileRecord]:
    """Benchmark runs of the test cluster's GPUs, under the shipped profiler's names (the default
    job classes read them): train-resnet50 (class A) spread by A_PERFVAR, train-bert (B, C) a
    third as much, stream (D) equal everywhere; throughputs, as the profiler reports them."""
    t0 = datetime(2026, 11, 1, tzinfo=UTC)
    out: list[ProfileRecord] = []
    line = 0
    for (node, minor), pv in sorted(A_PERFVAR.items()):
        gpu = GpuInfo(uuid=f"GPU-test-{node}-{minor}", node=node, model="Tesla V100-SXM2-16GB",
                      nvml_index=minor, minor_number=minor)
        for bench, base, unit, var in (("train-resnet50", 1250.0, "images/s", pv),
                                       ("train-bert", 180.0, "sequences/s", 1.0 + (pv - 1.0) / 3),
                                       ("stream", 810.0, "GB/s", 1.0)):
            for r in range(seed_runs):
                line += 1
                jitter = 1.0 + 0.0005 * ((r * 3 + minor) % 3 - 1)
                out.append(ProfileRecord(run_key=f"t-{node}-{minor}-{bench}-{r}", gpu=gpu, benchmark=bench,
                                         started_at=t0 + timedelta(minutes=line), score=base / (var * jitter),
                                         unit=unit, lower_is_better=False, source="pal-profiler",
                                         source_file="test", line=line))
    return out


def make_db(tmp: Path) -> str:
    """A SQLite database `<tmp>/pal.db` with the 16 GPUs profiled and classified; returns its URL.

    The same steps as `pal db upgrade`, `pal profile import` and `pal classify`, with the
    default classification settings (not the site's /etc/pal/pal.toml): the demo and the
    tests must get the same classes everywhere.
    """
    from pal_slurm.services.classification import run_classification
    from pal_slurm.config import DatabaseConfig, PalConfig
    from pal_slurm.db import migrate
    from pal_slurm.db.engine import open_engine
    from pal_slurm.services.ingest import import_files

    db_file = (tmp / "pal.db").resolve()
    url = f"sqlite:///{db_file}"
    jsonl = tmp / "profiles.jsonl"
    jsonl.write_text(dump_jsonl(records()), encoding="utf-8")
    cfg = PalConfig(database=DatabaseConfig(url=url), data_dir=tmp)
    engine = open_engine(cfg)
    try:
        migrate.upgrade(engine)
        import_files(engine, [jsonl], "jsonl")
        run_classification(engine, cfg, note="test cluster GPUs (pal_slurm.demo.on_slurm)")
    finally:
        engine.dispose()
    return url


# --------------------------------------------------------------------------- the cluster

CLUSTER_SCRIPT = Path("tests") / "services" / "slurm-cluster.sh"
DEFAULT_CLUSTER_DIR = "/var/tmp/pal-test-slurm"


def find_cluster_script(package_dir: Path | None = None) -> Path:
    """tests/services/slurm-cluster.sh of the source checkout this package runs from."""
    pkg = package_dir or Path(__file__).resolve().parents[1]  # the pal_slurm package (this is pal_slurm/demo/)
    script = pkg.parent / CLUSTER_SCRIPT
    if not script.is_file():
        raise PalError(f"pal demo --slurm needs a source checkout of pal-slurm ({CLUSTER_SCRIPT} not found "
                       f"next to the package in {pkg.parent}); run it from a git clone installed with pip install -e")
    return script


@dataclass(frozen=True)
class DemoCluster:
    """The running test cluster: its script, state directory and the environment that reaches it."""

    script: Path
    dir: Path
    env: dict[str, str]

    @property
    def state_file(self) -> Path:
        return self.dir / "pal" / "filter-state"

    @property
    def kill_switch(self) -> Path:
        return self.dir / "pal" / "filter-disabled"

    def stop_hint(self) -> str:
        """The command that stops this cluster (with the state dir when it is not the default)."""
        prefix = "" if str(self.dir) == DEFAULT_CLUSTER_DIR else f"PAL_TEST_SLURM_DIR={self.dir} "
        extra = " ".join(f"{k}={os.environ[k]}" for k in ("PAL_TEST_SLURM_CTLD_PORT", "PAL_TEST_SLURM_NODE_PORT")
                         if os.environ.get(k))
        return f"{prefix}{extra + ' ' if extra else ''}{self.script} stop"


def _script(script: Path, verb: str, timeout: float) -> str:
    """Run the cluster script; its last stderr line is the progress summary, or the error we report."""
    try:
        proc = run_command([str(script), verb], timeout=timeout, env={"PAL_PYTHON": sys.executable}, check=False)
    except SlurmUnavailable as exc:  # it did not finish in time, or could not be started
        raise PalError(f"{script.name} {verb}: no result within {timeout:g} s ({exc})") from exc
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    if proc.returncode != 0:
        why = next((ln for ln in reversed(lines) if "error:" in ln), lines[-1] if lines else f"exit {proc.returncode}")
        raise PalError(f"{script.name} {verb} failed: {why.strip()}")
    return proc.stdout if verb == "env" else (lines[-1].strip() if lines else "")


def start_cluster(script: Path, say: Say) -> DemoCluster:
    """Install what is missing (apt) and start the cluster (instant when it already runs)."""
    say(f"1/6 installing Slurm if needed: {_script(script, 'install', 1800)}")
    say(f"2/6 starting the test cluster: {_script(script, 'start', 300)}")
    exports = dict(re.findall(r"^export ([A-Z_]+)=(.*)$", _script(script, "env", 30), flags=re.MULTILINE))
    return DemoCluster(script=script, dir=Path(exports["PAL_TEST_SLURM_DIR"]), env=exports)


# --------------------------------------------------------------------------- the demo

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
        ids = [(j, _submit(cluster, work, j)) for j in DEMO_JOBS]
        say("5/6 submitted with plain sbatch: " + ", ".join(f"{jid} ({j.label})" for j, jid in ids))
        jobs = [_collect(cluster, work, j, jid, free_before, job_timeout_s) for j, jid in ids]
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


def _submit(cluster: DemoCluster, work: Path, job: DemoJob) -> str:
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


def _collect(cluster: DemoCluster, work: Path, job: DemoJob, job_id: str,
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


def _pal(config: Path, *args: str, env: Mapping[str, str] | None = None) -> str:
    """A `pal` command exactly as an admin would run it; its output (stdout, then stderr)."""
    proc = run_command([sys.executable, "-m", "pal_slurm", "--config", str(config), *args], timeout=60,
                       env=env, check=False)
    return (proc.stdout + proc.stderr).rstrip()


def _explain(config: Path, job_id: str) -> str:
    return _pal(config, "explain", job_id)


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


__all__ = ["A_PERFVAR", "NODES", "DemoCluster", "SlurmDemoResult", "find_cluster_script", "make_db", "records",
           "render_job", "require_root", "run_slurm_demo"]
