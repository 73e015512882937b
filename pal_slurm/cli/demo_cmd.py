"""`pal demo`: the whole flow on embedded defaults, for a newcomer with no GPU and no data."""

from __future__ import annotations

from pathlib import Path

import click

from pal_slurm.cli.context import AppContext


@click.command()
@click.option("--dir", "out_dir", type=click.Path(path_type=Path, file_okay=False), default=Path("pal-demo"),
              show_default=True, help="Where the demo writes its SQLite database, profile file and HTML report.")
@click.option("--nodes", type=click.IntRange(1, 4096), default=16, show_default=True)
@click.option("--gpus-per-node", type=click.IntRange(1, 16), default=4, show_default=True)
@click.option("--runs", "runs_per_gpu", type=click.IntRange(1, 100), default=5, show_default=True,
              help="Benchmark runs per GPU and benchmark.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the simulated fleet.")
@click.pass_obj
def demo(app: AppContext, out_dir: Path, nodes: int, gpus_per_node: int, runs_per_gpu: int, seed: int) -> None:
    """Profile a simulated GPU fleet, import it, classify it and report, on a fresh SQLite file.

    Uses --db instead of the demo's own SQLite file only when given explicitly.
    """
    from pal_slurm.cli.report_cmd import show_report
    from pal_slurm.demo import DemoOptions, run_demo

    # A PAL_DB_URL left in the environment usually points at the site's real database:
    # the demo must not fill it with a simulated fleet. Only an explicit --db counts.
    parent = click.get_current_context().parent
    explicit = parent is not None and parent.get_parameter_source("db_url") == click.core.ParameterSource.COMMANDLINE
    if app.db_url and not explicit:
        click.echo("pal demo: ignoring PAL_DB_URL; the demo uses its own SQLite file (give --db to override)", err=True)

    result = run_demo(DemoOptions(out_dir=out_dir, nodes=nodes, gpus_per_node=gpus_per_node,
                                  runs_per_gpu=runs_per_gpu, seed=seed, db_url=app.db_url if explicit else None),
                      app_config_path=app.config_path, say=click.echo)
    click.echo("")
    show_report(result.report)
    click.echo("")
    click.echo("How well classification recovered the simulated fleet's true tiers (bin rank vs true tier rank):")
    for bench, r in result.recovery.items():
        click.echo(f"  {bench}: {r['exact']}/{r['gpus']} GPUs in their true tier, {r['within_one']}/{r['gpus']} "
                   "within one tier")
    click.echo(f"  planted defective GPUs: {len(result.planted_bad)}")
    click.echo("")
    click.echo(f"Next: open {result.html_file}, or explore with "
               f"`pal --db {result.db_url} gpus` and `pal --db {result.db_url} report --format json`.")
