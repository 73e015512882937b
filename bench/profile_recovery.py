#!/usr/bin/env python3
"""Does profiling + classification recover a simulated fleet's true classes?

Target: on a simulated fleet of 64 GPUs (16 nodes x 4), `pal profile run --backend sim` then
`pal classify` puts every GPU within one bin of its true class, for every benchmark and seed:
  - bins: a GPU's true bin is the bin of the run its true PerfVar (`SimGpu.true_perfvar`, the
    noise-free value classification estimates) lies nearest to, among the regular bins, or
    among the outlier bins for a true outlier; the bin it was given may be at most one place
    away on the run's ladder of bins (ascending centroid), where each regular bin is one place
    and the outlier bins on either side, one GPU each, are one place together (their order
    among themselves is measurement noise) (pal_slurm.demo.recovery.bin_recovery);
  - tiers: no GPU more than one tier from its true tier (0 regular, 1 slow, 2 outlier;
    `SimGpu.true_tier`): no healthy GPU fenced off as an outlier, no outlier left in a
    regular-speed bin (pal_slurm.demo.recovery.recovery, the demo's measure).
For each seed this runs both commands as a user would (separate processes, a fresh SQLite
database), then prints per benchmark the confusion matrix of tiers (rows: true tier; columns:
assigned bin, fastest first, outlier bins marked *), the GPUs per bin distance, and the GPUs
more than one bin away.

Usage: bench/profile_recovery.py [--seeds 0,1,2] [--nodes 16] [--gpus-per-node 4] [--passes 3]
       [--bad-fraction 0.03] (share of planted defective GPUs; 0.03 is the simulator's default)
       [--max-bins-away 1] (the target; 0 asks every GPU in its true bin)
Exit status 1, with a TARGET MISSED line per target, when a GPU is further away than that.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from targets import Targets  # noqa: E402


def pal(args: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pal_slurm", *args], env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"pal {' '.join(args[:2])} failed: {proc.stderr.strip()}")
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--gpus-per-node", type=int, default=4)
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--bad-fraction", type=float, default=0.03, help="share of defective GPUs [0.03]")
    ap.add_argument("--max-bins-away", type=int, default=1,
                    help="the target: bins (and tiers) a GPU may be from its true one [1]")
    args = ap.parse_args()

    from pal_slurm.db.engine import make_engine
    from pal_slurm.demo.recovery import bin_recovery, load_assignments, load_bins, recovery
    from pal_slurm.gpu.simulated_fleet import make_fleet
    from pal_slurm.profiler.benchmarks import select_benchmarks

    away = args.max_bins_away
    totals: dict[str, list[int]] = {}  # benchmark -> GPUs, exact tier, tier within, GPUs, bin within, exact bin
    far_bins: list[str] = []
    far_tiers: list[str] = []
    for seed in (int(s) for s in args.seeds.split(",")):
        with tempfile.TemporaryDirectory(prefix="pal-recovery-") as tmp:
            db = f"sqlite:///{tmp}/pal.db"
            env = {**os.environ, "PAL_DB_URL": db, "HOME": tmp, "PYTHONPATH": str(REPO)}
            pal(["db", "upgrade"], env)
            t_run = pal(["profile", "run", "--backend", "sim", "--sim-nodes", str(args.nodes), "--sim-gpus-per-node",
                         str(args.gpus_per_node), "--sim-seed", str(seed), "--passes", str(args.passes),
                         "--sim-bad-fraction", str(args.bad_fraction),
                         "--output", f"{tmp}/profile.jsonl"], env)
            t_cls = pal(["classify"], env)
            fleet = make_fleet(nodes=args.nodes, gpus_per_node=args.gpus_per_node, seed=seed,
                               bad_fraction=args.bad_fraction)
            engine = make_engine(db)
            bad = ", ".join(f"{g.node}/{g.slot}:{g.defect}" for g in fleet.bad_gpus) or "none"
            print(f"\nseed {seed}: {len(fleet.gpus)} GPUs, planted defects: {bad}; "
                  f"profile run {t_run:.1f} s, classify {t_cls:.1f} s")
            for bench in select_benchmarks(None):
                truth = fleet.true_bins(bench.sim_benchmark)
                assigned = load_assignments(engine, bench.name)
                rec = recovery(bench.name, truth, assigned)
                bins, given = load_bins(engine, bench.name)
                byb = bin_recovery(bench.name, fleet.true_perfvars(bench.sim_benchmark),
                                   {u for u, t in truth.items() if t == 2}, bins, given)
                near_tier = sum(1 for u in truth if u in assigned and abs(assigned[u].tier - truth[u]) <= away)
                near_bin = byb.within(away)
                print(f"  {bench.name} (simulated as {bench.sim_benchmark}): {rec.gpus} GPUs, "
                      f"tier exact {rec.exact}/{rec.gpus} = {rec.exact_fraction:.1%}, "
                      f"within {away} tier {near_tier}/{rec.gpus}; "
                      f"within {away} bin of the true bin {near_bin}/{byb.gpus}")
                print("    true\\bin " + " ".join(f"{c:>5}" for c in rec.columns))
                for tier, row in rec.matrix.items():
                    print(f"    tier {tier}   " + " ".join(f"{row[c]:>5}" for c in rec.columns))
                print("    bins from the true bin: " + ", ".join(f"{d}: {n} GPUs" for d, n in byb.distances.items()))
                for uuid, pv, true_bin, got, d in byb.per_gpu:
                    if d > away:
                        far_bins.append(f"seed {seed} {bench.name} {uuid}: true PerfVar {pv:.3f}, true bin {true_bin}, "
                                        f"given bin {got}")
                        print(f"    MORE THAN {away} BIN(S) AWAY: {far_bins[-1]}")
                for u in truth:
                    if u in assigned and abs(assigned[u].tier - truth[u]) > away:
                        far_tiers.append(f"seed {seed} {bench.name} {u}: true tier {truth[u]}, given bin "
                                         f"{assigned[u].bin}{'*' if assigned[u].outlier else ''} "
                                         f"(tier {assigned[u].tier})")
                        print(f"    MORE THAN {away} TIER(S) AWAY: {far_tiers[-1]}")
                t = totals.setdefault(bench.name, [0, 0, 0, 0, 0, 0])
                t[0] += rec.gpus
                t[1] += rec.exact
                t[2] += near_tier
                t[3] += byb.gpus
                t[4] += near_bin
                t[5] += byb.within(0)
            engine.dispose()
    print("\ntotal over seeds:")
    for name, (n, exact, near_tier, nb, near_bin, in_bin) in totals.items():
        print(f"  {name:15s} tier exact {exact}/{n} = {exact / n:.1%}   within {away} tier {near_tier}/{n}   "
              f"in the true bin {in_bin}/{nb} = {in_bin / nb:.1%}   within {away} bin of it {near_bin}/{nb} = "
              f"{near_bin / nb:.1%}")
    targets = Targets()
    n_bins = sum(t[3] for t in totals.values())
    n_tiers = sum(t[0] for t in totals.values())
    targets.check(f"GPUs more than {away} bin(s) from their true bin (of {n_bins}, every benchmark and seed)",
                  len(far_bins), "<=", 0, digits=0)
    targets.check(f"GPUs more than {away} tier(s) from their true tier (of {n_tiers})", len(far_tiers), "<=", 0,
                  digits=0)
    return targets.exit_status()


if __name__ == "__main__":
    sys.exit(main())
