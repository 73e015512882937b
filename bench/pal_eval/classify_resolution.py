"""Which way of turning measurements into slowdown factors serves placement best?
(bench/classify_resolution.py): the three classification methods on two fleets, each
classified from a fresh database and simulated with the jobs slowed by the GPUs' true PerfVar;
and the resolution check, the target."""

from __future__ import annotations

import argparse
import csv
import tempfile
import time
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np

from pal_eval.paths import longhorn
from pal_eval.targets import Targets

METHODS = ("bic", "pal-k2", "shrink")
POLICIES = ("pal", "pal-backfill")
BASELINE = "slurm-backfill"
CLASS_BENCH = {"A": "resnet50", "B": "bert", "C": "bert", "D": "pagerank"}
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
MIN_FACTORS = 3


def spearman(a: list[float], b: list[float]) -> float:
    """Rank correlation with average ranks for ties (a bin's GPUs share one factor)."""
    def ranks(x: list[float]) -> np.ndarray:
        arr = np.asarray(x, dtype=float)
        order = np.argsort(arr, kind="stable")
        r = np.empty(len(arr))
        i = 0
        while i < len(arr):
            j = i
            while j + 1 < len(arr) and arr[order[j + 1]] == arr[order[i]]:
                j += 1
            r[order[i:j + 1]] = (i + j) / 2.0
            i = j + 1
        return r
    ra, rb = ranks(a), ranks(b)
    if ra.std() == 0 or rb.std() == 0:
        return 0.0
    return float(np.corrcoef(ra, rb)[0, 1])


# ----------------------------------------------------------------------------- fleets


def synthetic_fleet(seed: int = 7, nodes: int = 32, gpn: int = 4, runs: int = 5, noise: float = 0.01):
    """(records, truth uuid -> class -> PerfVar) of an evenly spread fleet."""
    from pal_slurm.ingest.records import GpuInfo, ProfileRecord

    rng = np.random.default_rng(seed)
    n = nodes * gpn
    latent = rng.permutation(np.linspace(-1.0, 1.0, n))
    spread = {"resnet50": 0.135, "bert": 0.08, "pagerank": 0.03}
    recs, truth = [], {}
    for g in range(n):
        uuid = f"GPU-syn-{g:03d}"
        info = GpuInfo(uuid=uuid, node=f"syn{g // gpn:02d}", model="SYN", minor_number=g % gpn, nvml_index=g % gpn)
        tv = {b: 1.0 + s * latent[g] for b, s in spread.items()}
        truth[uuid] = {c: tv[b] for c, b in CLASS_BENCH.items()}
        for b, v in tv.items():
            for k in range(runs):
                score = 100.0 * v * float(np.exp(rng.normal(0.0, noise)))
                recs.append(ProfileRecord(run_key=f"syn-{b}-{uuid}-{k}", gpu=info, benchmark=b,
                                          started_at=T0 + timedelta(minutes=k), score=score, unit="ms",
                                          lower_is_better=True, source="bench", source_file="synthetic", line=0))
    return recs, truth


