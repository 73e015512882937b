"""`pal profile`: bring benchmark results into the database."""

from __future__ import annotations

import dataclasses
from datetime import UTC
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from pal_slurm.cli.context import AppContext
from pal_slurm.cli.numbers import MAX_GPUS_PER_NODE, Real, Whole
from pal_slurm.cli.profile_backend import backend_options, backend_request
from pal_slurm.cli.render import Column, emit_json, emit_rows, format_option, output_options, text_format_option
from pal_slurm.errors import PalError

if TYPE_CHECKING:
    from pal_slurm.config import PalConfig
    from pal_slurm.profiler.service import RunOutcome
    from pal_slurm.services.ingest import FileImport


@click.group()
def profile() -> None:
    """GPU profiling: inventory and benchmark this node's GPUs, submit profiling jobs, import results."""


@profile.command("import")
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path, dir_okay=False))
@click.option("--input-format", "input_format", type=click.Choice(["pal-artifact", "jsonl"]), default="jsonl",
              show_default=True,
              help="What FILES hold: pal-artifact: the PAL artifact's aggregated CSVs; jsonl: pal-profile/1 JSON lines.")
@click.option("--benchmark", metavar="NAME", help="Benchmark name for pal-artifact files (e.g. resnet50).")
@click.option("--model", metavar="NAME", help="GPU model for pal-artifact files (e.g. V100).")
@click.option("--unit", metavar="UNIT", help="Unit of the artifact's perf column [default: ms].")
@click.option("--max-factor", type=Real(1, 1e6, low_open=True, inf_ok=True), metavar="F",
              help="A score more than F times off its group's running median (either way) is suspect; "
                   "inf turns this check off [default: [ingest] max_factor, 10].")
@click.option("--keep-suspect", is_flag=True, default=None,
              help="Store suspect scores quarantined (never classified) instead of leaving them out "
                   "[default: [ingest] keep_suspect].")
@click.option("--allow-move", is_flag=True,
              help="A GPU recorded on another node than the file says is moved there (an admin who knows it "
                   "was moved); without it such a file is refused, naming the GPU and both nodes.")
@output_options(("table", "json"), "table: lines for people (no table, so no csv); json for scripts.",
                moved={"pal-artifact": "--input-format", "jsonl": "--input-format"})
@click.pass_obj
def import_(app: AppContext, files: tuple[Path, ...], input_format: str, benchmark: str | None, model: str | None,
            unit: str | None, max_factor: float | None, keep_suspect: bool | None, allow_move: bool, fmt: str) -> None:
    """Import profile FILES. Each file is one transaction (all or nothing); importing a file
    again adds nothing. A malformed row stops with FILE:LINE and the reason; an implausible
    score (not finite, not positive, or more than --max-factor times off its group's running
    median) is left out with FILE:LINE and the import goes on. A row that names a GPU by its
    slot joins the GPU known there; identity conflicts are reported, never merged. A file whose
    newest measurement of a GPU is on another node than the one the GPU is recorded on is
    refused unless --allow-move: the nodes store their own measurements and never move a GPU.

    See docs/import-formats.md for both formats, the identity rules and the checks.
    --input-format names what the files hold; --format, as for every command, what is printed.
    """
    from pal_slurm.services.ingest import identity_summary, import_files

    ing = app.cfg.ingest
    done = import_files(app.engine, list(files), input_format, benchmark=benchmark, model=model, unit=unit,  # type: ignore[arg-type]
                        max_factor=ing.max_factor if max_factor is None else max_factor,
                        keep_suspect=ing.keep_suspect if keep_suspect is None else keep_suspect,
                        allow_move=allow_move)
    _warn_about_files(done)
    _warn_about_unused_benchmarks(app.cfg, done)
    ids = identity_summary(app.engine)
    if fmt == "json":
        emit_json([_import_as_json(d, ids) for d in done])
        return
    for d in done:
        r = d.result
        extra = "".join(f", {n} {what}" for n, what in (
            (r.rejected, "rejected"), (r.quarantined, "quarantined"),
            (r.merged_gpus, "slot identities merged into their UUID"),
            (r.resolved_runs, "runs placed on the GPU known at their slot"),
            (r.conflicts, "identity conflicts"), (r.model_conflicts, "model conflicts"),
            (r.moved_gpus, "GPUs moved to another node")) if n)
        click.echo(f"{d.path}: {r.records} runs, {r.added} added, {r.already_present} already present{extra}, "
                   f"{r.new_gpus} new GPUs, {r.new_nodes} new nodes")
    click.echo(_identity_line(ids))


