"""`pal demo`: the whole flow on embedded defaults, for a newcomer with no GPU and no data."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from pal_slurm.cli.context import AppContext
from pal_slurm.cli.render import text_format_option
from pal_slurm.cli.numbers import Whole, seed


@click.command()
@click.option("--dir", "out_dir", type=click.Path(path_type=Path, file_okay=False), default=Path("pal-demo"),
              show_default=True, help="Where the demo writes its SQLite database, profile file and HTML report.")
@click.option("--nodes", type=Whole(1, 4096), default=16, show_default=True)
@click.option("--gpus-per-node", type=Whole(1, 16), default=4, show_default=True)
@click.option("--runs", "runs_per_gpu", type=Whole(1, 100), default=5, show_default=True,
              help="Benchmark runs per GPU and benchmark.")
@click.option("--seed", type=seed(), default=0, show_default=True, help="Seed of the simulated fleet.")
@click.option("--slurm", "on_slurm", is_flag=True,
              help="Instead: place real jobs on the Slurm test cluster of the source checkout (root only).")
@text_format_option
@click.pass_obj
def demo(app: AppContext, out_dir: Path, nodes: int, gpus_per_node: int, runs_per_gpu: int, seed: int,
         on_slurm: bool, fmt: str) -> None:
    """A site's path on a simulated GPU fleet and a fresh SQLite file: the shipped profiler
    (`pal profile run --backend sim`), `pal classify`, the report, then a simulated week in
    observe mode through the placer's own decision step and ledger, so that `pal placements`,
    `pal report savings` and `pal report fairness` show what an admin sees before enforcing.

    Uses --db instead of the demo's own SQLite file only when given explicitly.

    \b
    --slurm shows placement on a real Slurm cluster (root only; needs the source checkout):
    installs Slurm if missing (apt) and starts tests/services/slurm-cluster.sh's cluster
    (4 nodes x 4 fake V100s; state dir $PAL_TEST_SLURM_DIR, default /var/tmp/pal-test-slurm),
    classifies its GPUs into DIR/slurm/pal.db, runs `pal placer` in enforce mode with the
    submit filter on, submits a class-A job, a class-D job and a 2-GPU job with plain sbatch
    and shows which GPU each got and how good it is for the job's class, then `pal explain`
    and `pal report savings` (what the jobs' GPUs cost them, what the placer saved).
    Afterwards the filter is off and the placer stopped; the cluster keeps running.
    """
    if on_slurm:
        _slurm_demo(app, out_dir, fmt == "json")
        return
    from pal_slurm.demo.walkthrough import DemoOptions, run_demo

    # A PAL_DB_URL left in the environment usually points at the site's real database:
    # the demo must not fill it with a simulated fleet. Only an explicit --db counts.
    parent = click.get_current_context().parent
    explicit = parent is not None and parent.get_parameter_source("db_url") == click.core.ParameterSource.COMMANDLINE
    if app.db_url and not explicit:
        click.echo("pal demo: ignoring PAL_DB_URL; the demo uses its own SQLite file (give --db to override)", err=True)

    as_json = fmt == "json"
    result = run_demo(DemoOptions(out_dir=out_dir, nodes=nodes, gpus_per_node=gpus_per_node,
                                  runs_per_gpu=runs_per_gpu, seed=seed, db_url=app.db_url if explicit else None),
                      app_config_path=app.config_path,
                      say=(lambda line: click.echo(line, err=True)) if as_json else click.echo)
    if as_json:  # the steps went to stderr; stdout is one JSON document
        _emit_result_json(result)
        return
    _show_result(app, result)


def _emit_result_json(result: Any) -> None:
    """The demo's result as one JSON document (a DemoResult: paths, figures, the week, the report)."""
    from dataclasses import asdict

    from pal_slurm.cli.render import emit_json

    week = asdict(result.week)
    week.update(first_submit=result.week.first_submit.isoformat(), last_end=result.week.last_end.isoformat())
    emit_json({"db_url": result.db_url, "profile_file": str(result.profile_file),
               "html_file": str(result.html_file), "classification_version": result.version,
               "recovery": result.recovery, "planted_bad": result.planted_bad, "observe_week": week,
               "report": result.report})


def _show_result(app: AppContext, result: Any) -> None:
    """The text format: the report, how well the tiers were recovered, the week's reports, what next."""
    from pal_slurm.cli.report_cmd import show_report

    click.echo("")
    show_report(result.report)
    click.echo("")
    click.echo("How well classification recovered the simulated fleet's true tiers (regular, slow, outlier; "
               "a regular bin's tier by its centroid, edges 1.04 and 1.20):")
    for bench, r in result.recovery.items():
        click.echo(f"  {bench}: {r['exact']}/{r['gpus']} GPUs in their true tier, {r['within_one']}/{r['gpus']} "
                   "within one tier")
    click.echo(f"  planted defective GPUs: {len(result.planted_bad)}")
    click.echo("")
    _show_week(app, result.db_url)
    click.echo("")
    pal, how = _pal_command()
    click.echo(f"Next: open {result.html_file}, or explore with "
               f"`{pal} --db {result.db_url} gpus`, `... gpus --actions` (what to do about each outlier, "
               f"docs/admin-guide.md), `... placements`, `... report savings`, `... report fairness` and "
               f"`... report --format json`{how}.")


def _show_week(app: AppContext, db_url: str) -> None:
    """The reports an admin reads after a week in observe mode, from the demo's database."""
    root = click.get_current_context().find_root().command  # the `pal` group, without importing it
    for args in (["placements", "--limit", "3"], ["report", "savings", "--since", "30d"], ["report", "fairness"]):
        click.echo(f"$ pal {' '.join(args)}")
        config = ["--config", app.config_path] if app.config_path else []
        root.main([*config, "--db", db_url, *args], prog_name="pal", standalone_mode=False)
        click.echo("")


def _pal_command(argv0: str | None = None, path: str | None = None) -> tuple[str, str]:
    """How a newcomer runs `pal` from this shell: `pal` when it is on PATH (the virtual environment
    is active), else the path of the one running, with how to make plain `pal` work."""
    import os
    import shutil
    import sys

    argv0 = sys.argv[0] if argv0 is None else argv0
    running = Path(argv0)
    found = shutil.which("pal", path=path)
    if running.name != "pal" or (found and Path(found).resolve() == running.resolve()):
        return "pal", ""

    def short(p: Path) -> str:  # .venv/bin/pal under the working directory, else the absolute path
        rel = os.path.relpath(p)
        return str(p) if rel.startswith("..") else rel

    shown = short(running.resolve())
    activate = running.resolve().parent / "activate"
    if activate.exists():
        return shown, f" (or activate the virtual environment first, `. {short(activate)}`, and type `pal`)"
    return shown, f" ({shown} is not on PATH)"


def _slurm_demo(app: AppContext, out_dir: Path, as_json: bool) -> None:
    from pal_slurm.cli.render import emit_json
    from pal_slurm.demo.on_slurm import require_root, run_slurm_demo
    from pal_slurm.demo.slurm_jobs import render_job

    require_root()
    if app.db_url:
        click.echo("pal demo --slurm: ignoring --db/PAL_DB_URL; the demo classifies the test cluster's GPUs "
                   "into its own SQLite file", err=True)
    say = (lambda _line: None) if as_json else click.echo
    result = run_slurm_demo(out_dir, say=say)
    if as_json:
        emit_json(result.as_dict())
        return
    click.echo("")
    for job in result.jobs:
        for line in render_job(job):
            click.echo(line)
    if result.explain_job:
        click.echo("")
        click.echo(f"$ pal --db {result.db_url} explain {result.explain_job}")
        click.echo(result.explain)
    if result.savings:
        click.echo("")
        click.echo(f"$ pal --db {result.db_url} report savings --since 1d")
        click.echo(result.savings)
    click.echo("")
    click.echo(f"The cluster keeps running (state in {result.cluster_dir}); stop it with: {result.stop_hint}")
