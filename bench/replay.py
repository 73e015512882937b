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

Each arm is one run, on the same trace, cluster, factors and compression. Prints per arm
real and predicted average / median / p99 JCT, makespan and utilization (trace hours),
the difference, and pal / slurm ratios; writes replay.json and one PNG per trace into --out.

Usage: bench/replay.py [--trace workload-1.csv ...] [--nodes 16] [--gpus-per-node 4]
                       [--seconds-per-hour 10] [--lambda 1.7] [--estimate uniform:1:5:42]
                       [--seed 42] [--jobs N] [--arms slurm,pal] [--placer-interval 0.5]
                       [--out DIR] [--keep-cluster] [--cluster-dir D --ctld-port P --node-port P]
Run as root (it starts Slurm daemons and creates device files). Ctrl-C cancels the
arm's jobs and leaves the cluster clean; the cluster is stopped at the end.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

CLUSTER_DIR = "/var/tmp/pal-replay-slurm"
CTLD_PORT = 16917
NODE_PORT = 17201
PREFIX = "pal-r"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    artifact = Path(os.environ.get("PAL_ARTIFACT_DIR", REPO.parent / "shared/data/pal-artifact"))
    ap.add_argument("--trace", action="append", type=Path,
                    help="Sia-Philly CSV or sacct export (repeatable); default workload-1 and workload-4")
    ap.add_argument("--variability", type=Path, default=artifact / "variability" / "longhorn")
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--gpus-per-node", type=int, default=4)
    ap.add_argument("--seconds-per-hour", type=float, default=10.0, help="real seconds per trace hour (k)")
    ap.add_argument("--lambda", dest="penalty", type=float, default=1.7, help="locality penalty")
    ap.add_argument("--estimate", default="uniform:1:5:42", help="runtime-estimate model the --time limits come from")
    ap.add_argument("--seed", type=int, default=42, help="variability draw")
    ap.add_argument("--jobs", type=int, default=None, help="replay only the first N jobs of each trace")
    ap.add_argument("--arms", default="slurm,pal")
    ap.add_argument("--policy", default="pal-guard", help="the placer's policy in the pal arm")
    ap.add_argument("--placer-interval", type=float, default=0.5,
                    help="placer cycle, real seconds (0.5: its latency is then ~5 trace minutes at k = 10)")
    ap.add_argument("--no-calibrate", action="store_true",
                    help="predict with an ideal scheduler (no latencies measured before each arm)")
    ap.add_argument("--out", type=Path, default=Path("replay-out"))
    ap.add_argument("--keep-cluster", action="store_true", help="leave the replay cluster running at the end")
    ap.add_argument("--cluster-dir", default=CLUSTER_DIR, help="the replay cluster's state directory")
    ap.add_argument("--ctld-port", type=int, default=CTLD_PORT, help="its slurmctld port (slurmrestd: +2000)")
    ap.add_argument("--node-port", type=int, default=NODE_PORT, help="its first slurmd port (one per node)")
    args = ap.parse_args()

    from pal_slurm.demo.on_slurm import find_cluster_script
    from pal_slurm.errors import PalError
    from pal_slurm.replay.experiment import ArmSettings, ClusterHandle, configure_database, run_arms
    from pal_slurm.replay.fleet import inventory, name_fleet, node_name
    from pal_slurm.replay.harness import ReplayInterrupted
    from pal_slurm.replay.plan import first_jobs, plan_replay
    from pal_slurm.replay.plot import write_replay_plot
    from pal_slurm.simulate.artifact_draw import draw_artifact, load_artifact_profiles
    from pal_slurm.simulate.estimates import parse_runtime_estimate
    from pal_slurm.simulate.traces import read_trace_file

    if os.geteuid() != 0:
        print("bench/replay.py: run as root (it starts Slurm daemons and creates GPU device files)", file=sys.stderr)
        return 2
    traces = args.trace or [artifact / "traces" / "sia-philly" / f"workload-{w}.csv" for w in (1, 4)]
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    try:
        estimate = parse_runtime_estimate(args.estimate)
        plans = []
        for path in traces:
            trace = read_trace_file(path)
            if args.jobs:
                trace = first_jobs(trace, args.jobs)
            plans.append(plan_replay(trace, seconds_per_hour=args.seconds_per_hour, estimate=estimate,
                                     nodes=args.nodes, gpus_per_node=args.gpus_per_node))
    except (PalError, ValueError, OSError) as exc:
        print(f"bench/replay.py: error: {exc}", file=sys.stderr)
        return 2

    script = find_cluster_script()
    inv = out / "inventory.json"
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
    handle = ClusterHandle(env=slurm_env, state_file=Path(args.cluster_dir) / "pal" / "filter-state.lua",
                           kill_switch=Path(args.cluster_dir) / "pal" / "filter-disabled")

    profiles = load_artifact_profiles(args.variability)
    drawn = draw_artifact(profiles, args.nodes * args.gpus_per_node, random.Random(args.seed))
    names = [node_name(PREFIX, i, args.nodes) for i in range(args.nodes)]
    db = out / "pal.db"
    db.unlink(missing_ok=True)
    db_url = f"sqlite:///{db}"
    cluster, factors, cversion = configure_database(
        db_url, name_fleet(drawn, names, args.gpus_per_node),
        note=f"replay: {args.variability.name} profiles drawn as the PAL artifact does, seed {args.seed}")
    settings = ArmSettings(locality_penalty=args.penalty, placer_policy=args.policy,
                           placer_interval_s=args.placer_interval)
    summary = {"slurm": version, "nodes": args.nodes, "gpus_per_node": args.gpus_per_node,
               "seconds_per_hour": args.seconds_per_hour, "lambda": args.penalty, "estimate": estimate.describe(),
               "seed": args.seed, "classification_version": cversion, "traces": []}
    rc = 0
    try:
        for plan in plans:
            print(f"\n== {plan.trace.name}: {len(plan.jobs)} jobs, k = {args.seconds_per_hour:g} s per trace hour, "
                  f"lambda {args.penalty:g}, limits from {plan.estimate} (whole minutes)", flush=True)
            reports = run_arms(plan, cluster, handle, db_url=db_url, work_dir=out / plan.trace.name,
                               factors=factors, settings=settings, arms=arms, calibrate=not args.no_calibrate,
                               say=lambda s: print("   " + s, flush=True))
            print_reports(plan.trace.name, reports)
            summary["traces"].append({"trace": plan.trace.name, "jobs": len(plan.jobs),
                                      "arms": [r.as_dict() for r in reports]})
            png = out / f"replay-{plan.trace.name}.png"
            write_replay_plot(png, plan.trace.name, reports,
                              subtitle=f"{version}, {args.nodes}x{args.gpus_per_node} GPUs, k={args.seconds_per_hour:g} "
                                       f"s/h, lambda {args.penalty:g}, limits {plan.estimate}")
            print(f"   plot: {png}")
            if any(not (r.run and r.run.complete) for r in reports):
                rc = 1
    except ReplayInterrupted as exc:
        print(f"bench/replay.py: {exc}", file=sys.stderr)
        rc = 130
    except PalError as exc:  # a cluster that is busy or too small, a Slurm failure mid-arm: one line
        print(f"bench/replay.py: error: {exc}", file=sys.stderr)
        rc = 1
    finally:
        (out / "replay.json").write_text(json.dumps(summary, indent=1, default=_json_default))
        if not args.keep_cluster:
            subprocess.run([str(script), "stop"], env=env, capture_output=True, check=False)
    print(f"\nresults: {out / 'replay.json'}")
    return rc


