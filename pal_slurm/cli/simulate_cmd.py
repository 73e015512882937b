"""`pal simulate`: replay traces under placement policies before turning placement on."""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path
from typing import Any

import click

from pal_slurm.classification.actions import ActionPolicy
from pal_slurm.cli.context import AppContext
from pal_slurm.cli.numbers import MAX_GPUS_PER_NODE, MAX_JOBS, Real, Whole, ident, seed
from pal_slurm.cli.render import Column, console, emit_json, emit_rows, format_option, prose
from pal_slurm.errors import InputError
from pal_slurm.placement.table import policy_names


#: the largest simulated cluster: 4x the 4,096 GPUs the 100,000-job speed target is set on
#: (bench/sim_speed.py); beyond it a run takes hours and most of its memory is the cluster
MAX_SIM_GPUS = 16384


def _cluster(value: str) -> tuple[int, int]:
    m = re.fullmatch(r"\s*(\d{1,9})\s*[xX]\s*(\d{1,9})\s*", value)
    if not m or int(m[1]) < 1 or int(m[2]) < 1:
        raise click.BadParameter(f"{value!r}: expected NODESxGPUS, e.g. 16x4", param_hint="--cluster")
    if int(m[2]) > MAX_GPUS_PER_NODE:
        raise click.BadParameter(f"{value!r}: {int(m[2])} GPUs per node; at most {MAX_GPUS_PER_NODE}",
                                 param_hint="--cluster")
    if int(m[1]) * int(m[2]) > MAX_SIM_GPUS:
        raise click.BadParameter(f"{value!r}: {int(m[1]) * int(m[2]):,} GPUs; the simulator takes at most "
                                 f"{MAX_SIM_GPUS:,} (docs/simulation.md)", param_hint="--cluster")
    return int(m[1]), int(m[2])


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
              help="Also simulate a synthetic trace of N jobs (Poisson arrivals, Philly-like sizes).")
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
             skip_invalid: bool, cluster_shape: str | None, variability: str, variability_model: str | None,
             drain_baseline: bool, version: int | None, policy_spec: str, order: str, mode: str,
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
    """
    from pal_slurm.simulate.runner import SimulationSpec, run_simulations

    from pal_slurm.simulate.estimates import parse_runtime_estimate

    try:
        estimate = parse_runtime_estimate(runtime_estimate)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--runtime-estimate") from None
    if mode == "round" and estimate.kind != "exact":
        raise click.UsageError("--runtime-estimate applies to --mode event (round mode reproduces the PAL "
                               "artifact, whose policies know exact runtimes)")
    policies = _policy_names(policy_spec)
    _policy_names(baseline)
    if not traces and not synthetic_jobs:
        raise click.UsageError("give at least one --trace FILE or --synthetic N")
    source, total_gpus, cluster = _variability(app, variability, cluster_shape, version, variability_model, seed)
    loaded = _load_traces(traces, trace_format, total_gpus, skip_invalid, synthetic_jobs, seed)
    drain = _drain_check(source, loaded, seed, app.cfg.report.drain_perfvar) if drain_baseline else None
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
    data = {"cluster": cluster, **report.as_dict()}
    if drain is not None:
        data["drain_baseline"] = {"policy": f"{baseline}+drain", **drain}
    queue = _queue_check(report, baseline, mode, round_seconds)
    if queue is not None:
        data["warnings"] = [queue]
        click.echo(f"pal: warning: {queue}", err=True)
    rows = [{**r.as_dict()} for r in report.results]
    if fmt == "json":
        emit_json(data)
    elif fmt == "csv":
        click.echo(f"pal: cluster simulated: {cluster['text']}", err=True)
        emit_rows(rows, CSV_COLUMNS, "csv")
    else:
        prose(f"cluster simulated: {cluster['text']}")
        emit_rows(rows, RUN_COLUMNS, "table", title=f"{mode} mode, {order}, lambda {locality_penalty}; JCT, wait "
                                                     "and makespan in hours")
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


def _shape_text(cluster: Any) -> tuple[int, str]:
    """(nodes, "96 nodes x 4 GPUs") of a Cluster, or "90 nodes, 2-8 GPUs each" when they differ."""
    per_node: dict[int, int] = {}
    for g in cluster.gpus:
        per_node[g.node] = per_node.get(g.node, 0) + 1
    counts = sorted(set(per_node.values()))
    nodes = len(per_node)
    if len(counts) == 1:
        return nodes, f"{nodes} nodes x {counts[0]} GPUs"
    return nodes, f"{nodes} nodes, {counts[0]}-{counts[-1]} GPUs each"


def _variability(app: AppContext, value: str, cluster_shape: str | None, version: int | None,
                 model: str | None, seed: int) -> tuple[Any, int, dict[str, Any]]:
    """(the variability model, its GPUs, what `pal simulate` says it simulated: the "cluster" of
    the JSON, with `text` the line the table prints)."""

    def shape(nodes: int, gpn: int, where: str) -> dict[str, Any]:
        given = "--cluster" if cluster_shape else "default --cluster"
        return {"nodes": nodes, "gpus_per_node": gpn, "gpus": nodes * gpn, "source": where,
                "text": f"{nodes} nodes x {gpn} GPUs = {nodes * gpn} GPUs ({given} {nodes}x{gpn}); {where}"}

    from pal_slurm.placement.variability import cluster_from_gpus
    from pal_slurm.simulate.runner import ArtifactVariability, FixedVariability

    if model is not None and (value == "db" or value.startswith("parametric:")):
        raise click.BadParameter(f"{model!r} applies to --variability DIR (the artifact's CSVs), not {value!r}",
                                 param_hint="--variability-model")
    if value.startswith("parametric:"):
        if version is not None:
            raise click.UsageError("--classification goes with --variability db")
        from pal_slurm.simulate.fleets import parametric_from_spec

        nodes, gpn = _cluster(cluster_shape or "16x4")
        try:
            return (parametric_from_spec(value.removeprefix("parametric:"), nodes, gpn, seed), nodes * gpn,
                    shape(nodes, gpn, f"variability {value}"))
        except InputError as exc:
            raise click.BadParameter(str(exc), param_hint="--variability") from None
    if value == "db":
        if cluster_shape is not None:
            raise click.UsageError("--cluster does not apply to --variability db: the database's GPUs are the cluster")
        from pal_slurm.db.engine import session_scope
        from pal_slurm.db.migrate import require_current
        from pal_slurm.db.variability_store import load_variability

        require_current(app.engine)
        with session_scope(app.engine) as session:
            stored = load_variability(session, sorted(app.cfg.job_classes), version, at_slots_only=True)
        cluster = cluster_from_gpus(stored.gpus)
        nodes, text = _shape_text(cluster)
        where = (f"the database's GPUs at a slot, classification version {stored.version}"
                 + (f" ({stored.without_slot} GPU identities without a slot left out)" if stored.without_slot
                    else ""))
        return FixedVariability(cluster), cluster.size, {
            "nodes": nodes, "gpus_per_node": None if "," in text else cluster.size // max(nodes, 1),
            "gpus": cluster.size, "source": "db", "classification_version": stored.version,
            "identities_without_slot": stored.without_slot, "text": f"{text} = {cluster.size} GPUs; {where}"}
    if version is not None:
        raise click.UsageError("--classification goes with --variability db")
    from pal_slurm.simulate.artifact_draw import load_artifact_profiles

    nodes, gpn = _cluster(cluster_shape or "16x4")
    profiles = load_artifact_profiles(Path(value))
    if model == "per-gpu":
        from pal_slurm.simulate.fleets import PerGpuVariability

        return (PerGpuVariability(profiles, nodes, gpn), nodes * gpn,
                shape(nodes, gpn, f"each GPU one measured GPU of {value} (per-gpu)"))
    return (ArtifactVariability(profiles, nodes, gpn), nodes * gpn,
            shape(nodes, gpn, f"each GPU a run drawn from {value} (per-run)"))


def _drain_check(source: Any, loaded: list[Any], seed: int, threshold: float) -> dict[str, Any]:
    """What the drain leaves of the run's fleet (the runner re-draws the same one from the
    seed), refused before any run when a trace's job cannot run on it."""
    import random

    from pal_slurm.simulate.drain import check_drain_fits, drained

    left, names = drained(source.cluster(random.Random(seed)), threshold)
    try:
        for trace in loaded:
            check_drain_fits(trace, left, names)
    except InputError as exc:
        raise click.BadParameter(str(exc), param_hint="--drain-baseline") from None
    return {"threshold": threshold, "drained_nodes": names, "gpus_left": left.size}


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


