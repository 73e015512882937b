"""`pal slurm ...`: the Slurm configuration pal-slurm needs, generated from our inventory."""

from __future__ import annotations

import json
from pathlib import Path

import click

from pal_slurm.cli.context import AppContext
from pal_slurm.cli.render import Column, emit_json, emit_rows, output_options
from pal_slurm.errors import InputError
from pal_slurm.slurm import gres_compare, gresconf


@click.group()
def slurm() -> None:
    """Slurm configuration for pal-slurm (gres.conf, slurm.conf node lines)."""


def read_inventory_file(path: Path) -> gresconf.Inventory:
    """The JSON inventory file (bootstrapping before the agents have filled the database)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InputError(f"not valid JSON: {exc.msg}", source=str(path), line=exc.lineno) from None
    except UnicodeDecodeError:
        raise InputError("not UTF-8 text", source=str(path)) from None
    return gresconf.inventory_from_dict(data, source=str(path))


def read_inventory_db(app: AppContext) -> gresconf.Inventory:
    """GPUs the database knows as present, with their node and minor number."""
    from pal_slurm.db.inventory_store import present_gpus

    rows = present_gpus(app.engine)
    if not rows:
        raise InputError("the database knows no GPUs on any node; run the agent on the nodes or pass --inventory FILE")
    return gresconf.inventory_from_rows(rows)


def write_initial_filter_state(app: AppContext, inv: gresconf.Inventory, path: Path) -> str:
    """The filter state before any placer cycle: the models (so bare model requests are
    rewritten, not refused, once per-slot gres.conf is installed), heartbeat 0 (so nothing is
    held until a placer runs). A state a running placer keeps fresh is left alone."""
    from pal_slurm.slurm import filter_state

    age = filter_state.heartbeat_age(path)
    if age is not None and age <= app.cfg.placer.stale_after_s:
        return f"{path}: a running placer keeps it (heartbeat {age:.0f} s old); left as it is"
    models = tuple(sorted({f for n in inv.nodes for f in n.features}))
    try:
        filter_state.write(path, filter_state.FilterState(mode=app.cfg.placer.mode, heartbeat=0,
                                                          stale_after=app.cfg.placer.stale_after_s, models=models,
                                                          hold_s=app.cfg.placer.hold_s))
    except OSError as exc:
        raise InputError(f"cannot write the filter state: {exc.strerror}", source=str(path)) from None
    return f"wrote {path} (models {', '.join(models) or 'none'}; nothing held until the placer runs)"


DIFF_COLUMNS = [Column("node", lambda r: r["node"]), Column("difference", lambda r: r["kind"]),
                Column("detail", lambda r: r["detail"])]


@slurm.command("gres-conf")
@click.option("--inventory", "inventory_path", type=click.Path(path_type=Path, dir_okay=False, exists=True),
              metavar="FILE", help="JSON inventory file instead of the database (format: docs/admin-guide.md).")
@click.option("--dev-dir", default="/dev", show_default=True, metavar="DIR",
              help="Directory of the nvidia<minor> device files; %n becomes the node name.")
@click.option("--output-dir", type=click.Path(path_type=Path, file_okay=False), metavar="DIR",
              help="Write DIR/gres.conf and DIR/nodes.conf instead of printing.")
@output_options(("text", "json"), "text: the configuration lines (a table of differences with --check); json: "
                                  "nodes, types and files (or the differences). No csv: the output is "
                                  "configuration, not a table.")
@click.option("--check", is_flag=True,
              help="Compare with the running Slurm (scontrol show node) and list what differs; "
                   "exit 1 if anything does.")
@click.option("--filter-state", "filter_state_path", type=click.Path(path_type=Path, dir_okay=False), metavar="FILE",
              help="Also write the submit filter's initial state file (the placer's state_file): the GPU models, "
                   "so `--gres=gpu:<model>:N` works before the placer's first cycle. Nothing is held until "
                   "the placer runs; a state a running placer keeps fresh is left alone.")
@click.pass_obj
def gres_conf(app: AppContext, inventory_path: Path | None, dev_dir: str, output_dir: Path | None, fmt: str,
              check: bool, filter_state_path: Path | None) -> None:
    """Print gres.conf (AutoDetect=off, one GRES type <model>_g<minor> per GPU slot) and the slurm.conf
    NodeName fragments (Gres=..., Features=<model>) for the GPUs in our inventory.

    \b
    The types depend only on model and device minor number, never on classes, so they change
    only when hardware changes.  After a change restart slurmctld and every slurmd
    (`scontrol reconfigure` is not enough).  Model names become lower-case tokens
    ("Tesla V100-SXM2-16GB" -> v100).
    """
    inv = read_inventory_file(inventory_path) if inventory_path else read_inventory_db(app)
    if check:
        from pal_slurm.slurm.backend import read_node_gres  # only here: loading it costs every pal command

        diffs = gres_compare.compare(inv, read_node_gres())
        rows = [d.as_dict() for d in diffs]
        if fmt == "json":
            emit_json({"nodes": len(inv.nodes), "differences": rows})
        elif rows:
            emit_rows(rows, DIFF_COLUMNS, "table", title=f"Slurm differs from the inventory ({len(rows)})")
        else:
            click.echo(f"Slurm matches the inventory ({len(inv.nodes)} nodes, "
                       f"{sum(len(n.gpus) for n in inv.nodes)} GPUs)")
        if rows:
            raise click.exceptions.Exit(1)
        return
    if filter_state_path is not None:
        click.echo(write_initial_filter_state(app, inv, filter_state_path), err=True)
    gres_text = gresconf.render_gres_conf(inv, dev_dir=dev_dir)
    nodes_text = gresconf.render_nodes_conf(inv)
    if output_dir is not None:
        output_dir.mkdir(parents=True, exist_ok=True)
        for name, text in (("gres.conf", gres_text), ("nodes.conf", nodes_text)):
            tmp = output_dir / f".{name}.tmp"
            tmp.write_text(text, encoding="utf-8")
            tmp.replace(output_dir / name)
        click.echo(f"wrote {output_dir / 'gres.conf'} and {output_dir / 'nodes.conf'}", err=True)
    if fmt == "json":
        emit_json({"gres_conf": gres_text, "nodes_conf": nodes_text,
                   "nodes": gresconf.inventory_json(inv, dev_dir=dev_dir)})
    elif output_dir is None:
        click.echo("# ---- gres.conf")
        click.echo(gres_text, nl=False)
        click.echo("# ---- slurm.conf (GresTypes=gpu and these node lines)")
        click.echo(nodes_text, nl=False)
