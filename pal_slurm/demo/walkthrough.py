"""The demo behind `make demo`: the whole measurement -> classes -> report flow on a
simulated fleet and a fresh SQLite file, so a newcomer sees it work with no GPU, no
Slurm and no data of their own.

It goes through the same code paths as production: the fleet's runs are written in
the node profiler's JSON-lines format, imported with the importer, classified and
reported by the same services the CLI uses.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pal_slurm.config import load_config
from pal_slurm.db import migrate
from pal_slurm.errors import PalError

Say = Callable[[str], None]


@dataclass(frozen=True)
class DemoOptions:
    out_dir: Path
    nodes: int = 16
    gpus_per_node: int = 4
    runs_per_gpu: int = 5
    seed: int = 0
    db_url: str | None = None  # None: a fresh SQLite file in out_dir


@dataclass(frozen=True)
class DemoResult:
    db_url: str
    profile_file: Path
    html_file: Path
    version: int
    report: dict[str, Any]
    recovery: dict[str, dict[str, int]]  # benchmark -> {"gpus", "exact", "within_one"}
    planted_bad: list[str]


def _recovery(fleet: Any, engine: Any, version: int, job_classes: dict[str, str]) -> dict[str, dict[str, int]]:
    """How well the bins found match the fleet's true tiers, per job-class benchmark: the
    measure `demo/recovery.py` defines (and the profiler test and bench use)."""
    from pal_slurm.demo.recovery import load_assignments, recovery

    out: dict[str, dict[str, int]] = {}
    for bench in sorted(set(job_classes.values())):
        rec = recovery(bench, fleet.true_bins(bench), load_assignments(engine, bench, version))
        if rec.gpus:
            out[bench] = {"gpus": rec.gpus, "exact": rec.exact, "within_one": rec.within_one}
    return out


def run_demo(opts: DemoOptions, *, app_config_path: str | None = None, say: Say = print) -> DemoResult:
    """Simulate, profile, import, classify, report; returns what it made (paths and figures)."""
    from pal_slurm.classification.service import run_classification
    from pal_slurm.db.engine import open_engine
    from pal_slurm.gpu.simulated_fleet import make_fleet
    from pal_slurm.ingest.jsonl import dump_jsonl
    from pal_slurm.ingest.service import import_files
    from pal_slurm.report.data import group_summary
    from pal_slurm.report.page import write_html
    from pal_slurm.report.service import load_for_html

    out = opts.out_dir
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PalError(f"cannot create the demo directory {out}: {exc.strerror}") from exc
    db_url = opts.db_url
    if db_url is None:
        db_file = (out / "pal-demo.db").resolve()
        db_file.unlink(missing_ok=True)  # ours: each demo starts from an empty database
        db_url = f"sqlite:///{db_file}"
    cfg = load_config(app_config_path, db_url=db_url)
    engine = open_engine(cfg)
    try:
        migrate.upgrade(engine)
        say(f"1/5 database ready: {db_url}")
        fleet = make_fleet(nodes=opts.nodes, gpus_per_node=opts.gpus_per_node, seed=opts.seed)
        benches = sorted({jc.benchmark for jc in cfg.job_classes.values()} | {"sgemm"})
        # Runs dated yesterday: the outlier actions treat old runs as stale (re-profile first).
        start = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=1)
        records = fleet.profile_records(benchmarks=benches, runs_per_gpu=opts.runs_per_gpu, start=start)
        profile_file = out / "fleet-profile.jsonl"
        profile_file.write_text(dump_jsonl(records), encoding="utf-8")
        say(f"2/5 profiled a simulated fleet of {len(fleet.gpus)} {fleet.model.name} GPUs on {opts.nodes} nodes "
            f"({len(records)} benchmark runs: {', '.join(benches)}) -> {profile_file}")
        done = import_files(engine, [profile_file], "jsonl")
        say(f"3/5 imported {done[0].result.added} runs ({done[0].result.new_gpus} GPUs)")
        summary = run_classification(engine, cfg, note="pal demo")
        stored, report = load_for_html(engine, cfg)
        # From the report, not the classifier's counts: the same bins and outliers as the tables and HTML.
        say(f"4/5 classified: version {summary.version}; "
            + "; ".join(group_summary(item) for item in report["benchmarks"]))
        html_file = out / "report.html"
        write_html(html_file, stored, report)
        say(f"5/5 HTML report with plots -> {html_file}")
        class_benches = {n: jc.benchmark for n, jc in cfg.job_classes.items()}
        recovery = _recovery(fleet, engine, summary.version, class_benches)
    finally:
        engine.dispose()
    return DemoResult(db_url, profile_file, html_file, summary.version, report, recovery,
                      sorted(g.uuid for g in fleet.bad_gpus))
