"""A replay experiment: both arms on one real cluster, and the simulator's prediction of each.

Arms:

- ``slurm``: plain Slurm. The submit filter's kill switch is on and no placer runs, so
  sched/backfill and cons_tres place every job as shipped (time limits, first fit).
- ``pal``: pal-slurm enforcing with the configured policy. The placer runs against the
  same database the jobs' factors come from; the filter holds GPU jobs at submit. No
  runtime history: its estimates are the time limits.
- ``pal+history``: the same, with the database's runtime history seeded first from the
  `sacct -P` exports of earlier runs (pal_eval.replay.history), each imported with
  `pal jobs import-history`, so the placer's estimates are the runtimes it learns from them.

The prediction of each arm is the event simulator on exactly the replay's inputs: the
shaped trace with the limits the jobs asked for (``--runtime-estimate limit``), the
cluster from the same classification rows, the same locality penalty; the Slurm arm with
`slurm-reserving` (sched/backfill as Slurm plans it: whole nodes reserved for every waiting
job it tests) and a backfill pass every bf_interval (1 s on the test cluster), the
pal arms with the placer's policy, a pass every placer cycle, and the same GPU slots on
every node of a multi-node job (all the daemon can steer) -- or, where the placer tells the
filter to hold no job at all, as Slurm's own, since Slurm then schedules every job; the pal+history arm with the
estimates the placer learns (read from the seeded database by the placer's own function and
rule: min(learned, limit) per job, the limit where nothing was learned).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pal_eval.replay.arms import Arm, ArmSettings, Latencies
from pal_eval.replay.calibration import calibration_plan, latencies_from
from pal_eval.replay.harness import ArmRun, run_arm
from pal_eval.replay.plan import ReplayPlan, check_cluster
from pal_eval.replay.prediction import Prediction, comparison, predict_mean, start_misses
from pal_eval.replay.start_lead import start_lead
from pal_slurm.errors import PalError
from pal_slurm.placement.model import Cluster
from pal_slurm.simulate.event import busy_curve
from pal_slurm.simulate.metrics import RunMetrics, run_metrics
from pal_slurm.simulate.result import SimResult


@dataclass
class ArmReport:
    arm: str
    policy: str
    predicted: SimResult
    plan: ReplayPlan | None = None
    run: ArmRun | None = None
    real: RunMetrics | None = None
    real_busy: tuple[tuple[float, int], ...] = ()
    notes: list[str] = field(default_factory=list)
    latencies: Latencies | None = None
    #: the mean over jittered copies (predict_mean); None: `predicted` alone
    prediction: Prediction | None = None

    @property
    def predicted_metrics(self) -> RunMetrics:
        return self.prediction.metrics if self.prediction is not None else self.predicted.metrics

    def comparison(self) -> list[dict[str, Any]]:
        """Per metric: real, predicted and (predicted - real) / real."""
        return comparison(self.predicted_metrics, self.real.as_dict() if self.real is not None else None)

    def as_dict(self) -> dict[str, Any]:
        run = self.run.as_dict() if self.run else None
        return {"arm": self.arm, "policy": self.policy, "complete": bool(self.run and self.run.complete),
                "latencies_s": self.latencies.as_dict() if self.latencies else None,
                "real": self.real.as_dict() if self.real else None, "predicted": self.predicted_metrics.as_dict(),
                "prediction": self.prediction.as_dict() if self.prediction is not None else None,
                "comparison": self.comparison(), "notes": list(self.notes), "run": run,
                # the same lead over the run's own jobs, beside the calibrated one the prediction uses
                "run_start_lead_s": start_lead(run["jobs"]) if run else None,
                "start_misses": start_misses(run, self.predicted, self.plan) if run and self.plan else None}


def repredicted(result: Mapping[str, Any], plan: ReplayPlan, cluster: Cluster, settings: ArmSettings, *,
                db_url: str, history: Sequence[tuple[str, Path]] = ()) -> dict[str, Any]:
    """A stored arm result (`ArmReport.as_dict`) predicted again by this simulator on the inputs
    of its run: the latencies its calibration measured and, for pal+history, the estimates
    learned from the same exports (imported again into `db_url`). The measurement is kept; so a
    model change after a run is judged on the runs already made."""
    arm = Arm.of(str(result["arm"]))
    learned = None
    if arm.learns_history:
        if not history:
            raise PalError("arm pal+history needs the sacct exports its run learned from to be predicted again")
        clear_history(db_url)
        seed_history(db_url, history)
        learned = learned_estimates(db_url, plan, settings)
    lat = result.get("latencies_s")
    latencies = {arm: Latencies(**lat)} if lat else {}
    pred = predict_mean(plan, cluster, arm, replace(settings, latencies=latencies), learned=learned)
    return {**result, "predicted": pred.metrics.as_dict(), "prediction": pred.as_dict(),
            "comparison": comparison(pred.metrics, result.get("real")),
            "start_misses": start_misses(result.get("run"), pred.base, plan)}


def measured(plan: ReplayPlan, run: ArmRun) -> tuple[RunMetrics, tuple[tuple[float, int], ...]]:
    """The real arm's figures, in trace seconds, with the simulator's definitions."""
    outcomes = run.outcomes(plan)
    return (run_metrics(outcomes, busy_gpu_seconds=run.busy_gpu_s(plan), cluster_gpus=plan.nodes * plan.gpus_per_node),
            busy_curve(outcomes))


@dataclass(frozen=True)
class ClusterHandle:
    """The running cluster an arm uses: the environment reaching it, and the filter's files."""

    env: Mapping[str, str]
    state_file: Path
    kill_switch: Path


