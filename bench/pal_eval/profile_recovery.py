"""Does profiling + classification recover a simulated fleet's true classes? (bench/profile_recovery.py)

Per seed: `pal profile run --backend sim` then `pal classify`, as a user runs them, into a fresh
SQLite database; per benchmark the tiers and bins given against the simulated fleet's truth."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from pal_eval.paths import REPO
from pal_eval.targets import Targets


@dataclass
class Tally:
    """What the seeds found: per benchmark [GPUs, exact tier, tier within, GPUs, bin within, exact
    bin], and the GPUs further than allowed from their true bin and tier."""

    totals: dict[str, list[int]] = field(default_factory=dict)
    far_bins: list[str] = field(default_factory=list)
    far_tiers: list[str] = field(default_factory=list)


def pal(args: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pal_slurm", *args], env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"pal {' '.join(args[:2])} failed: {proc.stderr.strip()}")
    return time.perf_counter() - t0


def run(args: argparse.Namespace) -> int:
    """args: bench/profile_recovery.py's options."""
    away = args.max_bins_away
    tally = Tally()
    for seed in (int(s) for s in args.seeds.split(",")):
        recover_seed(args, seed, tally)
    print("\ntotal over seeds:")
    for name, (n, exact, near_tier, nb, near_bin, in_bin) in tally.totals.items():
        print(f"  {name:15s} tier exact {exact}/{n} = {exact / n:.1%}   within {away} tier {near_tier}/{n}   "
              f"in the true bin {in_bin}/{nb} = {in_bin / nb:.1%}   within {away} bin of it {near_bin}/{nb} = "
              f"{near_bin / nb:.1%}")
    targets = Targets()
    n_bins = sum(t[3] for t in tally.totals.values())
    n_tiers = sum(t[0] for t in tally.totals.values())
    targets.check(f"GPUs more than {away} bin(s) from their true bin (of {n_bins}, every benchmark and seed)",
                  len(tally.far_bins), "<=", 0, digits=0)
    targets.check(f"GPUs more than {away} tier(s) from their true tier (of {n_tiers})", len(tally.far_tiers), "<=", 0,
                  digits=0)
    return targets.exit_status()


def recover_seed(args: argparse.Namespace, seed: int, tally: Tally) -> None:
    """One seed's fleet profiled and classified by the CLI, then every benchmark checked."""
    from pal_slurm.db.engine import make_engine
    from pal_slurm.gpu.simulated_fleet import make_fleet
    from pal_slurm.profiler.benchmarks import select_benchmarks

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
            check_benchmark(engine, fleet, bench, seed, args.max_bins_away, tally)
        engine.dispose()


def check_benchmark(engine: Any, fleet: Any, bench: Any, seed: int, away: int, tally: Tally) -> None:
    """One benchmark's tiers (confusion matrix) and bins against the truth, into the tally."""
    from pal_slurm.demo.recovery import bin_recovery, load_assignments, load_bins, recovery

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
            tally.far_bins.append(f"seed {seed} {bench.name} {uuid}: true PerfVar {pv:.3f}, true bin {true_bin}, "
                                  f"given bin {got}")
            print(f"    MORE THAN {away} BIN(S) AWAY: {tally.far_bins[-1]}")
    for u in truth:
        if u in assigned and abs(assigned[u].tier - truth[u]) > away:
            tally.far_tiers.append(f"seed {seed} {bench.name} {u}: true tier {truth[u]}, given bin "
                                   f"{assigned[u].bin}{'*' if assigned[u].outlier else ''} "
                                   f"(tier {assigned[u].tier})")
            print(f"    MORE THAN {away} TIER(S) AWAY: {tally.far_tiers[-1]}")
    t = tally.totals.setdefault(bench.name, [0, 0, 0, 0, 0, 0])
    t[0] += rec.gpus
    t[1] += rec.exact
    t[2] += near_tier
    t[3] += byb.gpus
    t[4] += near_bin
    t[5] += byb.within(0)