def _json_default(o: object) -> object:
    if isinstance(o, float) and not math.isfinite(o):
        return None
    return str(o)


def print_reports(trace: str, reports: list) -> None:
    labels = {"avg_jct_s": "avg JCT (h)", "median_jct_s": "median JCT (h)", "p99_jct_s": "p99 JCT (h)",
              "makespan_s": "makespan (h)", "utilization": "utilization", "tax_share": "variability tax"}
    print(f"   {'metric':<16}" + "".join(f"{r.arm + ' real':>12}{r.arm + ' pred':>12}{'diff':>8}" for r in reports)
          + ("   pal/slurm real  pred" if len(reports) == 2 else ""))
    rows = {r.arm: {c["metric"]: c for c in r.comparison()} for r in reports}
    for m, label in labels.items():
        scale = 1.0 if m in ("utilization", "tax_share") else 1 / 3600.0
        line = f"   {label:<16}"
        for r in reports:
            c = rows[r.arm][m]
            line += f"{c['real'] * scale:>12.2f}{c['predicted'] * scale:>12.2f}{c['diff'] * 100:>7.1f}%"
        if len(reports) == 2 and "slurm" in rows and "pal" in rows:
            s, p = rows["slurm"][m], rows["pal"][m]
            line += f"   {p['real'] / s['real']:>13.3f} {p['predicted'] / s['predicted']:>5.3f}"
        print(line)
    for r in reports:
        state = "complete" if r.run and r.run.complete else "INCOMPLETE"
        print(f"   arm {r.arm}: {state}, {r.run.wall_s if r.run else 0:.0f} s wall" +
              "".join(f"\n     ! {n}" for n in r.notes[:10]))


if __name__ == "__main__":
    sys.exit(main())
