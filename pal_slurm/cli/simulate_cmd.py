"""`pal simulate`: replay traces under placement policies before turning placement on."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import click

from pal_slurm.classification.actions import ActionPolicy
from pal_slurm.cli.context import AppContext
from pal_slurm.cli.numbers import MAX_JOBS, Real, Whole, ident, seed
from pal_slurm.cli.render import Column, console, emit_json, emit_rows, format_option, prose
from pal_slurm.cli.simulate_inputs import drain_check, load_traces, synthetic_spec, variability_source
from pal_slurm.placement.table import policy_names


def _policy_names(value: str) -> tuple[str, ...]:
    if value == "all":
        return policy_names()
    names = tuple(n.strip() for n in value.split(",") if n.strip())
    unknown = [n for n in names if n not in policy_names()]
    if unknown or not names:
        raise click.BadParameter(f"unknown policy {', '.join(map(repr, unknown)) or repr(value)}; "
                                 f"valid: {', '.join(policy_names())} (or all)")
    return names


def _hours(key: str):  # type: ignore[no-untyped-def]
    """A duration in hours, 2 decimals; a metric without a value (no job finished) is a dash."""
    return lambda r: None if not _finite(r[key]) else round(r[key] / 3600, 2)


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


RUN_COLUMNS = [
    Column("trace", lambda r: r["trace"]), Column("policy", lambda r: r["policy"]),
    Column("jobs", lambda r: r["jobs"], "right"),
    # two-line headers, so that the table fits a pipe's 100 columns; the title says they are hours
    Column("avg\nJCT", _hours("avg_jct_s"), "right"),
    Column("median\nJCT", _hours("median_jct_s"), "right"),
    Column("p99\nJCT", _hours("p99_jct_s"), "right"),
    Column("avg\nwait", _hours("avg_queue_delay_s"), "right"),
    Column("make-\nspan", _hours("makespan_s"), "right"),
    Column("utili-\nzation", lambda r: round(r["utilization"], 3) if _finite(r["utilization"]) else None, "right"),
    Column("tax", lambda r: _percent(r["tax_share"]), "right"),
]
CSV_COLUMNS = [Column(k, lambda r, k=k: r[k]) for k in (
    "trace", "policy", "mode", "order", "jobs", "avg_jct_s", "median_jct_s", "p99_jct_s", "avg_queue_delay_s",
    "makespan_s", "utilization", "skipped", "tax_gpu_s", "variability_gpu_s_signed", "tax_share",
    "tax_best_free_gpu_s", "tax_unavoidable_gpu_s")]


def _percent(share: float | None) -> str | None:
    """A share as "3.1 %" (None, a figure with no baseline to be a share of, stays a dash)."""
    return None if share is None or not _finite(share) else f"{share * 100:.1f} %"


def _ratio(key: str):  # type: ignore[no-untyped-def]
    return lambda r: round(r[key], 3) if _finite(r.get(key)) else None


def _added_wait(r: dict[str, Any]) -> str | None:
    """The added mean wait in hours, with its share of the baseline's wait when there is one."""
    if "added_wait_s" not in r:
        return None
    hours = f"{r['added_wait_s'] / 3600:+.2f} h"
    return hours if r["added_wait_share"] is None else f"{hours} ({r['added_wait_share'] * 100:+.1f} %)"


@click.command()
@click.option("--trace", "traces", multiple=True, type=click.Path(path_type=Path, dir_okay=False, exists=True),
              help="Trace file (Sia-Philly CSV or `sacct -P` export); repeatable.")
@click.option("--trace-format", type=click.Choice(["auto", "philly", "sacct"]), default="auto", show_default=True)
@click.option("--synthetic", "synthetic_jobs", type=Whole(1, MAX_JOBS), metavar="N",
              help="Also simulate a synthetic trace of N jobs (Poisson arrivals; the mix --workload names).")
@click.option("--workload", type=click.Choice(["philly", "llm"]), default=None,
              help="The mix --synthetic draws [default: philly]: philly, the Sia-Philly traces' 1-48 GPU jobs; "
                   "llm, an LLM-era mix for 8-GPU nodes (whole-node pretraining of up to half the cluster with "
                   "most of the GPU time, fine-tuning on 1-8 nodes, short 1-8 GPU evaluation and debugging "
                   "jobs; docs/simulation.md, \"The LLM-era mix\").")