def run_arms(plan: ReplayPlan, cluster: Cluster, handle: ClusterHandle, *, db_url: str, work_dir: Path,
             factors: Mapping[str, Mapping[str, Mapping[str, float]]], settings: ArmSettings,
             arms: Sequence[str] = ("slurm", "pal"), say: Callable[[str], None] = print, calibrate: bool = False,
             overrun_slack_s: float = 30.0, history: Sequence[tuple[str, Path]] = ()) -> list[ArmReport]:
    """Run each arm in turn on the real cluster (the queue drained in between) and predict it.

    With `calibrate`, each arm first runs `calibration_plan` in the same set-up and the
    prediction uses the latencies it shows (`latencies_from`); otherwise those given in
    `settings` (none: an ideal scheduler). `history` is the (label, sacct export) of each
    earlier run the pal+history arm is seeded with (required for that arm); the pal arm
    runs with every replay history removed from the database."""
    reports = []
    latencies = dict(settings.latencies)
    check_cluster(plan, cluster_gpus(handle.env))
    chosen = [Arm.of(a) for a in arms]
    if any(a.learns_history for a in chosen) and not history:
        raise PalError("arm pal+history needs the sacct exports of earlier runs to learn from (none given)")
    for arm in chosen:
        arm_dir = work_dir / arm
        arm_dir.mkdir(parents=True, exist_ok=True)
        _wait_idle(handle.env)
        notes: list[str] = []
        learned = _history_for(arm, plan, settings, db_url=db_url, history=history, notes=notes, say=say)
        if calibrate and arm.placed_by_pal and Arm.SLURM not in latencies:
            # no slurm arm before it (the arms run side by side on two clusters): measure
            # plain Slurm's dispatch here, so the hold is told apart from it
            with arm_running(Arm.SLURM, handle, db_url=db_url, work_dir=arm_dir, settings=settings, horizon_s=0.0,
                             notes=notes, say=say):
                cal = run_arm(calibration_plan(plan.nodes, plan.gpus_per_node), arm=Arm.SLURM,
                              work_dir=arm_dir / "calibration-slurm", factors=factors, env=handle.env,
                              locality_penalty=settings.locality_penalty, overrun_slack_s=overrun_slack_s)
            latencies[Arm.SLURM] = latencies_from(cal)
            say(f"arm {arm}: plain Slurm's latencies on this cluster (real s) {latencies[Arm.SLURM].as_dict()}")
            _wait_idle(handle.env)
        with arm_running(arm, handle, db_url=db_url, work_dir=arm_dir, settings=settings, horizon_s=plan.to_real_s(
                max(j.submit_time for j in plan.trace.jobs)), notes=notes, say=say):
            if calibrate:
                cal = run_arm(calibration_plan(plan.nodes, plan.gpus_per_node), arm=arm,
                              work_dir=arm_dir / "calibration", factors=factors, env=handle.env,
                              locality_penalty=settings.locality_penalty, overrun_slack_s=overrun_slack_s)
                slurm = latencies.get(Arm.SLURM)
                latencies[arm] = latencies_from(cal, dispatch_s=slurm.start_latency_s if arm.placed_by_pal and slurm
                                                else None)
                say(f"arm {arm}: calibrated latencies (real s) {latencies[arm].as_dict()}")
                _wait_idle(handle.env)
            run = run_arm(plan, arm=arm, work_dir=arm_dir, factors=factors, env=handle.env,
                          locality_penalty=settings.locality_penalty, say=say, overrun_slack_s=overrun_slack_s)
        reports.append(_arm_report(arm, plan, cluster, replace(settings, latencies=latencies), run, notes,
                                   learned=learned))
    return reports