def _identity_line(ids: dict[str, int]) -> str:
    from pal_slurm.report.data import identity_text

    return "database: " + identity_text(ids)


_MAX_WARNINGS = 20  # per file on stderr; --json carries every one


def _warn_about_files(done: list[FileImport]) -> None:
    """Each file's warnings on stderr (FILE:LINE: reason), at most _MAX_WARNINGS a file."""
    for d in done:
        shown = d.result.warnings[:_MAX_WARNINGS]
        for line in shown:
            click.echo(f"pal: warning: {line}", err=True)
        if len(d.result.warnings) > len(shown):
            click.echo(f"pal: warning: {d.path}: {len(d.result.warnings) - len(shown)} more warnings like these "
                       "(--json lists them all)", err=True)


def _warn_about_unused_benchmarks(cfg: PalConfig, done: list[FileImport]) -> None:
    """A misspelt --benchmark stores runs that no class reads: say so (they are kept; a
    [job_classes] entry naming the benchmark makes them count), and name the benchmark set
    whose classes would read them."""
    used = {jc.benchmark for jc in cfg.job_classes.values()}
    for name in sorted({b for d in done for b in d.result.benchmarks} - used):
        from pal_slurm.benchmark_sets import set_of

        other = set_of(name)
        hint = (f"; the classes read the {other.name} set's names with [classification] benchmark_set = "
                f"\"{other.name}\" (docs/classification.md)"
                if other is not None and other.name != cfg.classification.benchmark_set
                and name in {b for b, _d in other.job_classes.values()} else "")
        click.echo(f"pal: warning: benchmark {name!r} is used by no job class ([job_classes] use "
                   f"{', '.join(sorted(used))}); its runs are stored but place nothing{hint}", err=True)


def _import_as_json(d: FileImport, ids: dict[str, int]) -> dict[str, Any]:
    """One file's import as --format json prints it: every count, its benchmarks and all its warnings."""
    return {"file": d.path, "runs": d.result.records, "added": d.result.added,
            "already_present": d.result.already_present, "rejected": d.result.rejected,
            "quarantined": d.result.quarantined, "new_gpus": d.result.new_gpus,
            "new_nodes": d.result.new_nodes, "merged_gpus": d.result.merged_gpus,
            "resolved_runs": d.result.resolved_runs, "conflicts": d.result.conflicts,
            "model_conflicts": d.result.model_conflicts, "moved_gpus": d.result.moved_gpus,
            "benchmarks": sorted(d.result.benchmarks),
            "warnings": d.result.warnings, "database": ids}


# -- measuring on the node: inventory, run, submit -----------------------------------------------

def _reasons(mask: int | None) -> str:
    from pal_slurm.profiler.telemetry import reason_names

    return ",".join(reason_names(mask)) or ("-" if mask is None else "none")


@profile.command("inventory")
@backend_options
@click.option("--no-db", is_flag=True, help="Only show the GPUs; do not write the database.")
@click.option("--allow-move", is_flag=True,
              help="A GPU recorded on another node is moved to this one (an admin who knows it was moved); "
                   "without it the scan is refused, naming the GPU and both nodes.")
@format_option
@click.pass_obj
def inventory_(app: AppContext, no_db: bool, allow_move: bool, fmt: str, **kw: Any) -> None:
    """List this node's GPUs (UUID, serial, PCI bus, minor number, memory, power limit, driver,
    ECC, retired pages) and upsert them into the database by UUID.

    A GPU of this node that the scan no longer shows is marked missing, never deleted; it is
    marked present again when seen. A GPU whose queries fail is reported and the others go on.
    A GPU recorded on another node is not moved here without --allow-move.
    """
    from pal_slurm.profiler.service import inventory_node, open_requested_backend

    backend = open_requested_backend(backend_request(kw))
    try:
        out = inventory_node(backend, None if no_db else (lambda: app.engine), allow_move=allow_move)
    finally:
        backend.close()
    stored = out.stored
    if fmt == "json":
        emit_json({"backend": out.scan.backend, "nodes": list(out.scan.nodes),
                   "gpus": [dataclasses.asdict(g) for g in out.scan.gpus],
                   "faults": [dataclasses.asdict(f) for f in out.scan.faults],
                   "stored": stored.as_dict() if stored else None, "db_error": out.db_error})
    else:
        rows = [dataclasses.asdict(g) for g in out.scan.gpus]
        emit_rows(rows, [
            Column("node", lambda r: r["node"]), Column("idx", lambda r: r["index"], "right"),
            Column("minor", lambda r: r["minor_number"], "right"), Column("uuid", lambda r: r["uuid"]),
            Column("model", lambda r: r["name"]), Column("serial", lambda r: r["serial"]),
            Column("pci", lambda r: r["pci_bus_id"]), Column("MiB", lambda r: r["memory_mib"], "right"),
            Column("limit W", lambda r: r["power_limit_w"], "right"), Column("driver", lambda r: r["driver_version"]),
            Column("cuda", lambda r: r["cuda_version"]),
            Column("ecc c/u", lambda r: f"{_dash(r['ecc_corrected'])}/{_dash(r['ecc_uncorrected'])}"),
            Column("retired", lambda r: r["retired_pages"], "right"),
        ], fmt, title=f"{len(rows)} GPUs ({out.scan.backend})")
        for f in out.scan.faults:
            click.echo(f"fault: {f.error}", err=True)
        if stored:
            click.echo(f"stored: {len(stored.added)} new, {len(stored.updated)} updated, "
                       f"{len(stored.returned)} back, {len(stored.missing)} marked missing"
                       + (f" ({', '.join(stored.missing)})" if stored.missing else "")
                       + (f", {len(stored.moved)} moved here ({', '.join(stored.moved)})" if stored.moved else ""))
    if out.db_error:
        raise PalError(f"inventory not stored: {out.db_error}")


