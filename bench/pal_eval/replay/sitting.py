"""One sitting of the real-Slurm replay (bench/replay.py): its inputs checked before a cluster
starts, the replay cluster started, the drawn fleet stored as the database's classification,
then every trace x repetition x arm run, or skipped (or predicted again) when an earlier
sitting stored it, and the summary of all of them.

Steps, in order: `inputs` (every input refused here, before a cluster starts), `start_cluster`,
`configure`, `Sitting.run_plan` per repetition (its arms: `history_of` for pal+history,
`stored_arm` for one an earlier sitting ran, `run_one_arm`), `Sitting.finish`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pal_eval import cluster as test_cluster
from pal_eval.paths import sia_philly
from pal_eval.replay.arms import ARMS, Arm, ArmSettings, Latencies
from pal_eval.replay.experiment import ClusterHandle, configure_database, repredicted, run_arms, submitting_user
from pal_eval.replay.fleet import FLEETS, PREFIX, draw_fleet, inventory, name_fleet, node_names
from pal_eval.replay.harness import ReplayInterrupted
from pal_eval.replay.history import history_label
from pal_eval.replay.plan import ReplayPlan, capped_runtimes, first_jobs, plan_replay
from pal_eval.replay.plot import write_replay_plot
from pal_eval.replay.repeat import (
    earlier_runs,
    export_path,
    fingerprint,
    finite,
    load_done,
    result_path,
    save_export,
    save_result,
)
from pal_eval.replay.summary import print_aggregate
from pal_slurm.errors import PalError
from pal_slurm.simulate.estimates import RuntimeEstimate
from pal_slurm.simulate.traces import Trace

#: where bench/replay.py says what went wrong
WHO = "bench/replay.py"

#: a history an arm learns from: (its label in the database, its sacct export)
History = list[tuple[str, Path]]


@dataclass(frozen=True)
class Inputs:
    """What a sitting replays, checked: one plan per trace x repetition (trace name,
    repetition, shake seed, plan), the arms, the runtime-estimate model, the shake."""

    plans: list[tuple[str, int, int, ReplayPlan]]
    arms: list[Arm]
    estimate: RuntimeEstimate
    shake_s: float


@dataclass(frozen=True)
class ReplayCluster:
    """The running replay cluster: what starts and stops it, what reaches it, its Slurm."""

    env: dict[str, str]  # slurm-cluster.sh's: its directory, ports, inventory
    handle: ClusterHandle
    version: str


def run(args: argparse.Namespace, artifact: Path) -> int:
    """args: bench/replay.py's options; `artifact` the PAL artifact's data (the default traces)."""
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    checked = inputs(args, artifact)
    if isinstance(checked, str):
        print(f"{WHO}: error: {checked}", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print(f"{WHO}: run as root (it starts Slurm daemons and creates GPU device files)", file=sys.stderr)
        return 2
    cluster = start_cluster(args, out)
    if cluster is None:
        return 1
    sitting = configure(args, out, checked, cluster)
    try:
        for name, rep, seed, plan in checked.plans:
            sitting.run_plan(name, rep, seed, plan)
    except ReplayInterrupted as exc:
        print(f"{WHO}: {exc}", file=sys.stderr)
        sitting.rc = 130
    except PalError as exc:  # a cluster that is busy or too small, a Slurm failure mid-arm: one line
        print(f"{WHO}: error: {exc}", file=sys.stderr)
        sitting.rc = 1
    finally:
        sitting.finish()
    print(f"\nresults: {out / 'replay.json'}")
    return sitting.rc


def inputs(args: argparse.Namespace, artifact: Path) -> Inputs | str:
    """The plans of every trace and repetition, or what is wrong with the inputs, in words."""
    from pal_slurm.simulate.estimates import parse_runtime_estimate
    from pal_slurm.simulate.shake import SHAKE_S, shaken

    names = [a.strip() for a in args.arms.split(",") if a.strip()]
    shake_s = SHAKE_S if args.shake_s is None else args.shake_s
    try:
        arms = checked_arms(args, names, shake_s)
        estimate = parse_runtime_estimate(args.estimate)
        plans = []
        for trace in input_traces(args, artifact):
            if args.jobs:
                trace = first_jobs(trace, args.jobs)
            if args.cap_hours is not None:
                trace = capped_runtimes(trace, args.cap_hours)
            for rep in range(1, args.reps + 1):
                plans.append((trace.name, rep, rep, plan_replay(
                    shaken(trace, rep, shake_s), seconds_per_hour=args.seconds_per_hour, estimate=estimate,
                    nodes=args.nodes, gpus_per_node=args.gpus_per_node)))
    except (PalError, ValueError, OSError) as exc:
        return str(exc)
    return Inputs(plans, arms, estimate, shake_s)


def input_traces(args: argparse.Namespace, artifact: Path) -> Iterator[Trace]:
    """The traces a sitting replays: --trace files, or the LLM-era mix drawn for the replay
    cluster's shape with each --llm seed (not both), or the artifact's workload-1 and -4."""
    from pal_slurm.simulate.llm_workload import generate_llm
    from pal_slurm.simulate.trace_files import read_trace_file

    seeds = getattr(args, "llm", None) or []
    if seeds and args.trace:
        raise ValueError("--trace and --llm: replay either trace files or the generated LLM-era mix, not both")
    if seeds:
        if args.llm_jobs < 1:
            raise ValueError(f"--llm-jobs must be at least 1, got {args.llm_jobs}")
        for seed in seeds:
            yield generate_llm(args.llm_jobs, nodes=args.nodes, gpus_per_node=args.gpus_per_node, seed=seed)
        return
    for path in args.trace or [sia_philly(artifact, w) for w in (1, 4)]:
        yield read_trace_file(path)


def checked_arms(args: argparse.Namespace, names: list[str], shake_s: float) -> list[Arm]:
    """The arms; raises ValueError (PalError: a history that does not parse, FILE:LINE) for any
    option that makes no sense."""
    if args.fleet not in FLEETS:
        raise ValueError(f"unknown fleet {args.fleet!r}: expected one of {', '.join(FLEETS)}")
    unknown = [a for a in names if a not in ARMS]
    if unknown or not names:
        raise ValueError(f"--arms {args.arms!r}: expected some of {', '.join(ARMS)}")
    arms = [Arm(a) for a in names]
    if args.history is not None and not args.history.is_file():
        raise ValueError(f"--history {args.history}: no such file")
    if args.history is not None:  # refused here, FILE:LINE, before a cluster starts
        from pal_slurm.jobs.sacct_history import read_history

        with args.history.open(encoding="utf-8", errors="replace") as f:
            read_history(f, source=str(args.history))
    bf = getattr(args, "bf_resolution", None)
    if bf is not None and not 1 <= bf <= 3600:
        raise ValueError(f"--bf-resolution must be 1-3600 real seconds (Slurm's range), got {bf}")
    if args.reps < 1:
        raise ValueError(f"--reps must be at least 1, got {args.reps}")
    if args.cap_hours is not None and not args.cap_hours > 0:
        raise ValueError(f"--cap-hours must be > 0 trace hours, got {args.cap_hours:g}")
    if shake_s < 0:
        raise ValueError(f"--shake-s must be >= 0 trace seconds, got {shake_s:g}")
    return arms


def bf_resolution_s(args: argparse.Namespace) -> int:
    """The replay cluster's bf_resolution, real seconds: --bf-resolution, else Slurm's default 60 s
    compressed like every other time (60 x k / 3600, at least Slurm's minimum of 1): sched/backfill
    plans on that grid, and Slurm's own 60 s at k = 30 would be a grid of 2 trace hours."""
    bf = getattr(args, "bf_resolution", None)
    if bf is not None:
        return int(bf)
    return max(1, round(60.0 * args.seconds_per_hour / 3600.0))


def _sched_extra(args: argparse.Namespace) -> str:
    """SchedulerParameters the replay cluster adds to the test cluster's (tests/services/slurm-cluster.sh)."""
    return f"bf_resolution={bf_resolution_s(args)}"


def start_cluster(args: argparse.Namespace, out: Path) -> ReplayCluster | None:
    """The replay cluster of --cluster-dir and its ports, --nodes x --gpus-per-node fake GPUs, jobs
    allowed past their limits (as in the simulator); None (said) when it does not start."""
    import subprocess

    # one state per cluster: two replays may share --out, each on its own cluster (side by side)
    inv = out / f"inventory-{args.ctld_port}.json"
    inv.write_text(json.dumps(inventory(args.nodes, args.gpus_per_node, PREFIX, args.node_port), indent=1))
    env = {**os.environ, "PAL_TEST_SLURM_DIR": args.cluster_dir, "PAL_TEST_SLURM_CTLD_PORT": str(args.ctld_port),
           "PAL_TEST_SLURM_NODE_PORT": str(args.node_port), "PAL_TEST_SLURM_INVENTORY": str(inv), "PAL_TEST_SLURM_REST": "0",
           "PAL_TEST_SLURM_CONF_EXTRA": "OverTimeLimit=UNLIMITED", "PAL_PYTHON": sys.executable,
           "PAL_TEST_SLURM_SCHED_EXTRA": _sched_extra(args)}
    t = time.time()
    start = test_cluster.start(env, timeout=None)
    if start.returncode != 0:
        print(start.stderr[-2000:], file=sys.stderr)
        print(f"{WHO}: error: the replay cluster did not start", file=sys.stderr)
        return None
    slurm_env = test_cluster.exports(env)
    version = subprocess.run(["sinfo", "--version"], env={**os.environ, **slurm_env}, capture_output=True,
                             text=True, check=False).stdout.strip()
    print(f"replay cluster: {args.nodes} x {args.gpus_per_node} fake GPUs, {version}, bf_resolution "
          f"{bf_resolution_s(args)} s, up in {time.time() - t:.0f} s ({args.cluster_dir})", flush=True)
    handle = ClusterHandle(env=slurm_env, state_file=Path(args.cluster_dir) / "pal" / "filter-state",
                           kill_switch=Path(args.cluster_dir) / "pal" / "filter-disabled")
    return ReplayCluster(env, handle, version)


def _digest(files: list[Path]) -> str:
    """A hash of the history exports an arm learns from: another history, another result."""
    h = hashlib.sha256()
    for f in files:
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def configure(args: argparse.Namespace, out: Path, inputs: Inputs, cluster: ReplayCluster) -> Sitting:
    """The fleet drawn and stored as the database's classification (the placer places by it, the
    jobs sleep by it, the simulator predicts from it), and the settings every result records."""
    from pal_slurm.simulate.artifact_draw import load_artifact_profiles

    drawn = draw_fleet(args.fleet, load_artifact_profiles(args.variability), args.nodes, args.gpus_per_node, args.seed)
    db = out / f"pal-{args.ctld_port}.db"
    db.unlink(missing_ok=True)
    db_url = f"sqlite:///{db}"
    fleet, factors, cversion = configure_database(
        db_url, name_fleet(drawn, node_names(args.nodes), args.gpus_per_node),
        note=f"replay: fleet {args.fleet} from the {args.variability.name} profiles, seed {args.seed}")
    settings = ArmSettings(locality_penalty=args.penalty, placer_policy=args.policy,
                           placer_interval_s=args.placer_interval)
    version, shake_s, est = cluster.version, inputs.shake_s, inputs.estimate.describe()
    summary = {"slurm": version, "nodes": args.nodes, "gpus_per_node": args.gpus_per_node,
               "seconds_per_hour": args.seconds_per_hour, "lambda": args.penalty, "estimate": est,
               "fleet": args.fleet, "seed": args.seed, "reps": args.reps, "shake_s": shake_s,
               "classification_version": cversion, "traces": []}
    same = {"slurm": version, "nodes": args.nodes, "gpus_per_node": args.gpus_per_node, "k": args.seconds_per_hour,
            "lambda": args.penalty, "estimate": est, "fleet": args.fleet, "fleet_seed": args.seed,
            "variability": args.variability.name, "shake_s": shake_s, "jobs": args.jobs, "policy": args.policy,
            "placer_interval_s": args.placer_interval, "calibrate": not args.no_calibrate}
    return Sitting(args, out, inputs, cluster, db_url, fleet, factors, settings, summary, same)


@dataclass
class Sitting:
    """The arms of one sitting and what they stored, in order; `rc` its exit status so far."""

    args: argparse.Namespace
    out: Path
    inputs: Inputs
    cluster: ReplayCluster
    db_url: str
    fleet: Any  # the classified GPUs as a placement Cluster
    factors: Any  # node -> minor -> class -> PerfVar, what the jobs sleep by
    settings: ArmSettings
    summary: dict[str, Any]
    same: dict[str, Any]  # what a stored result must have been run with to count
    stored: dict[tuple[str, str], list[dict]] = field(default_factory=dict)  # (trace, arm) -> each repetition's
    rc: int = 0

    def run_plan(self, name: str, rep: int, seed: int, plan: ReplayPlan) -> None:
        """One repetition of one trace: each arm run (or taken from an earlier sitting), and the
        plot of those this sitting ran."""
        args = self.args
        print(f"\n== {name} repetition {rep}/{args.reps} (shaken, seed {seed}, +-{self.inputs.shake_s:g} trace s): "
              f"{len(plan.jobs)} jobs, k = {args.seconds_per_hour:g} s per trace hour, lambda {args.penalty:g}, "
              f"fleet {args.fleet}, limits from {plan.estimate} (whole minutes)", flush=True)
        ran = []
        for arm in self.inputs.arms:
            history: History = []
            if arm.learns_history:
                history = self.history_of(arm, name, rep)
                if not history:
                    print(f"   arm {arm}: no earlier complete run of {name} to learn runtimes from "
                          "(run the slurm or pal arm first); skipped", flush=True)
                    self.rc = 1
                    continue
            fp = fingerprint({**self.same, "trace": name, "seed": seed, "arm": arm,
                              **({"history": _digest([f for _l, f in history])} if history else {})})
            path = result_path(self.out, name, rep, seed, arm)
            if self.stored_arm(arm, name, path, fp, plan, history):
                continue
            ran.append(self.run_one_arm(arm, name, rep, seed, plan, path, fp, history))
        if len(ran) >= 2:
            png = self.out / f"replay-{name}-rep{rep}.png"
            write_replay_plot(png, f"{name} (repetition {rep}, seed {seed})", ran,
                              subtitle=f"{self.cluster.version}, {args.nodes}x{args.gpus_per_node} GPUs, "
                                       f"fleet {args.fleet}, k={args.seconds_per_hour:g} s/h, lambda {args.penalty:g}, "
                                       f"limits {plan.estimate}")
            print(f"   plot: {png}")

    def history_of(self, arm: Arm, name: str, rep: int) -> History:
        """The sacct exports a pal+history arm learns from: --history, else those of every other
        arm of repetitions 1..rep that completed before it (also those another invocation stored
        beside this one's, side by side), never its own run."""
        args = self.args
        if args.history is not None:
            return [(f"replay:file:{args.history.name}", args.history.resolve())]
        mine = {a: list(rs) for (t, a), rs in self.stored.items() if t == name}
        for other in ("slurm", "pal"):  # results another invocation stored (side by side)
            have = {int(r["rep"]) for r in mine.get(other, [])}
            for r in range(1, rep + 1):
                prior = None if r in have else load_done(
                    result_path(self.out, name, r, r, other),
                    fingerprint({**self.same, "trace": name, "seed": r, "arm": other}))
                if prior is not None:
                    mine.setdefault(other, []).append(prior)
                    if not export_path(result_path(self.out, name, r, r, other)).is_file():
                        save_export(result_path(self.out, name, r, r, other), prior, submitting_user())
        history = [(history_label(name, r, a), export_path(result_path(self.out, name, r, r, a)))
                   for r, a in earlier_runs(mine, rep)]
        return [(label, f) for label, f in history if f.is_file()]

    def stored_arm(self, arm: Arm, name: str, path: Path, fp: str, plan: ReplayPlan, history: History) -> bool:
        """Whether an earlier sitting stored this arm with the same settings: then it is kept
        (predicted again with --repredict) and its export written when missing."""
        done = load_done(path, fp)
        if done is None:
            return False
        if self.args.repredict:
            done = repredicted(done, plan, self.fleet, self.settings, db_url=self.db_url, history=history)
            save_result(path, done)
            print(f"   arm {arm}: done in an earlier sitting ({path}), predicted again", flush=True)
        else:
            print(f"   arm {arm}: done in an earlier sitting ({path}), skipped", flush=True)
        self.stored.setdefault((name, arm), []).append(done)
        if not export_path(path).is_file():
            save_export(path, done, submitting_user())
        return True

    def run_one_arm(self, arm: Arm, name: str, rep: int, seed: int, plan: ReplayPlan, path: Path, fp: str,
                    history: History) -> Any:
        """The arm on the cluster (a pal arm predicted with the slurm arm's latencies of the same
        repetition when it ran); its result and sacct export stored at once."""
        lat = {}
        prior = self.stored.get((name, "slurm"), [])
        slurm_done = next((r for r in prior if r.get("rep") == rep and r.get("latencies_s")), None)
        if arm.placed_by_pal and slurm_done is not None:
            lat = {"slurm": Latencies(**slurm_done["latencies_s"])}
        reports = run_arms(plan, self.fleet, self.cluster.handle, db_url=self.db_url,
                           work_dir=self.out / name / f"rep{rep}-seed{seed}", factors=self.factors,
                           settings=replace(self.settings, latencies=lat), arms=[arm],
                           calibrate=not self.args.no_calibrate, say=lambda s: print("   " + s, flush=True),
                           history=history)
        report = reports[0]
        result = {**report.as_dict(), "trace": name, "rep": rep, "seed": seed, "fingerprint": fp,
                  "jobs": len(plan.jobs), "history": [label for label, _f in history]}
        save_result(path, result)
        save_export(path, result, submitting_user())
        self.stored.setdefault((name, arm), []).append(result)
        state = "complete" if result["complete"] else "INCOMPLETE: left out of the mean, rerun to redo it"
        print(f"   arm {arm}: {state}; result {path}" + "".join(f"\n     ! {n}" for n in report.notes[:10]),
              flush=True)
        if not result["complete"]:
            self.rc = 1
        return report

    def finish(self) -> None:
        """The summary of every trace (whatever completed), replay.json, and the cluster stopped
        unless --keep-cluster."""
        for name in dict.fromkeys(n for n, _r, _s, _p in self.inputs.plans):
            self.summary["traces"].append(print_aggregate(
                name, {arm: self.stored.get((name, arm), []) for arm in self.inputs.arms}, self.args.reps))
        (self.out / "replay.json").write_text(json.dumps(finite(self.summary), indent=1, default=str, allow_nan=False))
        if not self.args.keep_cluster:
            test_cluster.stop(self.cluster.env)
