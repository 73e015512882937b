"""`pal profile`: bring benchmark results into the database."""

from __future__ import annotations

from pathlib import Path

import click

from pal_slurm.cli.context import AppContext
from pal_slurm.cli.render import emit_json


@click.group()
def profile() -> None:
    """GPU benchmark results: import files."""


@profile.command("import")
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path, dir_okay=False))
@click.option("--format", "fmt", type=click.Choice(["pal-artifact", "jsonl"]), default="jsonl", show_default=True,
              help="pal-artifact: the PAL artifact's aggregated CSVs; jsonl: pal-profile/1 JSON lines.")
@click.option("--benchmark", metavar="NAME", help="Benchmark name for pal-artifact files (e.g. resnet50).")
@click.option("--model", metavar="NAME", help="GPU model for pal-artifact files (e.g. V100).")
@click.option("--unit", metavar="UNIT", help="Unit of the artifact's perf column [default: ms].")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable summary.")
@click.pass_obj
def import_(app: AppContext, files: tuple[Path, ...], fmt: str, benchmark: str | None, model: str | None,
            unit: str | None, as_json: bool) -> None:
    """Import profile FILES. Each file is one transaction (all or nothing); importing a file
    again adds nothing. A bad row stops with FILE:LINE and the reason.

    See docs/import-formats.md for both formats.
    """
    from pal_slurm.services import import_files

    done = import_files(app.engine, list(files), fmt, benchmark=benchmark, model=model, unit=unit)  # type: ignore[arg-type]
    if as_json:
        emit_json([{"file": d.path, "runs": d.result.records, "added": d.result.added,
                    "already_present": d.result.already_present, "new_gpus": d.result.new_gpus,
                    "new_nodes": d.result.new_nodes, "benchmarks": sorted(d.result.benchmarks)} for d in done])
        return
    for d in done:
        r = d.result
        click.echo(f"{d.path}: {r.records} runs, {r.added} added, {r.already_present} already present, "
                   f"{r.new_gpus} new GPUs, {r.new_nodes} new nodes")