@click.option("--load", "offered_load", type=Real(0.01, 10), default=None, metavar="F",
              help="With --workload llm: the offered load, GPU time asked for / the cluster's GPU time, which "
                   "sets the arrival rate [default: 0.9].")
@click.option("--skip-invalid", is_flag=True, help="Skip malformed trace rows (counted in the output) "
                                                   "instead of stopping at the first one.")
@click.option("--cluster", "cluster_shape", default=None, metavar="NODESxGPUS",
              help="Simulated cluster [default: 16x4]; with --variability db the real GPUs are used.")
@click.option("--variability", required=True, metavar="DIR|db|parametric:SPEC",
              help="The PAL artifact's CSV directory (class A from resnet*, B/C from bert*, D from pagerank*); "
                   "db: the latest classification in the database, on the real GPUs; or a parametric fleet: "
                   "parametric:PRESET (uniform, narrow, wide, wide-2x) or parametric:[PRESET,]KEY=VALUE,... "
                   "with keys spread (class A's max-min spread; B/C get half, D a tenth), outliers (fraction "
                   "of GPUs), outlier-factor, stragglers (count), straggler-factor, seed (default --seed), "
                   "e.g. parametric:spread=0.25,outliers=0.01,outlier-factor=1.5.")
@click.option("--variability-model", type=click.Choice(["per-run", "per-gpu"]), default=None,
              help="With --variability DIR: per-run (default) draws one measured run per simulated GPU, as the "
                   "PAL artifact does; per-gpu makes each simulated GPU one real GPU, valued at its median run.")
@click.option("--drain-baseline", is_flag=True,
              help="Also run the baseline on the cluster left after `pal gpus drain`'s advice (every node with "
                   "a GPU at PerfVar >= [report] drain_perfvar, default "
                   f"{ActionPolicy.drain_perfvar:g}, for class A, B or C drained), reported as <baseline>+drain.")
@click.option("--classification", "version", type=ident(), metavar="N", help="With --variability db: version N.")
@click.option("--policy", "policy_spec", default="all", show_default=True, metavar="NAME[,NAME...]",
              help="Placement policies to compare (all = every registered one).")
@click.option("--order", type=click.Choice(["fifo", "las", "srtf"]), default="fifo", show_default=True,
              help="Queue order.")
@click.option("--mode", type=click.Choice(["round", "event"]), default="round", show_default=True,
              help="round: the PAL artifact's 360 s rounds with free preemption; event: continuous time, "
                   "no preemption, as Slurm runs jobs. See docs/simulation.md.")
@click.option("--round-seconds", type=Real(1, 86_400), default=360.0, show_default=True)
@click.option("--locality-penalty", type=Real(1, 100), default=1.7, show_default=True,
              help="Slowdown of a job spread across nodes (PAL's lambda).")
@click.option("--seed", type=seed(), default=42, show_default=True, help="Seed of the variability draw and random policies.")
@click.option("--baseline", default="slurm-backfill", show_default=True,
              help="Policy the summary ratios are against: slurm-backfill is Slurm as shipped (cons_tres first "
                   "fit, sched/backfill); the PAL artifact compared with packed-sticky.")
@click.option("--runtime-estimate", "runtime_estimate", default="exact", show_default=True,
              metavar="exact|limit|xF|uniform:LO:HI[:SEED]",
              help="What policies are told about runtimes in event mode (jobs still run their true time): "
                   "exact, the trace's time limit, F x the truth, or a per-job factor from U[LO,HI]. "
                   "Headline figures use uniform:1:5 (docs/simulation.md).")
@format_option
@click.option("--plot", "plot_path", type=click.Path(path_type=Path, dir_okay=False), metavar="FILE",
              help="Write JCT CDFs and busy GPUs over time (.png, .svg or .pdf).")
