"""`pal gpus drain`: drain the nodes of the outlier GPUs graded `drain`, through scontrol."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from pal_slurm.cli.context import AppContext
from pal_slurm.cli.filters import expand_hostlist, select
from pal_slurm.cli.numbers import ident
from pal_slurm.errors import PalError

if TYPE_CHECKING:
    from pal_slurm.slurm.cli_backend import CliBackend
    from pal_slurm.slurm.model import SlurmNode


@click.command("drain")
@click.option("--apply", "apply", is_flag=True,
              help="Run scontrol (default: only print what would be done).")
@click.option("--node", "nodes", multiple=True, metavar="HOSTLIST",
              help="Only these nodes: a name or a Slurm hostlist (c006-[011-012]); repeatable.")
@click.option("--version", "version", type=ident(), metavar="N", help="Classification version [default: latest].")
@click.pass_obj
def drain_cmd(app: AppContext, apply: bool, nodes: tuple[str, ...], version: int | None) -> None:
    """Drain the nodes of the outlier GPUs graded `drain` (severely slow on a compute benchmark,
    or failing ECC/retired pages), with `scontrol update NodeName=N State=DRAIN Reason="pal: ..."`.

    A dry run unless --apply; one line per node. Only nodes Slurm lists by that exact name are
    drained (never `ALL` or a NodeSet); a node already drained or down keeps its state and its
    reason. Nodes of GPUs graded `placement` or `re-profile`, and unknown nodes, are never
    drained. Resume a node with `scontrol update NodeName=N State=RESUME` after its diagnostics pass."""
    from pal_slurm.classification.actions import drain_plan
    from pal_slurm.report.service import load_actions
    from pal_slurm.slurm.cli_backend import CliBackend

    actions = load_actions(app.engine, app.cfg, version)
    nodes = _nodes_asked(app, nodes)
    full = drain_plan(actions)
    plan = [(n, reason) for n, reason in full if not nodes or n in nodes]
    for n in sorted(set(nodes) - {p[0] for p in full}):
        click.echo(f"{n}: no GPU there is graded `drain`; not drained")
    if not plan:
        click.echo("nothing to drain: no outlier GPU is graded `drain`" + (" on those nodes" if nodes else ""))
        return
    slurm = CliBackend(timeout=app.cfg.placer.command_timeout_s)
    slurm_nodes = _slurm_nodes(slurm, apply)
    failed = sum(not _drain_node(slurm, slurm_nodes, node_name, reason, apply) for node_name, reason in plan)
    if not apply:
        click.echo("dry run: nothing changed; add --apply to drain these nodes", err=True)
    if failed:
        raise PalError(f"{failed} of {len(plan)} node(s) not drained (see above)")


def _nodes_asked(app: AppContext, nodes: tuple[str, ...]) -> tuple[str, ...]:
    """The node names --node gives, hostlists expanded, each once; a node the database does
    not know is a typo: said (InputError) before anything is drained."""
    if nodes:
        from pal_slurm.report.service import fleet_names

        known, _models = fleet_names(app.engine)
        select([{"node": n} for n in known], nodes, ())
    return tuple(dict.fromkeys(n for expr in nodes for n in expand_hostlist(expr)))


def _slurm_nodes(slurm: CliBackend, apply: bool) -> dict[str, SlurmNode] | None:
    """Slurm's nodes by their own names (NodeName= also takes ALL, NodeSets and hostlists, so
    only a name Slurm lists is drained), or None on a dry run whose list could not be read."""
    try:
        return {n.name: n for n in slurm.nodes()}
    except PalError as exc:
        if apply:
            raise PalError(f"Slurm's node list not read ({exc}); nothing drained") from exc
        click.echo(f"pal: warning: Slurm's node list not read ({exc}); the plan is not checked against it",
                   err=True)
        return None


def _drain_node(slurm: CliBackend, slurm_nodes: dict[str, SlurmNode] | None, node_name: str, reason: str,
                apply: bool) -> bool:
    """Drain one node of the plan (or say what would be run), one line about it; False when it
    failed (a node Slurm does not know, or scontrol's error)."""
    from pal_slurm.placer.writer import drain

    shown = f'scontrol update NodeName={node_name} State=DRAIN Reason="{reason}"'
    known = None if slurm_nodes is None else slurm_nodes.get(node_name)
    if slurm_nodes is not None and known is None:
        click.echo(f"pal: error: {node_name}: not a node Slurm knows; not drained", err=True)
        return False
    if known is not None and known.drained_or_down:
        state = "+".join([known.state, *sorted(known.flags)])
        click.echo(f"{node_name}: already {state}; its state and reason are left as they are")
        return True
    if not apply:
        click.echo(f"would run: {shown}")
        return True
    try:
        drain(slurm, node_name, reason)
    except PalError as exc:
        click.echo(f"pal: error: {node_name}: not drained: {exc}", err=True)
        return False
    click.echo(f"drained {node_name}: {reason}")
    return True