def _load_traces(paths: tuple[Path, ...], fmt: str, max_gpus: int, skip_invalid: bool, synthetic_jobs: int | None,
                 seed: int) -> list[Any]:
    from pal_slurm.simulate.trace_files import read_trace_file

    loaded = [read_trace_file(p, format=fmt, max_gpus=max_gpus, skip_invalid=skip_invalid) for p in paths]
    for path, trace in zip(paths, loaded):
        if not trace.jobs:  # a table of dashes (or of NaN) would look like a result
            raise InputError(_no_jobs(trace), source=str(path))
    if synthetic_jobs:
        from pal_slurm.simulate.synthetic import generate

        loaded.append(generate(synthetic_jobs, seed=seed, max_gpus=max_gpus))
    names = [t.name for t in loaded]
    if len(set(names)) != len(names):
        raise InputError(f"two traces have the same name: {', '.join(sorted(n for n in names if names.count(n) > 1))}")
    return loaded


def _no_jobs(trace: Any) -> str:
    """Why a trace gave nothing to simulate: only a header, or every row left out (and why)."""
    if not trace.skipped:
        return "no jobs to simulate (the file has a header and no job rows)"
    reasons: dict[str, int] = {}
    for _line, reason in trace.skipped:
        key = reason.split(" (")[0]
        reasons[key] = reasons.get(key, 0) + 1
    why = ", ".join(f"{n} {r}" for r, n in sorted(reasons.items(), key=lambda kv: -kv[1])[:4])
    return f"no jobs to simulate: all {len(trace.skipped)} rows were left out ({why})"


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
