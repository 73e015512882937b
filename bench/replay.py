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
import sys
from pathlib import Path

from pal_eval.paths import artifact_dir, longhorn
from pal_eval.replay.sitting import run

CLUSTER_DIR = "/var/tmp/pal-replay-slurm"
CTLD_PORT = 16917
NODE_PORT = 17201


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    artifact = artifact_dir()
    ap.add_argument("--trace", action="append", type=Path,
                    help="Sia-Philly CSV or sacct export (repeatable); default workload-1 and workload-4")
    ap.add_argument("--llm", action="append", type=int, default=[], metavar="SEED",
                    help="instead of --trace: the LLM-era mix (pal simulate --workload llm) drawn for --nodes x "
                         "--gpus-per-node with this seed (repeatable)")
    ap.add_argument("--llm-jobs", type=int, default=300, help="jobs of each --llm trace (default 300)")
    ap.add_argument("--variability", type=Path, default=longhorn(artifact))
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
    ap.add_argument("--bf-resolution", type=int, default=None, metavar="SECONDS",
                    help="the replay cluster's sched/backfill bf_resolution, real seconds (default: Slurm's 60 s "
                         "compressed like every other time, 60 x k / 3600, at least 1; 60: Slurm's own, two "
                         "trace hours at k = 30, while the simulator plans to the second)")
    ap.add_argument("--keep-cluster", action="store_true", help="leave the replay cluster running at the end")
    ap.add_argument("--cluster-dir", default=CLUSTER_DIR, help="the replay cluster's state directory")
    ap.add_argument("--ctld-port", type=int, default=CTLD_PORT, help="its slurmctld port (slurmrestd: +2000)")
    ap.add_argument("--node-port", type=int, default=NODE_PORT, help="its first slurmd port (one per node)")
    return run(ap.parse_args(), artifact)


if __name__ == "__main__":
    sys.exit(main())