def _dash(value: Any) -> str:
    return "-" if value is None else str(value)


@profile.command("run")
@backend_options
@click.option("--benchmarks", "bench_spec", metavar="LIST", default="gemm,stream,train", show_default=True,
              help="Groups (gemm, stream, train) or names (gemm-fp16, gemm-fp32, stream, train-resnet50).")
@click.option("--gpus", "gpus", metavar="IDX[,IDX...]", help="Only these GPU indices [default: all].")
@click.option("--minors", "minors", metavar="N[,N...]",
              help="Only the GPUs with these device minor numbers (/dev/nvidiaN, the slot Slurm's gres.conf "
                   "names; what a profiling job inside a quarantined slot uses). Not with --gpus.")
@click.option("--passes", type=Whole(1, 1000), default=None,
              help="Run every benchmark this many times per GPU [default: classification.min_runs].")
@click.option("--time-budget", type=Real(0.1, 86_400), default=20.0, show_default=True, metavar="S",
              help="Seconds of timed repeats per benchmark at most (they stop earlier once the spread is small).")
@click.option("--timeout", type=Real(1, 7 * 86_400), default=300.0, show_default=True, metavar="S",
              help="Hard limit per benchmark program; past it the program and its children are killed.")
@click.option("--warmup", type=Real(0, 3_600), default=3.0, show_default=True, metavar="S",
              help="Seconds of warm-up before timing.")
@click.option("--target-spread", type=Real(0.0001, 0.5), default=0.01, show_default=True,
              help="Stop repeating when IQR/median of the repeats is at most this.")
@click.option("--force", is_flag=True, help="Benchmark GPUs that other processes use (their results suffer).")
@click.option("--output", type=click.Path(path_type=Path, dir_okay=False), metavar="FILE.jsonl",
              help="Where to write the pal-profile/1 results [default: DATA_DIR/profiles/NODE-TIME.jsonl].")
@click.option("--program-dir", type=click.Path(path_type=Path, file_okay=False), metavar="DIR",
              envvar="PAL_PROFILER_DIR",
              help="The benchmark programs [default: $PAL_PROFILER_DIR, the source tree, or share/pal-slurm].")
@click.option("--no-db", is_flag=True, help="Only write the file; import it later with `pal profile import`.")
@click.option("--sim-start", type=click.DateTime(formats=["%Y-%m-%dT%H:%M:%S", "%Y-%m-%d"]), metavar="WHEN",
              help="Simulated backend: the virtual time the runs start at (UTC; e.g. 2026-01-05T08:00:00), so a "
                   "profile is the same whenever it is taken [default: now, with the room's daily temperature swing].")
