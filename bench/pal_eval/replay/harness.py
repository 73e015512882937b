"""Running one arm of a replay on a real Slurm cluster (the I/O side of pal_eval.replay).

The harness submits every job of a `ReplayPlan` with plain `sbatch` at its compressed
arrival time, and watches them until each has written its record (pal_eval.replay.job)
or is known to have failed. What it measures comes from the jobs themselves: the submit
time is taken just before `sbatch`, start and end are the job script's own clock, on the
same machine. Nothing is fabricated:

- a job that ends without a record (FAILED, CANCELLED, TIMEOUT, NODE_FAIL, or COMPLETED
  with no record) or writes an error record is reported, and the arm is *incomplete*;
- a job still running 3x longer than it could legitimately take (its work on the
  cluster's slowest GPU for its class, with the locality penalty) is cancelled and
  reported; the arm is incomplete;
- Ctrl-C (or SIGTERM) cancels every job the arm submitted, waits until Slurm has let
  them go, and raises `ReplayInterrupted`: the cluster is left clean, or the message
  names the jobs it could not confirm gone (scancel or squeue failed) for the operator.

Every Slurm command gets an argument list, never a shell string.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pal_slurm.errors import PalError, SlurmError
from pal_eval.replay.cancel import cancel_all, cancel_note
from pal_eval.replay.job import RUN_ENV
from pal_eval.replay.plan import ReplayJob, ReplayPlan
from pal_slurm.simulate.metrics import JobOutcome, variability_gpu_s
from pal_slurm.slurm import parse_json
from pal_slurm.slurm.command import SQUEUE_ALL_JOBS_JSON, run_command

log = logging.getLogger(__name__)

Say = Callable[[str], None]

#: states in which a job has ended without finishing its work
_FAILED = frozenset({"FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL",
                     "DEADLINE"})
#: how long a COMPLETED job's record may take to appear (file written just before exit)
_RECORD_GRACE_S = 5.0
OVERRUN = 3.0
#: pending reasons no wait cures (the job asks for more than the partition has); a short
#: grace, as the placer may hold a NodeList for a moment before it restores a request
_NEVER_STARTS = frozenset({"PartitionNodeLimit", "PartitionConfig", "BadConstraints"})
NEVER_STARTS_GRACE_S = 20.0
#: how long a stopped arm waits for Slurm to let its cancelled jobs go (Ctrl-C; an error)
_CANCEL_WAIT_S = 60.0
_CANCEL_WAIT_ON_ERROR_S = 10.0


class ReplayInterrupted(PalError):
    """The operator stopped the replay; its jobs were cancelled."""


@dataclass
class Tracked:
    plan: ReplayJob
    slurm_id: str
    submitted_at: float  # epoch seconds, just before sbatch
    limit_s: float  # the longest it may run before it is cancelled as overrunning (real s)
    started_at: float | None = None  # Slurm's start time (whole seconds), once seen running
    record: dict[str, Any] | None = None
    failure: str | None = None
    completed_seen: float | None = None
    stuck_since: float | None = None  # first seen pending for a reason it cannot outwait


@dataclass
class ArmRun:
    """What one arm measured, in real seconds since `t0` (the replay's time zero)."""

    arm: str
    t0: float
    jobs: list[Tracked] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def complete(self) -> bool:
        return not self.problems and all(t.record is not None and "error" not in t.record for t in self.jobs)

    def outcomes(self, plan: ReplayPlan) -> list[JobOutcome]:
        """The measured jobs as the simulator's outcomes, in trace seconds (finished jobs only)."""
        out = []
        for t in self.jobs:
            r = t.record
            if r is None or "error" in r:
                continue
            job = t.plan.job
            # the variability tax of the GPUs Slurm really gave it: the job script recorded the
            # slowest PerfVar among them (`pace`; its sleep adds the locality penalty on top)
            pace = float(r.get("pace") or 1.0)
            signed = variability_gpu_s(job.num_gpus, job.nominal_runtime_s, pace)
            out.append(JobOutcome(job.job_id, job.num_gpus, plan.to_trace_s(t.submitted_at - self.t0),
                                  plan.to_trace_s(r["start"] - self.t0), plan.to_trace_s(r["end"] - self.t0),
                                  job_class=job.job_class, nominal_s=job.nominal_runtime_s,
                                  tax_gpu_s=max(0.0, signed), variability_gpu_s_signed=signed))
        return out

    def busy_gpu_s(self, plan: ReplayPlan) -> float:
        return sum(o.gpus * (o.finish_time - o.start_time) for o in self.outcomes(plan))

    def as_dict(self) -> dict[str, Any]:
        return {"arm": self.arm, "complete": self.complete, "problems": list(self.problems),
                "wall_s": round(self.wall_s, 1), "t0": self.t0,
                "jobs": [{"trace_id": t.plan.job.job_id, "slurm_id": t.slurm_id, "submitted": t.submitted_at - self.t0,
                          "gpus": t.plan.job.num_gpus, "nodes": t.plan.nodes, "class": t.plan.job.job_class,
                          "limit_min": t.plan.limit_min, "work_s": t.plan.work_s,
                          **({("placed_on" if k == "gpus" else k): (v - self.t0 if k in ("start", "end", "slurm_start")
                                                                      else v)
                              for k, v in t.record.items()
                              if k in ("start", "end", "slurm_start", "gpus", "factor", "pace", "error")}
                             if t.record else {}),
                          **({"failure": t.failure} if t.failure else {})} for t in self.jobs]}


#: the folder that holds pal_eval (bench/): the job script imports the harness from there
EVAL_ROOT = Path(__file__).resolve().parents[2]


def job_script(python: str) -> str:
    """The batch script every replayed job runs (arguments after the script name).

    slurmd starts it in its own working directory with the submitter's environment, and
    pal_eval is no installed package (it stays out of the product's wheel): the script names
    the folder it is in. pal_slurm comes from `python`'s installation, as for the replay itself."""
    return (f"#!{python}\n# pal-slurm replay job: see bench/pal_eval/replay/job.py\n"
            f"import sys\nsys.path.insert(0, {str(EVAL_ROOT)!r})\n"
            "from pal_eval.replay.job import run\nsys.exit(run(sys.argv[1:]))\n")


def sbatch_argv(job: ReplayJob, *, script: Path, factors: Path, records: Path, logs: Path,
                locality_penalty: float, partition: str | None = None, same_command: bool = False) -> list[str]:
    """Plain sbatch: the job's shape, its time limit, its class as a comment (what a user's
    `--comment=pal:class=X` says; the submit filter reads it), nothing else. With `same_command`
    the run's own values (trace id, work) go in its environment (pal_eval.replay.job.RUN_ENV), so
    every run of one job name and class has one command line, as a site's recurring job has: what
    a job's fingerprint (user, name, command) keys."""
    argv = ["sbatch", "--parsable", f"--job-name={job.name}", f"--nodes={job.nodes}", "--ntasks-per-node=1",
            f"--gres=gpu:{job.gpus_per_node}", f"--time={job.limit_min}", f"--output={logs}/%j.out",
            f"--comment=pal:class={job.job.job_class}"]
    if partition:
        argv.append(f"--partition={partition}")
    run = [job.job.job_id, f"{job.work_s:.6f}"]
    if same_command:
        argv.append("--export=ALL," + ",".join(f"{k}={v}" for k, v in zip(RUN_ENV, run)))
        return [*argv, str(script), str(factors), str(records), job.job.job_class, f"{locality_penalty:g}"]
    return [*argv, str(script), str(factors), str(records), run[0], job.job.job_class, run[1],
            f"{locality_penalty:g}"]


def worst_factor(factors: Mapping[str, Mapping[str, Mapping[str, float]]], job_class: str) -> float:
    return max((f[job_class] for per_node in factors.values() for f in per_node.values()), default=1.0)


@contextmanager
def _interrupts_deferred() -> Iterator[None]:
    """Ctrl-C and SIGTERM are noted, and acted on when the block ends.

    Why: a signal that lands while sbatch runs would raise before the job id it printed is
    recorded, so the clean-up would not know that job and it would run on unwatched after
    the replay said it cancelled everything. The handlers note the signal instead (a
    signal mask would not do: numpy's threads take a signal the main thread blocks), and
    once the job is on the list the noted one is raised as the interrupt it would have been."""
    noted: list[int] = []

    def note(signum: int, frame: object) -> None:
        noted.append(signum)

    try:
        old = {sig: signal.signal(sig, note) for sig in (signal.SIGINT, signal.SIGTERM)}
    except ValueError:  # not the main thread: no handler to take over
        yield
        return
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
    if noted:
        handler = old[noted[0]]
        if callable(handler):
            handler(noted[0], None)
        elif handler == signal.SIG_DFL:
            signal.raise_signal(noted[0])


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    try:
        old = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread: Ctrl-C is all we can catch
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


#: a hook `run_arm` calls on every poll with the run so far and the time; False stops the
#: submissions (the plan's jobs not yet submitted are dropped; those submitted are waited for)
Tick = Callable[[ArmRun, float], bool]


def run_arm(plan: ReplayPlan, *, arm: str, work_dir: Path, factors: Mapping[str, Mapping[str, Mapping[str, float]]],
            locality_penalty: float, env: Mapping[str, str] | None = None, python: str = sys.executable,
            partition: str | None = None, poll_s: float = 0.25, squeue_every_s: float = 2.0,
            overrun: float = OVERRUN, overrun_slack_s: float = 30.0, say: Say | None = None,
            never_starts_grace_s: float = NEVER_STARTS_GRACE_S, tick: Tick | None = None,
            same_command: bool = False) -> ArmRun:
    """Submit the plan's jobs at their times and wait for all of them (see the module doc);
    `tick` is called on every poll (an experiment that acts while the arm runs); `same_command`:
    see `sbatch_argv`."""
    records, logs, script, factors_file = _arm_files(work_dir, python, factors)
    run = ArmRun(arm=arm, t0=time.time())
    by_trace: dict[str, Tracked] = {}
    pending = list(plan.jobs)
    next_squeue = 0.0
    last_note = 0.0
    with _sigterm_as_interrupt():
        try:
            while pending or any(_active(t) for t in run.jobs):
                now = time.time()
                if tick is not None and not tick(run, now):
                    pending.clear()
                while pending and now - run.t0 >= pending[0].submit_at_s:
                    job = pending.pop(0)
                    worst = job.work_s * worst_factor(factors, job.job.job_class) * (
                        locality_penalty if job.nodes > 1 else 1.0)
                    t = Tracked(plan=job, slurm_id="", submitted_at=time.time(),
                                limit_s=overrun * worst + overrun_slack_s)
                    with _interrupts_deferred():
                        t.slurm_id = _sbatch(sbatch_argv(job, script=script, factors=factors_file, records=records,
                                                         logs=logs, locality_penalty=locality_penalty,
                                                         partition=partition, same_command=same_command), env)
                        run.jobs.append(t)
                        by_trace[job.job.job_id] = t
                    now = time.time()
                _read_records(records, by_trace)
                if now >= next_squeue:
                    next_squeue = now + squeue_every_s
                    _check_slurm(run, env, now, never_starts_grace_s)
                if say is not None and now - last_note >= 30:
                    last_note = now
                    done = sum(1 for t in run.jobs if t.record is not None)
                    say(f"{arm}: {now - run.t0:.0f} s, {len(run.jobs)}/{len(plan.jobs)} submitted, {done} done")
                time.sleep(poll_s)
        except KeyboardInterrupt:
            ids = [t.slurm_id for t in run.jobs if t.slurm_id]
            left = cancel_all(ids, env, wait_s=_CANCEL_WAIT_S)
            raise ReplayInterrupted(f"replay arm {arm!r} interrupted: {cancel_note(ids, left)}; "
                                    f"no result") from None
        except Exception as exc:
            # sbatch refused a job, slurmctld went away, ...: the arm has no result, and the
            # jobs it already submitted must not run on unwatched (nobody stuck, nothing left)
            ids = [t.slurm_id for t in run.jobs if t.slurm_id]
            left = cancel_all(ids, env, wait_s=_CANCEL_WAIT_ON_ERROR_S)
            raise PalError(f"replay arm {arm!r} stopped after {len(run.jobs)} of {len(plan.jobs)} submissions "
                           f"({exc}); {cancel_note(ids, left)}; no result") from exc
    _read_records(records, by_trace)
    run.wall_s = time.time() - run.t0
    run.problems.extend(_job_problems(run.jobs))
    return run


def _arm_files(work_dir: Path, python: str,
               factors: Mapping[str, Mapping[str, Mapping[str, float]]]) -> tuple[Path, Path, Path, Path]:
    """The arm's folder made ready: (the records folder, emptied of an earlier run's; the jobs'
    logs; the script each job runs; the factors file it reads)."""
    work_dir.mkdir(parents=True, exist_ok=True)
    records, logs = work_dir / "records", work_dir / "logs"
    records.mkdir(exist_ok=True)
    logs.mkdir(exist_ok=True)
    for stale in records.glob("*.json"):
        stale.unlink()
    script = work_dir / "replay-job.py"
    script.write_text(job_script(python), encoding="utf-8")
    script.chmod(0o755)
    factors_file = factors_path(work_dir)
    write_factors(factors_file, factors)
    return records, logs, script, factors_file


def factors_path(work_dir: Path) -> Path:
    """The factors file of an arm's folder: every job reads it once, when its script starts."""
    return work_dir / "factors.json"


def write_factors(path: Path, factors: Mapping[str, Mapping[str, Mapping[str, float]]]) -> None:
    """The factors file written whole or not at all (a file replaced while jobs run: each job
    starting after the replace reads the new one, none reads half of it)."""
    from pal_slurm.atomic_write import write_atomically

    write_atomically(path, json.dumps(factors, sort_keys=True))


def _job_problems(jobs: Sequence[Tracked]) -> list[str]:
    """One line per job that failed: the error its record gives, or what the watch saw."""
    problems = []
    for t in jobs:
        if t.record is not None and "error" in t.record:
            problems.append(f"job {t.plan.job.job_id} (Slurm {t.slurm_id}): {t.record['error']}")
        elif t.failure:
            problems.append(f"job {t.plan.job.job_id} (Slurm {t.slurm_id}): {t.failure}")
    return problems


def _active(t: Tracked) -> bool:
    return t.record is None and t.failure is None


def _sbatch(argv: Sequence[str], env: Mapping[str, str] | None) -> str:
    out = run_command(argv, timeout=60, env=env).stdout.strip()
    job_id = out.split(";")[0]
    if not job_id.isdigit():
        raise SlurmError(f"sbatch printed {out[:80]!r}, not a job id")
    return job_id


def _read_records(records: Path, by_trace: Mapping[str, Tracked]) -> None:
    for t in by_trace.values():
        if t.record is not None:
            continue
        path = records / f"{t.plan.job.job_id}.json"
        if path.exists():
            try:
                t.record = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                t.record = {"error": f"unreadable record {path}: {exc}", "start": 0.0, "end": 0.0}


def _check_slurm(run: ArmRun, env: Mapping[str, str] | None, now: float,
                 never_starts_grace_s: float = NEVER_STARTS_GRACE_S) -> None:
    """Failed and overrunning jobs, from Slurm's view (squeue keeps ended jobs MinJobAge s)."""
    active = {t.slurm_id: t for t in run.jobs if _active(t)}
    if not active:
        return
    try:
        doc = parse_json.load(run_command(SQUEUE_ALL_JOBS_JSON, timeout=60, env=env).stdout, "squeue --json")
    except SlurmError as exc:
        log.warning("squeue not read (%s); trying again", exc)
        return
    seen = {}
    for job in parse_json.jobs_from_doc(doc, only=set(active)):
        seen[job.job_id] = job
    for sid, t in active.items():
        job = seen.get(sid)
        if job is None:
            if now - t.submitted_at > 30:
                t.failure = "gone from Slurm without a record"
            continue
        if job.start_time and t.started_at is None and job.state != "PENDING":
            t.started_at = job.start_time
        if job.state == "PENDING" and job.state_reason in _NEVER_STARTS:
            t.stuck_since = t.stuck_since or now
            if now - t.stuck_since > never_starts_grace_s:
                t.failure = (f"can never start here (pending: {job.state_reason}); "
                             f"{_cancelled_or_not(sid, cancel_all([sid], env))}")
            continue
        t.stuck_since = None
        if job.state in _FAILED:
            t.failure = f"ended {job.state} ({job.state_reason or 'no reason given'}) without finishing its work"
        elif job.state == "COMPLETED":
            t.completed_seen = t.completed_seen or now
            if now - t.completed_seen > _RECORD_GRACE_S:
                t.failure = "completed without writing its record"
        elif t.started_at is not None and now - t.started_at > t.limit_s:
            t.failure = (f"still running {now - t.started_at:.0f} s after its start, over {OVERRUN:g} x the "
                         f"longest it could take; {_cancelled_or_not(sid, cancel_all([sid], env))}")


def _cancelled_or_not(sid: str, left: Sequence[str]) -> str:
    return "cancelled" if not left else f"scancel not confirmed: it may still be queued or running (scancel {sid})"