def _history_for(arm: Arm, plan: ReplayPlan, settings: ArmSettings, *, db_url: str,
                 history: Sequence[tuple[str, Path]], notes: list[str],
                 say: Callable[[str], None]) -> dict[str, float] | None:
    """The database's runtime history set up for one arm: a pal arm starts from none a replay
    imported; pal+history is seeded with the earlier runs' exports and gets the estimates its
    placer learns from them (None for the other arms)."""
    if arm.placed_by_pal:
        removed = clear_history(db_url)
        if removed:
            say(f"arm {arm}: removed {removed} jobs of earlier replay histories from the database")
    if not arm.learns_history:
        return None
    for line in seed_history(db_url, history):
        say(f"arm {arm}: {line}")
    learned = learned_estimates(db_url, plan, settings)
    notes.append(f"runtime history: {len(history)} earlier runs; learned estimates for {len(learned)} of "
                 f"{len(plan.jobs)} jobs")
    say(f"arm {arm}: learned runtimes for {len(learned)} of {len(plan.jobs)} jobs")
    return learned


def _arm_report(arm: Arm, plan: ReplayPlan, cluster: Cluster, settings: ArmSettings, run: ArmRun, notes: list[str],
                *, learned: Mapping[str, float] | None) -> ArmReport:
    """One arm's run beside its prediction with the latencies in `settings`; a run that did not
    complete carries its problems as notes."""
    prediction = predict_mean(plan, cluster, arm, settings, learned=learned)
    predicted = prediction.base
    rep = ArmReport(arm=arm, policy=settings.placer_policy if arm.placed_by_pal else "slurm (sched/backfill, cons_tres)",
                    predicted=predicted, prediction=prediction, plan=plan, run=run, notes=notes,
                    latencies=settings.latencies.get(arm, Latencies()))
    rep.real, rep.real_busy = measured(plan, run)
    if not run.complete:
        rep.notes.extend(run.problems)
    return rep


@contextmanager
def arm_running(arm: str, handle: ClusterHandle, *, db_url: str, work_dir: Path, settings: ArmSettings,
                horizon_s: float, notes: list[str], say: Callable[[str], None],
                mode: str = "enforce") -> Iterator[None]:
    """The cluster set up for one arm: plain Slurm (the filter's kill switch on), or the
    placer with the filter on, enforcing (or in `mode` "observe": the filter holds nothing, the
    placer records what it would do and keeps its ledger); afterwards the filter is off and the
    placer gone."""
    from pal_slurm.placer.process import PlacerProcess, wait_heartbeat, write_config

    if not Arm.of(arm).placed_by_pal:
        handle.kill_switch.touch()
        say(f"arm slurm: plain Slurm (filter off: {handle.kill_switch})")
        yield
        return
    config = write_config(work_dir, db_url, handle.state_file, mode=mode, interval=settings.placer_interval_s,
                          policy=settings.placer_policy, hold_s=settings.hold_s, max_hold=max(3600.0, 2 * horizon_s + 600),
                          restart_grace_s=0, locality_penalty=settings.locality_penalty,
                          wait_fraction=settings.wait_fraction, jobs={"runtime_min_jobs": settings.history_min_jobs},
                          **({"max_wait_s": settings.max_wait_s} if settings.max_wait_s is not None else {}))
    log = work_dir / "placer.log"
    log.unlink(missing_ok=True)
    placer = PlacerProcess(config, dict(handle.env), log)
    try:
        if mode == "enforce":
            wait_heartbeat(handle.state_file, placer)
        else:
            _wait_published(handle.state_file, placer, mode)
        handle.kill_switch.unlink(missing_ok=True)
        say(f"arm {arm}: pal placer {'enforcing' if mode == 'enforce' else mode + 's'} {settings.placer_policy} "
            f"(log {log})")
        yield
    finally:
        handle.kill_switch.touch()
        rc = placer.stop()
        if rc not in (0, -15):
            notes.append(f"pal placer exited with status {rc} (log {log})")


def _wait_published(state_file: Path, placer: Any, mode: str, timeout: float = 30.0) -> None:
    """Until the placer has published `mode` in the filter's state, written since it started
    (observe mode publishes no heartbeat: the filter holds nothing)."""
    from pal_slurm.slurm.filter_state import published_mode

    start = time.time()
    deadline = start + timeout

    def written() -> bool:
        try:
            return state_file.stat().st_mtime >= start - 1.0
        except OSError:
            return False

    while not (written() and published_mode(state_file) == mode):
        if placer.proc.poll() is not None or time.time() > deadline:
            raise PalError(f"pal placer did not publish mode {mode} in {state_file} (log {placer.log})")
        time.sleep(0.2)


def clear_history(db_url: str) -> int:
    """Remove every runtime history a replay imported (labels HISTORY_PREFIX...); how many jobs."""
    from pal_slurm.db.engine import make_engine, session_scope
    from pal_slurm.db.history_store import delete_history
    from pal_eval.replay.history import HISTORY_PREFIX

    engine = make_engine(db_url)
    try:
        with session_scope(engine) as session:
            return delete_history(session, prefix=HISTORY_PREFIX)
    finally:
        engine.dispose()