@click.pass_obj
def simulate(app: AppContext, traces: tuple[Path, ...], trace_format: str, synthetic_jobs: int | None,
             workload: str | None, offered_load: float | None, skip_invalid: bool, cluster_shape: str | None,
             variability: str, variability_model: str | None, drain_baseline: bool, version: int | None,
             policy_spec: str, order: str, mode: str,
             round_seconds: float, locality_penalty: float, seed: int, baseline: str, runtime_estimate: str,
             fmt: str, plot_path: Path | None) -> None:
    """Replay job traces under placement policies and compare JCT, makespan and utilization.

    \b
    Example (the PAL paper's setting):
      pal simulate --trace workload-1.csv --variability longhorn/ --cluster 16x4 --mode round
    A fleet like a measured one, and Slurm after draining its slow nodes:
      pal simulate --trace workload-1.csv --variability longhorn/ --variability-model per-gpu \\
                   --mode event --drain-baseline
      pal simulate --trace workload-1.csv --variability parametric:wide --mode event
    An 8-GPU-node cluster with an LLM-era job mix:
      pal simulate --synthetic 2000 --workload llm --cluster 32x8 --variability parametric:wide \\
                   --mode event --runtime-estimate uniform:1:5
    """
    from pal_slurm.simulate.runner import SimulationSpec, run_simulations

    estimate = _runtime_estimate(runtime_estimate, mode)
    policies = _policy_names(policy_spec)
    _policy_names(baseline)
    if not traces and not synthetic_jobs:
        raise click.UsageError("give at least one --trace FILE or --synthetic N")
    source, total_gpus, cluster = variability_source(app, variability, cluster_shape, version, variability_model, seed)
    synthetic = synthetic_spec(synthetic_jobs, workload, offered_load, cluster)
    loaded = load_traces(traces, trace_format, total_gpus, skip_invalid, synthetic, seed)
    drain = drain_check(source, loaded, seed, app.cfg.report.drain_perfvar) if drain_baseline else None
    spec = SimulationSpec(traces=tuple(loaded), policies=policies, variability=source, mode=mode,
                          order=order, locality_penalty=locality_penalty, round_seconds=round_seconds, seed=seed,
                          baseline=baseline, runtime_estimate=estimate)
    report = _run_with_progress(spec, run_simulations)
    if drain is not None:
        report = _with_drain_baseline(report, drain["threshold"], _run_with_progress)
    if plot_path is not None:
        from pal_slurm.simulate.plot import write_plot

        write_plot(plot_path, report.results)
        click.echo(f"plot written to {plot_path}", err=True)
    data = _report_data(report, cluster, drain, baseline, mode, round_seconds)
    rows = [{**r.as_dict()} for r in report.results]
    if fmt == "json":
        emit_json(data)
    elif fmt == "csv":
        click.echo(f"pal: cluster simulated: {cluster['text']}", err=True)
        emit_rows(rows, CSV_COLUMNS, "csv")
    else:
        _print_tables(data, rows, loaded, drain, total_gpus, baseline,
                      f"{mode} mode, {order}, lambda {locality_penalty}; JCT, wait and makespan in hours")


