"""The demo behind `make demo`: a site's path on a simulated fleet and a fresh SQLite file,
so a newcomer sees it work with no GPU, no Slurm and no data of their own.

It walks the path a site walks, through the production code: the shipped node profiler
(`pal profile run --backend sim`: every benchmark it ships, on a seeded simulated fleet,
written as pal-profile/1 lines and stored), `pal classify` with the default job classes,
then a simulated week in observe mode through the placer's own decision step and ledger
(pal_slurm/demo/observe_week.py), so that `pal placements`, `pal report savings` and
`pal report fairness` show what an admin sees before enforcing.
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
    week: Any  # pal_slurm.demo.observe_week.WeekResult


def _recovery(fleet: Any, engine: Any, version: int, job_classes: dict[str, str]) -> dict[str, dict[str, int]]:
    """How well the bins found match the fleet's true tiers, per job-class benchmark: the
    measure `demo/recovery.py` defines (and the profiler test and bench use). A profiler
    benchmark's true tiers are those of the simulated benchmark that plays it."""
    from pal_slurm.demo.recovery import load_assignments, recovery
    from pal_slurm.profiler.benchmarks import BENCHMARKS

    out: dict[str, dict[str, int]] = {}
    for bench in sorted(set(job_classes.values())):
        sim = BENCHMARKS[bench].sim_benchmark if bench in BENCHMARKS else bench
        rec = recovery(bench, fleet.true_bins(sim), load_assignments(engine, bench, version))
        if rec.gpus:
            out[bench] = {"gpus": rec.gpus, "exact": rec.exact, "within_one": rec.within_one}
    return out


def run_demo(opts: DemoOptions, *, app_config_path: str | None = None, say: Say = print) -> DemoResult:
    """Profile (the shipped profiler, sim backend), classify, report, observe a week; returns
    what it made (paths and figures)."""
    from pal_slurm.services.classification import run_classification
    from pal_slurm.db.engine import open_engine
    from pal_slurm.demo.observe_week import observe_week

    out = opts.out_dir
    db_url = _demo_db_url(opts)
    cfg = load_config(app_config_path, db_url=db_url)
    engine = open_engine(cfg)
    try:
        migrate.upgrade(engine)
        say(f"1/6 database ready: {db_url}")
        fleet, profile_file = _profile(engine, opts, say)
        summary = run_classification(engine, cfg, note="pal demo")
        html_file, report = _report(engine, cfg, summary, out, say)
        week = observe_week(engine, cfg, seed=opts.seed)
        say(f"6/6 a simulated week in observe mode ({week.first_submit:%Y-%m-%d} to {week.last_end:%Y-%m-%d}): "
            f"{week.jobs} GPU jobs run where Slurm put them, {week.observed} decided by the placer's "
            f"{week.policy} as the daemon would; the jobs paid {week.tax_gpu_h:.0f} GPU-h on slower-than-typical "
            f"GPUs, and the placer's choices would have saved {week.saved_gpu_h:.0f} GPU-h")
        class_benches = {n: jc.benchmark for n, jc in cfg.job_classes.items()}
        recovery = _recovery(fleet, engine, summary.version, class_benches)
    finally:
        engine.dispose()
    return DemoResult(db_url, profile_file, html_file, summary.version, report, recovery,
                      sorted(g.uuid for g in fleet.bad_gpus), week)


def _demo_db_url(opts: DemoOptions) -> str:
    """The demo directory made; the database: --db's, else a fresh SQLite file in the directory."""
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
    return db_url


def _profile(engine: Any, opts: DemoOptions, say: Say) -> tuple[Any, Path]:
    """Steps 2 and 3: `pal profile run --backend sim`, the shipped benchmarks on a seeded simulated
    fleet, written and stored; returns the fleet (its truth is the recovery's reference) and the file."""
    from pal_slurm.gpu.choose import SimOptions
    from pal_slurm.profiler.benchmarks import select_benchmarks
    from pal_slurm.profiler.service import BackendRequest, RunRequest, open_requested_backend, profile_node

    out = opts.out_dir
    # Runs dated yesterday: the outlier actions treat old runs as stale (re-profile first).
    start = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=1)
    backend = open_requested_backend(BackendRequest(
        backend="sim", force_sim=True, node="demo",
        sim=SimOptions(nodes=opts.nodes, gpus_per_node=opts.gpus_per_node, seed=opts.seed)))
    try:
        profile_file = out / "fleet-profile.jsonl"
        ran = profile_node(backend, RunRequest(benchmarks=tuple(select_benchmarks(None)), passes=opts.runs_per_gpu,
                                               output=profile_file, sim_start=start),
                           data_dir=out, engine_factory=lambda: engine)
        fleet = backend.fleet  # type: ignore[attr-defined]
    finally:
        backend.close()
    if ran.db_error:
        raise PalError(f"profile results not stored: {ran.db_error}")
    benches = sorted({o.benchmark.name for o in ran.result.ok})
    say(f"2/6 profiled a simulated fleet of {len(fleet.gpus)} {fleet.model.name} GPUs on {opts.nodes} nodes with "
        f"the shipped profiler (`pal profile run --backend sim`: {ran.records} benchmark runs of "
        f"{', '.join(benches)}) -> {profile_file}")
    stored_runs = ran.saved.imported.added if ran.saved is not None else 0
    say(f"3/6 stored {stored_runs} runs")
    return fleet, profile_file


def _report(engine: Any, cfg: Any, summary: Any, out: Path, say: Say) -> tuple[Path, dict[str, Any]]:
    """Steps 4 and 5: what the classification found, as the report shows it, and the HTML report."""
    from pal_slurm.report.data import group_summary
    from pal_slurm.report.page import write_html
    from pal_slurm.report.service import load_for_html

    stored, report = load_for_html(engine, cfg)
    # From the report, not the classifier's counts: the same bins and outliers as the tables and HTML.
    say(f"4/6 classified: version {summary.version}; "
        + "; ".join(group_summary(item) for item in report["benchmarks"]))
    say("    job classes: " + "; ".join(f"{c.job_class} by {c.benchmark} ({c.classified}/{c.gpus} GPUs)"
                                       for c in summary.coverage))
    html_file = out / "report.html"
    write_html(html_file, stored, report)
    say(f"5/6 HTML report with plots -> {html_file}")
    return html_file, report