@format_option
@click.pass_obj
def run_(app: AppContext, bench_spec: str, gpus: str | None, minors: str | None, passes: int | None,
         time_budget: float, timeout: float,
         warmup: float, target_spread: float, force: bool, output: Path | None, program_dir: Path | None,
         no_db: bool, sim_start: Any, fmt: str, **kw: Any) -> None:
    """Benchmark this node's GPUs: one program per GPU (CUDA_VISIBLE_DEVICES pinned, hard
    timeout), with NVML telemetry (clocks, power, temperature, throttle reasons) sampled
    during each run; then write the results as pal-profile/1 lines and store them.

    A GPU that another process uses is not benchmarked unless --force. A benchmark that
    crashes, prints garbage or hangs is recorded as failed with its reason, and the others
    go on. Submit it on every node through Slurm with `pal profile submit`.
    """
    from pal_slurm.gpu.choose import parse_indices
    from pal_slurm.profiler.benchmarks import select_benchmarks
    from pal_slurm.profiler.executors import RunSettings
    from pal_slurm.profiler.service import (
        RunRequest,
        open_requested_backend,
        profile_node,
    )

    req = RunRequest(
        benchmarks=tuple(select_benchmarks(bench_spec)),
        settings=RunSettings(time_budget_s=time_budget, timeout_s=timeout, warmup_s=warmup,
                             target_spread=target_spread),
        indices=parse_indices(gpus), minors=parse_indices(minors, "--minors"),
        passes=passes or app.cfg.classification.min_runs, force=force,
        output=output, program_dir=program_dir,
        sim_start=None if sim_start is None else sim_start.replace(tzinfo=UTC),
    )
    if gpus and minors:
        raise click.UsageError("--gpus and --minors both choose GPUs: give one")
    if sim_start is not None and kw.get("backend") != "sim":
        raise click.UsageError("--sim-start applies to --backend sim only")
    backend = open_requested_backend(backend_request(kw))

    def progress(o: Any) -> None:
        if fmt != "json" and o.status != "ok":
            click.echo(f"GPU {o.gpu.index} {o.benchmark.name}: {o.status}: {o.error}", err=True)

    try:
        out = profile_node(backend, req, data_dir=app.cfg.data_dir,
                           engine_factory=None if no_db else (lambda: app.engine), progress=progress)
    finally:
        backend.close()
    _show_run(out, fmt)


def _show_run(out: RunOutcome, fmt: str) -> None:
    """What `pal profile run` did: the results (JSON, or a table and where they went and what
    was stored), then on stderr what was left out; a PalError when nothing was measured or
    stored."""
    res = out.result
    if fmt == "json":
        emit_json({**res.as_dict(), "output": str(out.output), "records": out.records,
                   "imported": None if out.saved is None else out.saved.imported.added,
                   "failures_stored": None if out.saved is None else out.saved.failures_added,
                   "db_error": out.db_error})
    else:
        _render_run(res, fmt)
        click.echo(f"{out.records} results -> {out.output}", err=fmt == "csv")
        if out.saved is not None:
            rejected = out.saved.imported.rejected
            click.echo(f"stored: {out.saved.imported.added} runs, {out.saved.failures_added} failures"
                       + (f", {rejected} implausible scores left out" if rejected else ""))
    if out.saved is not None:
        for line in out.saved.imported.warnings:  # an implausible score: FILE:LINE of the results file
            click.echo(f"pal: warning: {line}", err=True)
    for b in res.busy:
        click.echo(f"not benchmarked: {b.describe()} (use --force to benchmark anyway)", err=True)
    for f in res.faults:
        click.echo(f"fault: {f.error}", err=True)
    if out.db_error:
        raise PalError(f"results not stored ({out.db_error}); they are in {out.output}: "
                       f"import them later with `pal profile import {out.output}`")
    if not res.ok:
        raise PalError("no benchmark produced a result" + (f" (first failure: {res.failed[0].error})"
                                                           if res.failed else ""))


def _render_run(res: Any, fmt: str) -> None:
    rows = []
    for o in res.outcomes:
        t = o.telemetry
        rows.append({"node": o.gpu.node, "gpu": o.gpu.index, "benchmark": o.benchmark.name, "status": o.status,
                     "score": o.score, "unit": o.benchmark.unit, "spread": o.spread, "repeats": o.repeats,
                     "sm": t.sm_clock_mhz if t else None, "mem": t.mem_clock_mhz if t else None,
                     "power": t.power_w if t else None, "temp": t.temperature_c if t else None,
                     "reasons": _reasons(t.throttle_reasons) if t else "-", "error": o.error})
    emit_rows(rows, [
        Column("node", lambda r: r["node"]), Column("gpu", lambda r: r["gpu"], "right"),
        Column("benchmark", lambda r: r["benchmark"]), Column("status", lambda r: r["status"]),
        Column("score", lambda r: r["score"], "right"), Column("unit", lambda r: r["unit"]),
        Column("spread", lambda r: r["spread"], "right"), Column("reps", lambda r: r["repeats"], "right"),
        Column("SM MHz", lambda r: r["sm"], "right"), Column("mem MHz", lambda r: r["mem"], "right"),
        Column("W", lambda r: r["power"], "right"), Column("C", lambda r: r["temp"], "right"),
        Column("throttle reasons", lambda r: r["reasons"]),
    ], fmt, title=f"pal profile run ({res.backend}): {len(res.ok)} ok, {len(res.failed)} not")