def longhorn_files(src: Path, tmp: Path) -> dict[str, Path]:
    """benchmark -> CSV; pagerank rewritten so a GPU is named cabinet-node-device as in the others."""
    out = {"resnet50": src / "resnet-longhorn-agg.csv", "bert": src / "bert-longhorn-agg.csv"}
    with open(src / "pagerank-longhorn-agg.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    fields = list(rows[0])
    for r in rows:
        r["uuid"] = f"{r['cabinet']}-{int(r['node'])}-{int(r['device'])}"
        r["node"] = str(int(r["node"]))
    path = tmp / "pagerank-longhorn-agg.csv"
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    out["pagerank"] = path
    return out


def split_runs(records):
    """Every other run of each (GPU, benchmark) in time order: (profiling half, held-out half)."""
    by: dict[tuple[str, str], list] = {}
    for r in records:
        by.setdefault((r.gpu.uuid, r.benchmark), []).append(r)
    a, b = [], []
    for runs in by.values():
        runs.sort(key=lambda r: (r.started_at, r.run_key))
        a.extend(runs[0::2])
        b.extend(runs[1::2])
    return a, b


def held_out_truth(records) -> dict[str, dict[str, float]]:
    """uuid -> class -> PerfVar of the held-out runs (median run over the median GPU's)."""
    from pal_slurm.classification.stats import median_sorted

    per: dict[str, dict[str, list[float]]] = {}
    lib: dict[str, bool] = {}
    for r in records:
        per.setdefault(r.benchmark, {}).setdefault(r.gpu.uuid, []).append(r.score)
        lib[r.benchmark] = r.lower_is_better
    truth: dict[str, dict[str, float]] = {}
    for bench, gpus in per.items():
        med = {u: median_sorted(sorted(v)) for u, v in gpus.items()}
        fleet = median_sorted(sorted(med.values()))
        for u, m in med.items():
            pv = m / fleet if lib[bench] else fleet / m
            for c, b in CLASS_BENCH.items():
                if b == bench:
                    truth.setdefault(u, {})[c] = pv
    return truth


# ----------------------------------------------------------------------------- one arm


def classify_into_db(records, method: str, tmp: Path, min_runs: int):
    """A fresh database with `records`, classified with `method`: what the simulator loads."""
    from pal_slurm.services.classification import run_classification
    from pal_slurm.config import load_config
    from pal_slurm.db.engine import open_engine, session_scope
    from pal_slurm.db.migrate import upgrade
    from pal_slurm.db.variability_store import load_variability
    from pal_slurm.services.ingest import import_records_now

    db = tmp / f"{method}.db"
    conf = tmp / "pal.toml"  # the classes read the artifact's benchmark names (CLASS_BENCH)
    conf.write_text('[classification]\nbenchmark_set = "pal-artifact"\n')
    cfg = load_config(conf, db_url=f"sqlite:///{db}", env={"HOME": str(tmp)})
    engine = open_engine(cfg)
    upgrade(engine)
    import_records_now(engine, records)
    summary = run_classification(engine, cfg, min_runs=min_runs, method=method)
    with session_scope(engine) as session:
        stored = load_variability(session, sorted(cfg.job_classes))
    engine.dispose()
    return summary, stored.gpus


def simulate(gpus, truth, trace, policies):
    """Per policy (avg JCT s, GPU-hour stretch) on the cluster the db's GPUs make, slowed by the
    true PerfVars. The stretch is the GPU-hours the jobs ran over what they would on median GPUs
    without locality penalty: the placement's own cost, free of the queueing that dominates JCT."""
    from pal_slurm.placement.variability import cluster_from_gpus
    from pal_slurm.simulate.estimates import parse_runtime_estimate
    from pal_slurm.simulate.runner import FixedVariability, SimulationSpec, run_one

    real = [replace(g, perfvar={c: truth.get(g.uuid, {}).get(c, g.perfvar[c]) for c in g.perfvar}) for g in gpus]
    spec = SimulationSpec(traces=(trace,), policies=tuple(policies), variability=FixedVariability(cluster_from_gpus(real)),
                          mode="event", runtime_estimate=parse_runtime_estimate("uniform:1:5:42"), seed=42,
                          baseline=BASELINE)
    nominal = {j.job_id: j.nominal_runtime_s for j in trace.jobs}
    out = {}
    for p in policies:
        res = run_one(trace, p, spec)
        used = sum(o.gpus * (o.finish_time - o.start_time) for o in res.outcomes)
        out[p] = (res.metrics.avg_jct_s, used / sum(o.gpus * nominal[o.job_id] for o in res.outcomes))
    return out


def resolution_check() -> dict[str, int]:
    """Distinct factors for 12 GPUs measured evenly over 0.871-1.139 (5 runs, 1 % noise)."""
    from pal_slurm.classification.classify import classify_group
    from pal_slurm.classification.model import ClassifyParams

    rng = np.random.default_rng(12)
    runs = {f"g{i:02d}": [v * float(np.exp(rng.normal(0, 0.01))) for _ in range(5)]
            for i, v in enumerate(np.linspace(0.871, 1.139, 12))}
    out = {}
    for m in METHODS:
        r = classify_group(runs, lower_is_better=True, params=ClassifyParams(method=m))
        out[m] = (len({round(g.slowdown, 3) for g in r.gpus}), r.k_regular)
    return out


def load_interarrival(gpus: int, load: float, seed: int) -> float:
    """Mean inter-arrival time that offers `load` x the cluster's GPU-seconds (Philly-like jobs)."""
    from pal_slurm.simulate.synthetic import generate

    probe = generate(2000, seed=seed, mean_interarrival_s=1.0, max_gpus=gpus)
    gpu_s = float(np.mean([j.num_gpus * j.work * j.iter_time_s for j in probe.jobs]))
    return gpu_s / (gpus * load)


def run(args: argparse.Namespace) -> int:
    """args: bench/classify_resolution.py's options."""
    seeds = [int(x) for x in args.seeds.split(",")]
    res = resolution_check()
    print("12 GPUs evenly over 0.871-1.139, 5 runs at 1 % noise: distinct factors (K) -- "
          + ", ".join(f"{m} {d} (K={k})" for m, (d, k) in res.items()))
    print(f"event mode, --runtime-estimate uniform:1:5:42, {args.jobs} synthetic jobs per trace at load {args.load}, "
          f"trace seeds {args.seeds}; geomeans over the traces of avg JCT / {BASELINE}'s (< 1: better) "
          f"and of the GPU-hour stretch (GPU-hours run / GPU-hours on median GPUs on one node; lower is better)")
    print()
    header = (f"{'fleet':<10} {'method':<7} {'GPUs':>5} {'A bins':>6} {'A factors':>9} {'A rank corr':>11} "
              + " ".join(f"{p + ' JCT':>16} {p + ' stretch':>20}" for p in POLICIES))
    print(header)
    print("-" * len(header))
    for fleet in (f for f in args.fleets.split(",") if f):
        with tempfile.TemporaryDirectory(prefix="pal-resolution-") as tmpname:
            measured = fleet_records(fleet, args.artifact_dir, Path(tmpname))
            if measured is not None:
                compare_methods(fleet, *measured, Path(tmpname), args, seeds)
    from pal_slurm.classification.model import ClassifyParams

    default = ClassifyParams().method
    targets = Targets()
    targets.check(f"resolution check, distinct factors of the default method ({default}) for 12 GPUs evenly "
                  f"over 0.871-1.139", res[default][0], ">=", args.min_factors, digits=0)
    return targets.exit_status()


def fleet_records(fleet: str, artifact_dir: Path, tmp: Path) -> tuple[list[Any], dict[str, dict[str, float]], int] | None:
    """The fleet's measurements, its truth (uuid -> class -> PerfVar) and the runs a GPU needs
    to be classified; None (said) when the artifact's data is missing."""
    from pal_slurm.ingest.artifact_csv import parse_file as parse_artifact_file

    if fleet == "synthetic":
        records, truth = synthetic_fleet()
        return records, truth, 3
    if fleet == "longhorn":
        src = longhorn(artifact_dir)
        if not src.is_dir():
            print(f"{fleet}: no data at {src} (set PAL_ARTIFACT_DIR)")
            return None
        records = []
        for bench, path in longhorn_files(src, tmp).items():
            records.extend(parse_artifact_file(path, benchmark=bench, model="V100", unit="ms"))
        records, held = split_runs(records)
        return records, held_out_truth(held), 2
    raise SystemExit(f"unknown fleet {fleet!r}")


def compare_methods(fleet: str, records: list[Any], truth: dict[str, dict[str, float]], min_runs: int, tmp: Path,
                    args: argparse.Namespace, seeds: list[int]) -> None:
    """One row per method and the oracle (ranking by the truth itself: the most any factors could
    give, on the last method's fleet), then how often shrink wins and the baseline's JCTs."""
    from pal_slurm.simulate.synthetic import generate

    traces: list = []
    base: list[float] = []
    per_trace: dict[str, list[float]] = {}
    gpus: list = []  # type: ignore[type-arg]
    for method in [*METHODS, "oracle"]:
        t0 = time.perf_counter()
        if method == "oracle":  # rank by the truth itself: the most any factors could give
            measured = gpus  # the last method's fleet (oracle is the last arm)
            gpus = [replace(g, slowdown={c: truth.get(g.uuid, {}).get(c, g.perfvar[c]) for c in g.slowdown})
                    for g in measured]
            bins = "-"
        else:
            summary, gpus = classify_into_db(records, method, tmp, min_runs)
            grp = next(g for g in summary.groups if g["benchmark"] == "resnet50")
            bins = str(grp["bins"])  # the regular bins (pal classify counts outliers apart)
        if not traces:
            inter = load_interarrival(len(gpus), args.load, seeds[0])
            traces = [generate(args.jobs, seed=s, mean_interarrival_s=inter, max_gpus=len(gpus),
                               name=f"synthetic-{s}") for s in seeds]
            base = [simulate(gpus, truth, t, [BASELINE])[BASELINE][0] for t in traces]
        per_trace[method] = arm_row(fleet, method, gpus, truth, traces, base, bins, t0)
    wins = ", ".join(f"than {m} on {sum(a < b for a, b in zip(per_trace['shrink'], per_trace[m]))}"
                     for m in METHODS if m != "shrink")
    print(f"{fleet:<10} pal-backfill with shrink has the lower avg JCT {wins} of {len(traces)} traces")
    print(f"{fleet:<10} {BASELINE} avg JCT " + ", ".join(f"{b / 3600:.2f} h" for b in base)
          + " on the traces (the same truth for every arm)")


def arm_row(fleet: str, method: str, gpus: list[Any], truth: dict[str, dict[str, float]], traces: list[Any],
            base: list[float], bins: str, t0: float) -> list[float]:
    """One arm on every trace, printed as its row; pal-backfill's avg JCT / the baseline's per trace."""
    ratios: dict[str, list[float]] = {p: [] for p in POLICIES}
    stretch: dict[str, list[float]] = {p: [] for p in POLICIES}
    for t, b in zip(traces, base):
        for p, (v, st) in simulate(gpus, truth, t, POLICIES).items():
            ratios[p].append(v / b)
            stretch[p].append(st)
    fa = [g.slowdown["A"] for g in gpus if g.uuid in truth and "A" in truth[g.uuid]]
    ta = [truth[g.uuid]["A"] for g in gpus if g.uuid in truth and "A" in truth[g.uuid]]
    print(f"{fleet:<10} {method:<7} {len(gpus):>5} {bins:>6} "
          f"{len({round(f, 4) for f in fa}):>9} {spearman(fa, ta):>11.3f} "
          + " ".join(f"{float(np.exp(np.mean(np.log(ratios[p])))):>16.4f} "
                     f"{float(np.exp(np.mean(np.log(stretch[p])))):>20.4f}" for p in POLICIES)
          + f"   ({time.perf_counter() - t0:.0f} s)", flush=True)
    return ratios["pal-backfill"]
