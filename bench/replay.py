#!/usr/bin/env python3
"""Replay a trace on a real Slurm cluster, plain Slurm against pal-slurm, with the
simulator's prediction of each arm beside the measurement (docs/evaluation.md).

The cluster is this machine's test cluster (tests/services/slurm-cluster.sh) in its own
state directory and ports, by default 16 nodes x 4 fake GPUs (slurmd processes on
127.0.0.1), with OverTimeLimit=UNLIMITED so jobs may outrun their limits as they do in the
simulator. Its GPUs get the PAL artifact's Longhorn variability drawn as the artifact
draws it (seed 42), stored as the database's classification: the placer places by those
rows, the jobs sleep by them, the simulator predicts from them.

Time is compressed: one trace hour is `--seconds-per-hour` real seconds (default 10: the
Sia-Philly traces' 55-63 h makespans take about 10 minutes per arm; Slurm's and the
placer's latencies of about a second are then ~6 trace minutes, against average JCTs of
hours). Slurm keeps time limits in whole minutes, so at k = 10 a limit is a multiple of 6
trace hours; the simulator is given exactly the limits the jobs asked for.

Before each arm, 32 whole-node jobs in two waves calibrate its latencies (dispatch; with
pal-slurm also the hold and the placer's cycle, 0.5 s by default; end -> next start), and the
simulator's prediction of the arm models them (--no-calibrate: an ideal scheduler).

Repetitions (--reps, default 3): repetition r replays the trace shaken from seed r (every
arrival moved by up to --shake-s trace seconds, pal_slurm.simulate.shake; Tsafrir, Ouaknine and
Feitelson's input shaking), both arms on the same shaken copy. Each trace x repetition x arm
writes its result to --out/<trace>/rep<r>-seed<r>/<arm>.json the moment it finishes, and a
rerun with the same settings skips what is done, so an evaluation can be completed over
several sittings. A repetition whose arm did not complete is reported and left out of the
mean (and run again by the next rerun).

Fleets (--fleet): `artifact` (the PAL artifact's per-run draw from the profiles, seed --seed:
Longhorn seed 42 is the paper's fleet), `wide` (parametric: up to ~25 % for class A, 1 % of
GPUs at 1.5x) and `quiet` (each GPU one real Longhorn GPU, its median run: the no-harm check);
each is stored as the database's classification the placer, the jobs and the simulator read.

Learned runtimes (--arms slurm,pal,pal+history): after each arm, its finished jobs are written
beside its result as the `sacct -P` export a site would have of that run (<arm>.sacct; the test
cluster has no slurmdbd, so the replay's own records stand in for sacct:
pal_eval.replay.history). The pal+history arm of repetition r first imports, with
`pal jobs import-history`, the exports of every other arm of repetitions 1..r that completed
before it (never its own run), so the placer's estimates are the runtimes it learns from them
([jobs] runtime_min_jobs = 1: one earlier run of each job per export); the pal arm runs with that
history removed. --history FILE seeds it with one given export instead. Its prediction uses the
same learned estimates. --repredict predicts the stored results again with this simulator on
the inputs of their runs (for a model change after the runs; bench/evaluate.sh's summary does).

Prints per arm the mean [min-max] over the complete repetitions of real and predicted average
/ median / p99 JCT, makespan, utilization (trace hours) and the variability tax, the
prediction's difference from the real mean, and pal / slurm (ratio of the means, and the range
of the per-repetition ratios); writes replay.json and, for each repetition whose two arms ran in
this sitting, one PNG into --out.

Usage: bench/replay.py [--trace workload-1.csv ...] [--nodes 16] [--gpus-per-node 4]
                       [--seconds-per-hour 10] [--lambda 1.7] [--estimate uniform:1:5:42]
                       [--fleet artifact|wide|quiet] [--seed 42] [--reps 3] [--shake-s 300]
                       [--jobs N] [--arms slurm,pal[,pal+history]] [--history FILE] [--placer-interval 0.5]
                       [--out DIR] [--repredict] [--keep-cluster] [--cluster-dir D --ctld-port P --node-port P]
Run as root (it starts Slurm daemons and creates device files). Ctrl-C cancels the
arm's jobs and leaves the cluster clean; the cluster is stopped at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

CLUSTER_DIR = "/var/tmp/pal-replay-slurm"
CTLD_PORT = 16917
NODE_PORT = 17201
PREFIX = "pal-r"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    artifact = Path(os.environ.get("PAL_ARTIFACT_DIR", REPO / "tests/data/pal-artifact"))
    ap.add_argument("--trace", action="append", type=Path,
                    help="Sia-Philly CSV or sacct export (repeatable); default workload-1 and workload-4")
    ap.add_argument("--variability", type=Path, default=artifact / "variability" / "longhorn")
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--gpus-per-node", type=int, default=4)
    ap.add_argument("--seconds-per-hour", type=float, default=10.0, help="real seconds per trace hour (k)")
    ap.add_argument("--lambda", dest="penalty", type=float, default=1.7, help="locality penalty")
    ap.add_argument("--estimate", default="uniform:1:5:42", help="runtime-estimate model the --time limits come from")
    ap.add_argument("--seed", type=int, default=42, help="the fleet's draw")
    ap.add_argument("--fleet", default="artifact", help="artifact (per-run draw; Longhorn seed 42: the paper's), "
                                                        "wide (parametric) or quiet (per-GPU medians)")
    ap.add_argument("--reps", type=int, default=3, help="repetitions per arm, repetition r shaken from seed r")
    ap.add_argument("--shake-s", type=float, default=None,
                    help="how far each arrival moves, +- trace seconds (default pal_slurm.simulate.shake.SHAKE_S)")
    ap.add_argument("--jobs", type=int, default=None, help="replay only the first N jobs of each trace")
    ap.add_argument("--cap-hours", type=float, default=None,
                    help="cut every job's run time to at most this many trace hours (a short evaluation: "
                         "docs/evaluation.md)")
    ap.add_argument("--arms", default="slurm,pal",
                    help="of slurm, pal, pal+history (the placer's estimates learned from the sacct exports of the "
                         "earlier runs: this and earlier repetitions' other arms)")
    ap.add_argument("--history", type=Path, default=None,
                    help="seed every pal+history arm with this sacct -P export instead of the earlier runs'")
    ap.add_argument("--policy", default="pal-guard", help="the placer's policy in the pal arm")
    ap.add_argument("--placer-interval", type=float, default=0.5,
                    help="placer cycle, real seconds (0.5: its latency is then ~5 trace minutes at k = 10)")
    ap.add_argument("--no-calibrate", action="store_true",
                    help="predict with an ideal scheduler (no latencies measured before each arm)")
    ap.add_argument("--out", type=Path, default=Path("replay-out"))
    ap.add_argument("--repredict", action="store_true",
                    help="predict the results stored by earlier sittings again with this simulator, on the inputs "
                         "of their runs (latencies measured, runtimes learned); the measurements are kept. For a "
                         "model change after the runs: the summary then compares today's model with them")
    ap.add_argument("--keep-cluster", action="store_true", help="leave the replay cluster running at the end")
    ap.add_argument("--cluster-dir", default=CLUSTER_DIR, help="the replay cluster's state directory")
    ap.add_argument("--ctld-port", type=int, default=CTLD_PORT, help="its slurmctld port (slurmrestd: +2000)")
    ap.add_argument("--node-port", type=int, default=NODE_PORT, help="its first slurmd port (one per node)")
    args = ap.parse_args()

    from pal_slurm.demo.on_slurm import find_cluster_script
    from pal_slurm.errors import PalError
    from pal_eval.replay.experiment import ArmSettings, ClusterHandle, configure_database, repredicted, run_arms
    from pal_eval.replay.experiment import Latencies
    from pal_eval.replay.fleet import FLEETS, draw_fleet, inventory, name_fleet, node_name
    from pal_eval.replay.experiment import ARMS, Arm, submitting_user
    from pal_eval.replay.history import history_label
    from pal_eval.replay.repeat import (earlier_runs, export_path, fingerprint, finite, load_done, result_path,
                                         save_export, save_result)
    from pal_slurm.simulate.shake import SHAKE_S, shaken
    from pal_eval.replay.harness import ReplayInterrupted
    from pal_eval.replay.plan import capped_runtimes, first_jobs, plan_replay
    from pal_eval.replay.plot import write_replay_plot
    from pal_slurm.simulate.artifact_draw import load_artifact_profiles
    from pal_slurm.simulate.estimates import parse_runtime_estimate
    from pal_slurm.simulate.traces import read_trace_file

    traces = args.trace or [artifact / "traces" / "sia-philly" / f"workload-{w}.csv" for w in (1, 4)]
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    shake_s = SHAKE_S if args.shake_s is None else args.shake_s
    try:
        if args.fleet not in FLEETS:
            raise ValueError(f"unknown fleet {args.fleet!r}: expected one of {', '.join(FLEETS)}")
        unknown = [a for a in arms if a not in ARMS]
        if unknown or not arms:
            raise ValueError(f"--arms {args.arms!r}: expected some of {', '.join(ARMS)}")
        arms = [Arm(a) for a in arms]
        if args.history is not None and not args.history.is_file():
            raise ValueError(f"--history {args.history}: no such file")
        if args.history is not None:  # refused here, FILE:LINE, before a cluster starts
            from pal_slurm.jobs.sacct_history import read_history

            with args.history.open(encoding="utf-8", errors="replace") as f:
                read_history(f, source=str(args.history))
        if args.reps < 1:
            raise ValueError(f"--reps must be at least 1, got {args.reps}")
        if args.cap_hours is not None and not args.cap_hours > 0:
            raise ValueError(f"--cap-hours must be > 0 trace hours, got {args.cap_hours:g}")
        if shake_s < 0:
            raise ValueError(f"--shake-s must be >= 0 trace seconds, got {shake_s:g}")
        estimate = parse_runtime_estimate(args.estimate)
        plans = []  # (trace name, repetition, seed, plan)
        for path in traces:
            trace = read_trace_file(path)
            if args.jobs:
                trace = first_jobs(trace, args.jobs)
            if args.cap_hours is not None:
                trace = capped_runtimes(trace, args.cap_hours)
            for rep in range(1, args.reps + 1):
                plans.append((trace.name, rep, rep, plan_replay(
                    shaken(trace, rep, shake_s), seconds_per_hour=args.seconds_per_hour, estimate=estimate,
                    nodes=args.nodes, gpus_per_node=args.gpus_per_node)))
    except (PalError, ValueError, OSError) as exc:
        print(f"bench/replay.py: error: {exc}", file=sys.stderr)
        return 2

    if os.geteuid() != 0:
        print("bench/replay.py: run as root (it starts Slurm daemons and creates GPU device files)", file=sys.stderr)
        return 2
    script = find_cluster_script()
    # one state per cluster: two replays may share --out, each on its own cluster (side by side)
    inv = out / f"inventory-{args.ctld_port}.json"
    inv.write_text(json.dumps(inventory(args.nodes, args.gpus_per_node, PREFIX, args.node_port), indent=1))
    env = {**os.environ, "PAL_TEST_SLURM_DIR": args.cluster_dir, "PAL_TEST_SLURM_CTLD_PORT": str(args.ctld_port),
           "PAL_TEST_SLURM_NODE_PORT": str(args.node_port), "PAL_TEST_SLURM_INVENTORY": str(inv), "PAL_TEST_SLURM_REST": "0",
           "PAL_TEST_SLURM_CONF_EXTRA": "OverTimeLimit=UNLIMITED", "PAL_PYTHON": sys.executable}
    t = time.time()
    start = subprocess.run([str(script), "start"], env=env, capture_output=True, text=True, check=False)
    if start.returncode != 0:
        print(start.stderr[-2000:], file=sys.stderr)
        print("bench/replay.py: error: the replay cluster did not start", file=sys.stderr)
        return 1
    exports = dict(re.findall(r"^export ([A-Z_]+)=(.*)$",
                              subprocess.run([str(script), "env"], env=env, capture_output=True, text=True,
                                             check=True).stdout, flags=re.MULTILINE))
    slurm_env = {k: v.strip("'\"") for k, v in exports.items()}
    version = subprocess.run(["sinfo", "--version"], env={**os.environ, **slurm_env}, capture_output=True,
                             text=True, check=False).stdout.strip()
    print(f"replay cluster: {args.nodes} x {args.gpus_per_node} fake GPUs, {version}, up in {time.time() - t:.0f} s "
          f"({args.cluster_dir})", flush=True)
    handle = ClusterHandle(env=slurm_env, state_file=Path(args.cluster_dir) / "pal" / "filter-state",
                           kill_switch=Path(args.cluster_dir) / "pal" / "filter-disabled")

    profiles = load_artifact_profiles(args.variability)
    drawn = draw_fleet(args.fleet, profiles, args.nodes, args.gpus_per_node, args.seed)
    names = [node_name(PREFIX, i, args.nodes) for i in range(args.nodes)]
    db = out / f"pal-{args.ctld_port}.db"
    db.unlink(missing_ok=True)
    db_url = f"sqlite:///{db}"
    cluster, factors, cversion = configure_database(
        db_url, name_fleet(drawn, names, args.gpus_per_node),
        note=f"replay: fleet {args.fleet} from the {args.variability.name} profiles, seed {args.seed}")
    settings = ArmSettings(locality_penalty=args.penalty, placer_policy=args.policy,
                           placer_interval_s=args.placer_interval)
    summary: dict = {"slurm": version, "nodes": args.nodes, "gpus_per_node": args.gpus_per_node,
                     "seconds_per_hour": args.seconds_per_hour, "lambda": args.penalty,
                     "estimate": estimate.describe(), "fleet": args.fleet, "seed": args.seed, "reps": args.reps,
                     "shake_s": shake_s, "classification_version": cversion, "traces": []}
    same = {"slurm": version, "nodes": args.nodes, "gpus_per_node": args.gpus_per_node, "k": args.seconds_per_hour,
            "lambda": args.penalty, "estimate": estimate.describe(), "fleet": args.fleet, "fleet_seed": args.seed,
            "variability": args.variability.name, "shake_s": shake_s, "jobs": args.jobs, "policy": args.policy,
            "placer_interval_s": args.placer_interval, "calibrate": not args.no_calibrate}
    stored: dict[tuple[str, str], list[dict]] = {}  # (trace, arm) -> results of every repetition
    rc = 0
    try:
        for name, rep, seed, plan in plans:
            print(f"\n== {name} repetition {rep}/{args.reps} (shaken, seed {seed}, +-{shake_s:g} trace s): "
                  f"{len(plan.jobs)} jobs, k = {args.seconds_per_hour:g} s per trace hour, lambda {args.penalty:g}, "
                  f"fleet {args.fleet}, limits from {plan.estimate} (whole minutes)", flush=True)
            ran = []
            for arm in arms:
                history: list[tuple[str, Path]] = []
                if arm.learns_history and args.history is not None:
                    history = [(f"replay:file:{args.history.name}", args.history.resolve())]
                elif arm.learns_history:
                    mine = {a: list(rs) for (t, a), rs in stored.items() if t == name}
                    for other in ("slurm", "pal"):  # results another invocation stored (side by side)
                        have = {int(r["rep"]) for r in mine.get(other, [])}
                        for r in range(1, rep + 1):
                            prior = None if r in have else load_done(
                                result_path(out, name, r, r, other),
                                fingerprint({**same, "trace": name, "seed": r, "arm": other}))
                            if prior is not None:
                                mine.setdefault(other, []).append(prior)
                                if not export_path(result_path(out, name, r, r, other)).is_file():
                                    save_export(result_path(out, name, r, r, other), prior, submitting_user())
                    history = [(history_label(name, r, a), export_path(result_path(out, name, r, r, a)))
                               for r, a in earlier_runs(mine, rep)]
                    history = [(label, f) for label, f in history if f.is_file()]
                    if not history:
                        print(f"   arm {arm}: no earlier complete run of {name} to learn runtimes from "
                              "(run the slurm or pal arm first); skipped", flush=True)
                        rc = 1
                        continue
                fp = fingerprint({**same, "trace": name, "seed": seed, "arm": arm,
                                  **({"history": _digest([f for _l, f in history])} if history else {})})
                path = result_path(out, name, rep, seed, arm)
                done = load_done(path, fp)
                if done is not None and args.repredict:
                    done = repredicted(done, plan, cluster, settings, db_url=db_url, history=history)
                    save_result(path, done)
                    print(f"   arm {arm}: done in an earlier sitting ({path}), predicted again", flush=True)
                elif done is not None:
                    print(f"   arm {arm}: done in an earlier sitting ({path}), skipped", flush=True)
                if done is not None:
                    stored.setdefault((name, arm), []).append(done)
                    if not export_path(path).is_file():
                        save_export(path, done, submitting_user())
                    continue
                lat = {}
                prior = stored.get((name, "slurm"), [])
                slurm_done = next((r for r in prior if r.get("rep") == rep and r.get("latencies_s")), None)
                if arm.placed_by_pal and slurm_done is not None:
                    lat = {"slurm": Latencies(**slurm_done["latencies_s"])}
                reports = run_arms(plan, cluster, handle, db_url=db_url, work_dir=out / name / f"rep{rep}-seed{seed}",
                                   factors=factors, settings=replace(settings, latencies=lat), arms=[arm],
                                   calibrate=not args.no_calibrate, say=lambda s: print("   " + s, flush=True),
                                   history=history)
                report = reports[0]
                result = {**report.as_dict(), "trace": name, "rep": rep, "seed": seed, "fingerprint": fp,
                          "jobs": len(plan.jobs), "history": [label for label, _f in history]}
                save_result(path, result)
                save_export(path, result, submitting_user())
                stored.setdefault((name, arm), []).append(result)
                ran.append(report)
                state = "complete" if result["complete"] else "INCOMPLETE: left out of the mean, rerun to redo it"
                print(f"   arm {arm}: {state}; result {path}" + "".join(f"\n     ! {n}" for n in report.notes[:10]),
                      flush=True)
                if not result["complete"]:
                    rc = 1
            if len(ran) >= 2:
                png = out / f"replay-{name}-rep{rep}.png"
                write_replay_plot(png, f"{name} (repetition {rep}, seed {seed})", ran,
                                  subtitle=f"{version}, {args.nodes}x{args.gpus_per_node} GPUs, fleet {args.fleet}, "
                                           f"k={args.seconds_per_hour:g} s/h, lambda {args.penalty:g}, "
                                           f"limits {plan.estimate}")
                print(f"   plot: {png}")
    except ReplayInterrupted as exc:
        print(f"bench/replay.py: {exc}", file=sys.stderr)
        rc = 130
    except PalError as exc:  # a cluster that is busy or too small, a Slurm failure mid-arm: one line
        print(f"bench/replay.py: error: {exc}", file=sys.stderr)
        rc = 1
    finally:
        for name in dict.fromkeys(n for n, _r, _s, _p in plans):
            summary["traces"].append(print_aggregate(name, {arm: stored.get((name, arm), []) for arm in arms},
                                                     args.reps))
        (out / "replay.json").write_text(json.dumps(finite(summary), indent=1, default=str, allow_nan=False))
        if not args.keep_cluster:
            subprocess.run([str(script), "stop"], env=env, capture_output=True, check=False)
    print(f"\nresults: {out / 'replay.json'}")
    return rc


def _digest(files: list[Path]) -> str:
    """A hash of the history exports an arm learns from: another history, another result."""
    import hashlib

    h = hashlib.sha256()
    for f in files:
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


LABELS = {"avg_jct_s": "avg JCT (h)", "median_jct_s": "median JCT (h)", "p99_jct_s": "p99 JCT (h)",
          "makespan_s": "makespan (h)", "utilization": "utilization", "tax_share": "variability tax"}


#: the ratios printed when both arms ran: each pal arm against plain Slurm, and the history's effect
PAIRS = (("pal", "slurm"), ("pal+history", "slurm"), ("pal+history", "pal"))


def print_aggregate(trace: str, results: dict, reps: int) -> dict:
    """Each arm's mean [min-max] over its complete repetitions, the prediction beside it, and
    pal / slurm (pal+history / slurm, pal+history / pal); failed repetitions named and left out.
    Returns the same as a dict (replay.json; `ratios` is pal / slurm, `ratios_by_pair` every pair)."""
    from pal_eval.replay.repeat import aggregate, ratio_range

    aggs = {arm: aggregate(arm, rs) for arm, rs in results.items()}
    print(f"\n== {trace}: mean [min-max] over the complete repetitions (of {reps})")
    for arm, agg in aggs.items():
        print(f"   arm {arm}: repetitions {list(agg.reps) or 'none'}"
              + (f"; FAILED, left out: {list(agg.failed)}" if agg.failed else ""))
    pairs = [(a, b) for a, b in PAIRS if {a, b} <= aggs.keys()]
    doc: dict = {"trace": trace, "arms": {a: g.as_dict() for a, g in aggs.items()}, "ratios": {},
                 "ratios_by_pair": {f"{a}/{b}": {} for a, b in pairs},
                 "results": {a: [r.get("rep") for r in rs] for a, rs in results.items()}}
    width = {a: max(26, len(a) + 15) for a in aggs}  # "pal+history real [range]" keeps a space before it
    pred_w = {a: max(11, len(a) + 6) for a in aggs}
    print(f"   {'metric':<16}" + "".join(f"{a + ' real [range]':>{width[a]}}{a + ' pred':>{pred_w[a]}}{'diff':>7}"
                                      for a in aggs)
          + "".join(f"   {a}/{b} real [range]   pred" for a, b in pairs))
    for m, label in LABELS.items():
        scale = 1.0 if m in ("utilization", "tax_share") else 1 / 3600.0
        line = f"   {label:<16}"
        for a, agg in aggs.items():
            mean, lo, hi = agg.real[m]
            pmean = agg.predicted[m][0]
            diff = (pmean - mean) / mean if mean and mean == mean else float("nan")
            cell = f"{mean * scale:.2f} [{lo * scale:.2f}-{hi * scale:.2f}]"
            line += f"{cell:>{width[a]}}{pmean * scale:>{pred_w[a]}.2f}{diff * 100:>6.1f}%"
        for a, b in pairs:
            r, lo, hi, n = ratio_range(results[a], results[b], m)
            pr, _plo, _phi, _n = ratio_range(results[a], results[b], m, kind="predicted")
            line += f"   {r:>9.3f} [{lo:.3f}-{hi:.3f}] {pr:>6.3f}"
            doc["ratios_by_pair"][f"{a}/{b}"][m] = {"real": r, "min": lo, "max": hi, "pairs": n, "predicted": pr}
            if (a, b) == ("pal", "slurm"):
                doc["ratios"][m] = doc["ratios_by_pair"]["pal/slurm"][m]
        print(line)
    for arm, rs in results.items():  # where each run's queue left the predicted one, job by job
        for r in sorted(rs, key=lambda r: r.get("rep", 0)):
            miss = r.get("start_misses")
            if not miss:
                continue
            first = "".join(f"; {m['trace_id']} ({m['class']}, {m['gpus']} GPUs, submitted {m['submitted_h']:.1f} h): "
                            f"{m['real_start_h']:.1f} h real, {m['predicted_start_h']:.1f} h predicted"
                            for m in miss["first"][:2])
            print(f"   arm {arm} repetition {r.get('rep')}: {miss['count']} of {miss['of']} jobs started more than "
                  f"{miss['beyond_h']:g} trace h from their predicted start{first}")
    leads = {arm: [((r.get("latencies_s") or {}).get("start_lead_s"), r.get("run_start_lead_s"))
                   for r in sorted(rs, key=lambda r: r.get("rep", 0))] for arm, rs in results.items()}
    for arm, pairs_ in leads.items():  # the calibrated start lead the prediction used, and the run's own
        if any(c is not None for c, _o in pairs_):
            print(f"   arm {arm}: start lead (real s, calibrated / the run's own) "
                  + ", ".join("-" if c is None else f"{c:.2f} / {'-' if o is None else f'{o:.2f}'}" for c, o in pairs_))
    return doc


if __name__ == "__main__":
    sys.exit(main())
