"""A GPU slot turning slow mid-run on a real slurmctld, flagged by `pal gpus learn --apply` and taken
out of service by `pal gpus quarantine`, with no job lost (bench/slow_slot.py; docs/evaluation.md,
"A slot turning slow on real Slurm: flagged and quarantined").

Steps, in order: `inputs` (checked before a cluster starts), the replay's `start_cluster`
(pal_eval.replay.sitting: its own state directory and ports), `prepare` (the fleet stored and
classified in the database, as the replay's pal arm does), `run_watched` (the placer running in
observe or enforce mode, so every finished job lands in its ledger, and the replay harness's
`run_arm` submitting the recurring workload, with pal_eval.slow_slot_watch's `Watch` as its
tick: the change, the learning, the quarantine), `check` (from the jobs' records and Slurm's
states: pal_eval.slow_slot_model.figures), `release` (`pal gpus release --apply`), `report`
(figures and targets), and in every case `clean_up` (everything cancelled, the cluster stopped).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pal_eval import cluster as test_cluster
from pal_eval.replay.arms import Arm, ArmSettings
from pal_eval.replay.cancel import cancel_all
from pal_eval.replay.experiment import ClusterHandle, arm_running, configure_database
from pal_eval.replay.fleet import FLEETS, draw_fleet, name_fleet, node_names
from pal_eval.replay.harness import ArmRun, ReplayInterrupted, run_arm
from pal_eval.replay.plan import ReplayPlan, plan_replay
from pal_eval.replay.sitting import ReplayCluster, start_cluster
from pal_eval.slow_slot_model import WIDEST, Moments, Ran, Slot, figures, named_by_fingerprint, slot_name, workload
from pal_eval.slow_slot_watch import Timing, Watch, pal_cli
from pal_eval.targets import Targets
from pal_slurm.errors import PalError
from pal_slurm.slurm.command import run_command

WHO = "bench/slow_slot.py"
#: the targets: the slowed slot flagged within this many of its jobs' ends and trace hours
JOBS_TARGET = 10
HOURS_TARGET = 24.0
#: states in which a job has not ended
ACTIVE = frozenset({"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "RESIZING", "SUSPENDED"})


@dataclass(frozen=True)
class Inputs:
    plan: ReplayPlan
    slot: Slot


def inputs(args: argparse.Namespace) -> Inputs | str:
    """The plan and the slot, or what is wrong with the options, in words."""
    from pal_slurm.simulate.estimates import parse_runtime_estimate
    from pal_slurm.slurm.quarantine_model import parse_gpu

    slot = parse_gpu(args.slot)
    hours = args.change_at + args.watch_hours + args.after_hours
    if slot is None or slot[0] not in node_names(args.nodes) or not 0 <= slot[1] < args.gpus_per_node:
        return (f"--slot {args.slot!r}: expected NODE:MINOR of the replay cluster ({node_names(args.nodes)[0]}"
                f"..{node_names(args.nodes)[-1]}, minors 0-{args.gpus_per_node - 1})")
    if args.gpus_per_node < WIDEST or args.nodes < 2:
        return f"the cluster needs at least 2 nodes of {WIDEST} GPUs (the workload's widest job), got " \
               f"{args.nodes} x {args.gpus_per_node}"
    if args.fleet not in FLEETS:
        return f"unknown fleet {args.fleet!r}: expected one of {', '.join(FLEETS)}"
    if not (args.ratio > 1 and args.seconds_per_hour > 0 and args.learn_every > 0 and args.change_at > 0
            and args.watch_hours > 0 and args.after_hours > 0 and 0 < args.load <= 1.5 and args.fingerprints > 0):
        return "--ratio must be > 1, --load in (0, 1.5], and every time and count positive"
    try:
        trace = workload(args.fingerprints, hours, args.load, args.nodes * args.gpus_per_node, args.workload_seed)
        plan = plan_replay(trace, seconds_per_hour=args.seconds_per_hour, estimate=parse_runtime_estimate("limit"),
                           nodes=args.nodes, gpus_per_node=args.gpus_per_node)
    except (PalError, ValueError) as exc:
        return str(exc)
    return Inputs(named_by_fingerprint(plan), slot)


@dataclass(frozen=True)
class Setup:
    """The running experiment's pieces: the cluster, the database, the jobs' factors, the CLI's
    configuration (the same database and the cluster's filter state)."""

    cluster: ReplayCluster
    db_url: str
    factors: dict[str, Any]
    work_dir: Path
    config: Path

    @property
    def handle(self) -> ClusterHandle:
        return self.cluster.handle


def run(args: argparse.Namespace) -> int:
    """args: bench/slow_slot.py's options."""
    checked = inputs(args)
    if isinstance(checked, str):
        print(f"{WHO}: error: {checked}", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print(f"{WHO}: run as root (it starts Slurm daemons and creates GPU device files)", file=sys.stderr)
        return 2
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    cluster = start_cluster(args, out)
    if cluster is None:
        return 1
    watch: Watch | None = None
    try:
        setup = prepare(args, out, cluster)
        watch = make_watch(args, setup, checked.slot)
        arm = run_watched(args, setup, checked.plan, watch)
        found = check(args, checked, setup, watch, arm)
        found["release"] = release(watch)
        result = {"slurm": cluster.version, "options": {k: str(v) for k, v in vars(args).items()},
                  "figures": found, "learns": watch.learns, "quarantine": watch.asked}
        (out / "slow-slot.json").write_text(json.dumps(result, indent=1, default=str))
        return report(args, cluster.version, checked, found)
    except ReplayInterrupted as exc:
        print(f"{WHO}: {exc}", file=sys.stderr)
        return 130
    except PalError as exc:
        print(f"{WHO}: error: {exc}", file=sys.stderr)
        return 1
    finally:
        clean_up(args, cluster, watch)


def prepare(args: argparse.Namespace, out: Path, cluster: ReplayCluster) -> Setup:
    """The fleet drawn and stored as the database's classification (what the placer and `pal gpus
    learn` read as the benchmark), the jobs' factors from the same rows, the CLI's configuration."""
    from pal_slurm.placer.process import write_config
    from pal_slurm.simulate.artifact_draw import load_artifact_profiles

    drawn = draw_fleet(args.fleet, load_artifact_profiles(args.variability), args.nodes, args.gpus_per_node, args.seed)
    db = out / f"pal-{args.ctld_port}.db"
    db.unlink(missing_ok=True)
    db_url = f"sqlite:///{db}"
    _cluster, factors, version = configure_database(
        db_url, name_fleet(drawn, node_names(args.nodes), args.gpus_per_node),
        note=f"slow slot: fleet {args.fleet}, seed {args.seed}")
    cli = out / "cli"
    cli.mkdir(exist_ok=True)
    config = write_config(cli, db_url, cluster.handle.state_file, mode=args.placer_mode)
    node, minor = args.slot.split(":")
    print(f"fleet {args.fleet} (seed {args.seed}) stored as classification version {version} ({db}); "
          f"{args.slot}'s factors by class {factors[node][minor]}", flush=True)
    (out / "placer").mkdir(exist_ok=True)
    return Setup(cluster, db_url, factors, out / "arm", config)


def make_watch(args: argparse.Namespace, setup: Setup, slot: Slot) -> Watch:
    """The tick: `learn` is `pal gpus learn --apply`'s own function on the arm's database."""
    from pal_slurm.config import PalConfig
    from pal_slurm.db.engine import make_engine
    from pal_slurm.services.passive import learn

    engine = make_engine(setup.db_url)
    cfg = PalConfig.model_validate({})  # the defaults a site gets: [classification] passive = "flag"
    k = args.seconds_per_hour
    timing = Timing(k=k, change_s=args.change_at * k, learn_s=args.learn_every * k, watch_s=args.watch_hours * k,
                    after_s=args.after_hours * k)
    return Watch(slot, args.ratio, timing, setup.work_dir, setup.factors, setup.handle.env, pal_cli(setup.config),
                 learn=lambda: learn(engine, cfg, apply=True), say=lambda s: print(s, flush=True))


def run_watched(args: argparse.Namespace, setup: Setup, plan: ReplayPlan, watch: Watch) -> ArmRun:
    """The placer running; the workload submitted and waited for by the replay harness with the
    watch as its tick; then the last states and the last learn."""
    settings = ArmSettings(placer_policy=args.policy, placer_interval_s=args.placer_interval)
    notes: list[str] = []
    say = lambda s: print("   " + s, flush=True)  # noqa: E731
    print(f"\n== {len(plan.jobs)} jobs planned over {plan.to_trace_s(plan.jobs[-1].submit_at_s) / 3600:.1f} trace "
          f"hours at k = {args.seconds_per_hour:g} s; {args.slot} turns {args.ratio:g}x slow at h {args.change_at:g}",
          flush=True)
    with arm_running(Arm.PAL, setup.handle, db_url=setup.db_url, work_dir=setup.work_dir.parent / "placer",
                     settings=settings, horizon_s=plan.jobs[-1].submit_at_s, notes=notes, say=say,
                     mode=args.placer_mode):
        arm = run_arm(plan, arm="slow-slot", work_dir=setup.work_dir, factors=setup.factors, locality_penalty=1.0,
                      env=setup.handle.env, say=say, tick=watch.tick, same_command=True)
        settle(watch, arm, args.placer_interval)
    for n in notes:
        print(f"   ! {n}", flush=True)
    return arm


def settle(watch: Watch, arm: ArmRun, placer_interval_s: float, wait_s: float = 120.0) -> None:
    """After the last record: the quarantine command done, every job's end seen in Slurm, and,
    once the placer has had two cycles to write the last jobs to its ledger, a last learn."""
    deadline = time.time() + wait_s
    ids = [t.slurm_id for t in arm.jobs]
    while time.time() < deadline:
        watch.quarantine_progress(time.time())
        watch.read_slurm(time.time())
        if watch.asked and watch.holder is None and watch.asked[-1]["rc"] is None:
            time.sleep(1.0)
            continue
        if not any(watch.states.get(j) in ACTIVE for j in ids):
            break
        time.sleep(2.0)
    time.sleep(2 * placer_interval_s + 1.0)
    watch.learn_now(time.time())


def check(args: argparse.Namespace, inp: Inputs, setup: Setup, watch: Watch, arm: ArmRun) -> dict[str, Any]:
    """The figures (pal_eval.slow_slot_model.figures) from the jobs' records and Slurm's states."""
    runs = [Ran.of(t.slurm_id, t.record) for t in arm.jobs if t.record is not None and "error" not in t.record]
    slots = [(n, m) for n in node_names(args.nodes) for m in range(args.gpus_per_node)]
    last = max((t.submitted_at for t in arm.jobs), default=arm.t0)
    end = max((r.end for r in runs), default=last)
    at = Moments(arm.t0, args.seconds_per_hour, watch.changed_at, watch.holder_start, last, end)
    found = figures(runs, watch.flags, slot=inp.slot, slots=slots, at=at, submitted=[t.slurm_id for t in arm.jobs],
                    states=watch.states, intruders=watch.intruders)
    k = args.seconds_per_hour
    found.update(problems=list(arm.problems), fingerprints=len({t.plan.name for t in arm.jobs}),
                 ledger_fingerprints=ledger_fingerprints(setup.db_url), holder=watch.holder,
                 change_h=None if watch.changed_at is None else (watch.changed_at - arm.t0) / k,
                 holder_h=None if watch.holder_start is None else (watch.holder_start - arm.t0) / k,
                 asked_h=(watch.asked[0]["at"] - arm.t0) / k if watch.asked else None,
                 last_submit_h=(last - arm.t0) / k, slowed_jobs=slowed_jobs(arm, inp.slot, args.ratio, setup.factors))
    return found


def slowed_jobs(arm: ArmRun, slot: Slot, ratio: float, factors: dict[str, Any]) -> int:
    """How many jobs slept by the slot's slowed factor (their record's pace is its factor x ratio)."""
    mine = factors[slot[0]][str(slot[1])]
    return sum(1 for t in arm.jobs if t.record is not None and [slot[0], slot[1]] in t.record.get("gpus", [])
               and abs(float(t.record.get("pace") or 0.0) - mine[t.plan.job.job_class] * ratio) < 1e-6)


def ledger_fingerprints(db_url: str) -> int | None:
    """How many fingerprints the placer's ledger keys the finished jobs by: one per job name when
    the user and the command are one for every job (the workload's count), else more."""
    from sqlalchemy import func, select

    from pal_slurm.db.engine import make_engine, session_scope
    from pal_slurm.db.models import JobAccounting

    engine = make_engine(db_url)
    try:
        with session_scope(engine) as session:
            return session.scalar(select(func.count(func.distinct(JobAccounting.fingerprint))))
    finally:
        engine.dispose()


def release(watch: Watch) -> dict[str, Any]:
    """`pal gpus release NODE:SLOT --apply`, then `pal gpus quarantined` read again."""
    if watch.holder is None:
        return {"released": False, "why": "no holder"}
    argv = [*watch.pal, "gpus", "release", slot_name(watch.slot), "--apply"]
    proc = run_command(argv, timeout=120, env={**os.environ, **watch.env}, check=False)
    print(f"\n$ pal gpus release {slot_name(watch.slot)} --apply\n{(proc.stdout + proc.stderr).strip()}", flush=True)
    left = watch.holder_id()
    return {"released": proc.returncode == 0 and left is None, "rc": proc.returncode,
            "output": proc.stdout + proc.stderr, "holder_left": left}


def clean_up(args: argparse.Namespace, cluster: ReplayCluster, watch: Watch | None) -> None:
    """Whatever happened: every job of the cluster's queue cancelled (the holder too), the cluster
    stopped unless --keep-cluster."""
    from pal_slurm.slurm import parse_json

    try:
        doc = parse_json.load(run_command(["squeue", "--all", "--json"], timeout=60, env=cluster.handle.env).stdout,
                              "squeue --json")
        left = [j.job_id for j in parse_json.jobs_from_doc(doc, active_only=True)]
    except PalError as exc:
        print(f"{WHO}: squeue not read ({exc}); the cluster is stopped anyway", file=sys.stderr)
        left = [watch.holder] if watch is not None and watch.holder else []
    if left:
        print(f"cancelling {len(left)} job(s) left in the queue: {' '.join(left)}", flush=True)
        cancel_all(left, cluster.handle.env, wait_s=30.0)
    if not args.keep_cluster:
        test_cluster.stop(cluster.env)


def report(args: argparse.Namespace, version: str, inp: Inputs, f: dict[str, Any]) -> int:
    """The figures, then one line per target; 1 when one is missed."""
    jobs, slot, mates, flag = f["jobs"], f["slot_jobs"], f["mates"], f["flag"]
    name = slot_name(inp.slot)
    print(f"\n== {version}, {args.nodes} x {args.gpus_per_node} fake GPUs, k = {args.seconds_per_hour:g} s per trace "
          f"hour, fleet {args.fleet}, placer {args.placer_mode}")
    print(f"workload: {jobs['submitted']} jobs of {f['fingerprints']} fingerprints (the ledger keyed them by "
          f"{f['ledger_fingerprints']}), submitted until h {f['last_submit_h']:.1f}; GPUs busy {f['busy']:.0%} "
          "from h 2 to the last submission")
    print(f"{name} {args.ratio:g}x slow from h {_h(f['change_h'])}: {f['slowed_jobs']} jobs slept by its slowed factor")
    if flag is None:
        print(f"{name} never flagged")
    else:
        print(f"{name} flagged (class {flag['class']}) by the end of job {flag['crossing_job']} at h "
              f"{flag['at_trace_h']:.1f}: {flag['hours_after_change']:.1f} trace hours and {flag['jobs_ended']} of its "
              f"jobs' ends after the change ({flag['slowed_jobs_ended']} of them slowed); `pal gpus learn --apply` "
              f"opened it at h {flag['seen_trace_h']:.1f}; its jobs' pace {flag['passive_factor']:.2f} against its "
              f"benchmark's {flag['benchmark_factor']:.2f}"
              + (f", with {', '.join(flag['with'])}" if flag["with"] else ""))
    print(f"false flags (other GPUs): {len(f['false_flags'])}" + "".join(
        f"\n  {x['gpu']} class {x['class']} by the end of job {x['crossing_job']} at h {x['at_trace_h']:.1f}: "
        f"its jobs' pace {x['passive_factor']:.2f}, benchmark {x['benchmark_factor']:.2f}"
        + (f", with {', '.join(x['with'])}" if x["with"] else "") for x in f["false_flags"]))
    print(f"quarantine asked at h {_h(f['asked_h'])}; holder job {f['holder']} took {name} at h {_h(f['holder_h'])}")
    print(f"jobs started on {name}: {slot['before_change']} before the change, {slot['change_to_holder']} from the "
          f"change to the holder, {slot['after_holder']} after it"
          + (f" ({', '.join(slot['after_holder_ids'])})" if slot["after_holder_ids"] else ""))
    print(f"jobs started on {inp.slot[0]}'s other slots while {name} was out of service: "
          f"{mates['jobs_started_out_of_service']} (busy {mates['busy_out_of_service']:.0%} until the last job's end)")
    print(f"Slurm's view: {len(f['intruders'])} job(s) other than the holder seen running on {name} while it held it")
    print(f"jobs: {jobs['submitted']} submitted, {jobs['completed']} seen COMPLETED in Slurm, {jobs['records']} "
          f"records" + "".join(f"\n  ! {j}: {s}" for j, s in list(jobs["not_completed"].items())[:10])
          + "".join(f"\n  ! {p}" for p in f["problems"][:10]))
    print(f"release: {'done' if f['release']['released'] else 'NOT done'}\n")
    return targets(f, flag)


def targets(f: dict[str, Any], flag: dict[str, Any] | None) -> int:
    t = Targets()
    if flag is None or flag["jobs_ended"] is None:
        t.state(False, "the slowed slot was never flagged")
    else:
        t.check("the slowed slot's jobs' ends to its flag", flag["jobs_ended"], "<=", JOBS_TARGET, digits=0)
        t.check("trace hours from the change to the flag", flag["hours_after_change"], "<=", HOURS_TARGET, "h",
                digits=1)
    after, mates = f["slot_jobs"]["after_holder"], f["mates"]["jobs_started_out_of_service"]
    t.state(f["holder_h"] is not None and after == 0 and not f["intruders"],
            f"jobs started on the slot after the holder took it: {after} (records), {len(f['intruders'])} (Slurm)"
            + ("" if f["holder_h"] is not None else "; no holder ever took it"))
    t.state(mates > 0, f"jobs started on the node's other slots while it was out of service: {mates}")
    jobs = f["jobs"]
    t.state(jobs["completed"] == jobs["submitted"] == jobs["records"] and not f["problems"],
            f"jobs COMPLETED: {jobs['completed']} of {jobs['submitted']} submitted ({jobs['records']} records)")
    return t.exit_status()


def _h(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"