@profile.command("submit")
@click.option("--nodes", metavar="NODE[,NODE...]", help="Nodes to profile [default: every node with GPUs].")
@click.option("--partition", metavar="P", help="Partition to submit to (and to list nodes from).")
@click.option("--reservation", metavar="R", help="Run inside this reservation (e.g. a maintenance window).")
@click.option("--account", metavar="A", help="Slurm account to charge.")
@click.option("--qos", metavar="Q", help="Slurm QOS.")
@click.option("--nice", type=Whole(0, 2147483645), default=10000, show_default=True,
              help="Lower the jobs' priority by this much, so users' jobs go first.")
@click.option("--time", "time_limit", default="60", show_default=True, metavar="MIN",
              help="Time limit of each job (sbatch --time).")
@click.option("--gpus-per-node", type=Whole(1, MAX_GPUS_PER_NODE), help="GPUs per node [default: from sinfo's GRES].")
@click.option("--output", "out_pattern", default="pal-profile-%N-%j.out", show_default=True,
              help="Job output file (sbatch --output pattern).")
@click.option("--chdir", metavar="DIR", help="Working directory of the jobs (sbatch --chdir).")
@click.option("--pal", "pal_command", metavar="PATH",
              help="The pal executable on the nodes [default: this Python running -m pal_slurm].")
@click.option("--run-args", metavar="ARGS", default="",
              help="Extra arguments for `pal profile run`, split like a shell would (no shell runs), "
                   "e.g. '--benchmarks gemm --passes 5'.")
@click.option("--gpus", "gpus", metavar="FLAGGED|NODE:SLOT,...",
              help="Re-profile these GPUs' nodes, one node at a time (--dependency=singleton): FLAGGED = every GPU "
                   "with an open flag (fail-slow, clock drift); each node is profiled whole and exclusively, as "
                   "a benchmark beside users' jobs would measure them too. A GPU out of service (`pal gpus "
                   "quarantine`) is profiled in its own slot instead, which its holder job hands over and takes "
                   "back; `pal gpus release PASSED` then releases it if it passes. `pal gpus learn --apply` clears "
                   "the flags the new runs answer.")
@click.option("--dry-run", is_flag=True, help="Print the sbatch commands; submit nothing.")
@text_format_option
@click.pass_context
def submit_(ctx: click.Context, nodes: str | None, partition: str | None, reservation: str | None,
            account: str | None, qos: str | None, nice: int, time_limit: str, gpus_per_node: int | None,
            out_pattern: str, chdir: str | None, pal_command: str | None, run_args: str, gpus: str | None, dry_run: bool,
            fmt: str) -> None:
    """Submit one exclusive, low-priority profiling job per GPU node (sbatch). Each job runs
    `pal profile run --backend auto` on its node, with all its GPUs, and stores the results.
    """
    import shlex

    from pal_slurm.gpu.choose import parse_names
    from pal_slurm.profiler.submit import SubmitOptions, submit_jobs

    try:
        extra = tuple(shlex.split(run_args))
    except ValueError as exc:
        raise PalError(f"--run-args: {exc}") from exc
    opts = SubmitOptions(partition=partition, reservation=reservation, account=account, qos=qos, nice=nice,
                         time_limit=time_limit, output=out_pattern, chdir=chdir, extra_run_args=extra,
                         one_at_a_time=gpus is not None, **({"job_name": "pal-reprofile"} if gpus else {}),
                         **({"pal_command": (pal_command,)} if pal_command else {}))
    if gpus is not None:
        from pal_slurm.cli.slot_profile import reprofile_jobs

        found = reprofile_jobs(ctx.find_object(AppContext), opts, gpus, parse_names(nodes), dry_run)  # type: ignore[arg-type]
        if found is None:
            return
        whole, results = found
        if whole:
            results = submit_jobs(opts, nodes=whole, gpus_per_node=gpus_per_node, dry_run=dry_run) + results
    else:
        results = submit_jobs(opts, nodes=parse_names(nodes), gpus_per_node=gpus_per_node, dry_run=dry_run)
    if fmt == "json":
        emit_json([r.as_dict() for r in results])
    else:
        for r in results:
            click.echo(shlex.join(r.argv) if dry_run else r.summary(), err=bool(r.error) and not dry_run)
    failed = [r for r in results if r.error]
    if failed and len(failed) == len(results):
        raise PalError(f"no profiling job submitted (first error: {failed[0].error})")