def seed_history(db_url: str, history: Sequence[tuple[str, Path]]) -> list[str]:
    """Import each (label, sacct export) with the command a site runs,
    `pal jobs import-history FILE --cluster LABEL`; one line per export saying what it did."""
    import json
    import sys

    from pal_eval.replay.history import HISTORY_PREFIX
    from pal_slurm.slurm.command import run_command

    lines = []
    for label, path in history:
        if not label.startswith(HISTORY_PREFIX):
            raise PalError(f"replay history label {label!r} must start with {HISTORY_PREFIX!r}")
        proc = run_command([sys.executable, "-m", "pal_slurm", "--db", db_url, "jobs", "import-history", str(path),
                            "--cluster", label, "--json"], timeout=120, check=False)
        if proc.returncode != 0:
            raise PalError(f"pal jobs import-history {path} failed: {(proc.stderr or proc.stdout).strip()[:300]}")
        doc = json.loads(proc.stdout)
        lines.append(f"imported {doc['imported']} jobs of {path.name} as {label} "
                     f"({doc['already_present']} already present, {doc['skipped']} skipped)")
    return lines


def learned_estimates(db_url: str, plan: ReplayPlan, settings: ArmSettings) -> dict[str, float]:
    """Trace job id -> the learned runtime (trace seconds) the pal+history arm's placer reads
    from the database: the placer's own function (history_store.learned_runtimes_all) on the
    rule of its configuration, looked up by the user and job name each job is submitted as."""
    from pal_slurm.config import PalConfig
    from pal_slurm.db.engine import make_engine, session_scope
    from pal_slurm.db.history_store import learned_runtimes_all, runtime_rule

    cfg = PalConfig.model_validate({"jobs": {"runtime_min_jobs": settings.history_min_jobs}})
    engine = make_engine(db_url)
    try:
        with session_scope(engine) as session:
            learned = learned_runtimes_all(session, runtime_rule(cfg))
    finally:
        engine.dispose()
    me = submitting_user()
    out = {}
    for j in plan.jobs:
        found = learned.learned("", me, j.name)
        if found is not None:
            out[j.job.job_id] = plan.to_trace_s(found.seconds)
    return out


def submitting_user() -> str:
    """The user the replay's sbatch runs as (every replayed job's Slurm user)."""
    import os
    import pwd

    return pwd.getpwuid(os.getuid()).pw_name


def cluster_gpus(env: Mapping[str, str]) -> dict[str, int]:
    """node -> GPUs, for the schedulable nodes of the cluster `env` reaches."""
    from pal_slurm.slurm.cli_backend import CliBackend
    from pal_slurm.slurm.tres import parse_gres_alloc

    return {n.name: sum(u.count for u in parse_gres_alloc(n.gres) if u.name == "gpu")
            for n in CliBackend(env=dict(env)).nodes() if n.schedulable}


def _wait_idle(env: Mapping[str, str], timeout_s: float = 120.0) -> None:
    """Until no job is pending or running on the cluster (an arm starts on an empty cluster)."""
    from pal_slurm.slurm import parse_json
    from pal_slurm.slurm.command import run_command

    deadline = time.time() + timeout_s
    while True:
        doc = parse_json.load(run_command(["squeue", "--all", "--json"], timeout=60, env=env).stdout, "squeue --json")
        active = parse_json.jobs_from_doc(doc, active_only=True)
        if not active:
            return
        if time.time() > deadline:
            raise PalError(f"the cluster is not idle: {len(active)} jobs pending or running "
                           f"(first {active[0].job_id}, {active[0].name!r}); a replay needs it to itself")
        time.sleep(1.0)


def configure_database(db_url: str, gpus: Sequence[Any], *, note: str) -> tuple[Cluster, dict[str, Any], int]:
    """Store the replay fleet's factors as the database's newest classification, then read
    them back the way the placer and `--variability db` do: (the simulator's cluster, the
    jobs' factors file content, the classification version). One truth for all three."""
    from pal_slurm.db import migrate
    from pal_slurm.db.engine import make_engine, session_scope
    from pal_slurm.db.variability_store import load_variability, save_variability
    from pal_slurm.placement.variability import cluster_from_gpus
    from pal_eval.replay.fleet import MODEL, job_factors

    engine = make_engine(db_url, create=True)
    try:
        migrate.upgrade(engine)
        with session_scope(engine) as session:
            save_variability(session, gpus, model=MODEL, note=note)
        with session_scope(engine) as session:
            stored = load_variability(session, sorted(gpus[0].slowdown))
    finally:
        engine.dispose()
    return cluster_from_gpus(stored.gpus), job_factors(stored.gpus), stored.version