def _runtime_estimate(value: str, mode: str) -> Any:
    """--runtime-estimate parsed, refused in round mode unless exact (the artifact's policies know runtimes)."""
    from pal_slurm.simulate.estimates import parse_runtime_estimate

    try:
        estimate = parse_runtime_estimate(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--runtime-estimate") from None
    if mode == "round" and estimate.kind != "exact":
        raise click.UsageError("--runtime-estimate applies to --mode event (round mode reproduces the PAL "
                               "artifact, whose policies know exact runtimes)")
    return estimate


def _report_data(report: Any, cluster: dict[str, Any], drain: dict[str, Any] | None, baseline: str, mode: str,
                 round_seconds: float) -> dict[str, Any]:
    """The JSON document: the cluster, the report, the drained baseline and the warnings (also said
    on stderr, whatever the format)."""
    data = {"cluster": cluster, **report.as_dict()}
    if drain is not None:
        data["drain_baseline"] = {"policy": f"{baseline}+drain", **drain}
    queue = _queue_check(report, baseline, mode, round_seconds)
    if queue is not None:
        data["warnings"] = [queue]
        click.echo(f"pal: warning: {queue}", err=True)
    return data


def _print_tables(data: dict[str, Any], rows: list[dict[str, Any]], loaded: list[Any], drain: dict[str, Any] | None,
                  total_gpus: int, baseline: str, title: str) -> None:
    """The table format: the cluster, every run, the geomean ratios to the baseline, the drain and
    the rows skipped."""
    prose(f"cluster simulated: {data['cluster']['text']}")
    emit_rows(rows, RUN_COLUMNS, "table", title=title)
    summary = [{"policy": p, **v} for p, v in data["summary"].items()]
    emit_rows(summary, [Column("policy", lambda r: r["policy"]),
                        Column(f"avg JCT /\n{baseline}", _ratio("avg_jct_ratio"), "right"),
                        Column(f"makespan /\n{baseline}", _ratio("makespan_ratio"), "right"),
                        Column(f"utilization /\n{baseline}", _ratio("utilization_ratio"), "right"),
                        Column("tax\nremoved", lambda r: _percent(r.get("tax_removed")), "right"),
                        Column("of the\navoidable", lambda r: _percent(r.get("avoidable_tax_removed")), "right"),
                        Column("added\nwait", _added_wait, "right")],
              "table", title=f"geomean over {len(loaded)} trace(s) of the ratio to {baseline} (JCT < 1 is better)")
    if drain is not None:
        prose(f"{baseline}+drain: {baseline} on the {drain['gpus_left']} of {total_gpus} GPUs left "
              f"after draining {len(drain['drained_nodes'])} node(s) with a GPU at PerfVar >= "
              f"{drain['threshold']:g}: {', '.join(drain['drained_nodes']) or 'none'}")
    skipped = sum(len(t.skipped) for t in loaded)
    if skipped:
        prose(f"{skipped} trace rows skipped (invalid, or not a job the simulator can run)")


def _queue_check(report: Any, baseline: str, mode: str, round_seconds: float) -> str | None:
    """A warning when no job waited under the baseline on any trace: a cluster that leaves no queue
    gives placement nothing to choose between, so every policy looks alike there."""
    runs = [r for r in report.results if r.policy == baseline and r.outcomes]
    if not runs:
        return None
    grace = round_seconds if mode == "round" else 1.0  # round mode starts jobs at the next round
    if any(o.start_time - o.submit_time > grace for r in runs for o in r.outcomes):
        return None
    gpus = runs[0].cluster_gpus
    return (f"no job waited under {baseline} on the {gpus} simulated GPUs: with no queue, placement has "
            "nothing to choose between and every policy looks alike; simulate a smaller cluster (--cluster, "
            "or --variability DIR) or a trace with more load")


def _with_drain_baseline(report: Any, threshold: float, run_with_progress: Any) -> Any:
    """The report with the baseline's runs on the drained cluster added as <baseline>+drain: a
    second ordinary simulation whose variability is the first's, drained."""
    from dataclasses import replace

    from pal_slurm.simulate.drain import Drained
    from pal_slurm.simulate.runner import SimulationReport, run_simulations, summarise

    spec = report.spec
    drained_spec = replace(spec, policies=(spec.baseline,), variability=Drained(spec.variability, threshold))
    extra = run_with_progress(drained_spec, run_simulations)
    results = (*report.results, *(replace(r, policy=f"{spec.baseline}+drain") for r in extra.results))
    return SimulationReport(spec, results, summarise(results, spec.baseline))


def _run_with_progress(spec: Any, run: Any) -> Any:
    """Run with a progress bar on a terminal: jobs finished over all runs, so a single long run
    moves too (it sat at 0/1 before); the bar is redrawn at most ~200 times a run."""
    if not sys.stderr.isatty():
        return run(spec)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    policies = len(dict.fromkeys((*spec.policies, spec.baseline)))
    total = sum(len(t.jobs) for t in spec.traces) * policies
    done_before = 0  # jobs of the runs already finished
    with Progress(TextColumn("simulating"), BarColumn(), MofNCompleteColumn(), TextColumn("jobs"),
                  TextColumn("{task.description}"), TimeElapsedColumn(), transient=True,
                  console=console().__class__(stderr=True)) as bar:
        task = bar.add_task("", total=total)

        next_draw = 0  # jobs finished in this run at which the bar is drawn next (round mode jumps)

        def on_jobs(trace: str, policy: str, finished: int, jobs: int) -> None:
            nonlocal next_draw
            if finished < next_draw and finished != jobs:
                return
            next_draw = finished + max(1, jobs // 200)
            bar.update(task, completed=done_before + finished, description=f"{trace} / {policy}")

        def on_run(result: Any) -> None:
            nonlocal done_before, next_draw
            done_before += len(result.outcomes)
            next_draw = 0
            bar.update(task, completed=done_before)

        return run(spec, on_run, on_jobs)
