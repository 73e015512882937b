"""`--node` and `--model` as every admin view takes them: repeatable, nodes as Slurm hostlist
expressions (`c006-[011-012]`, expanded by ClusterShell's NodeSet), and a filter that matches
nothing is an error that names what matched nothing and what exists, never an empty table."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import click

from pal_slurm.errors import InputError

node_option = click.option(
    "--node", "nodes", multiple=True, metavar="HOSTLIST",
    help="Only GPUs on these nodes: a name or a Slurm hostlist (c006-[011-012]); repeatable.")
model_option = click.option("--model", "models", multiple=True, metavar="NAME",
                            help="Only GPUs of this model; repeatable.")

#: how many names an error lists before it only counts them
_SHOWN = 200


def fold(names: Iterable[str]) -> str:
    """Node names as one Slurm hostlist (c001-[001-012],c002-001), cut at ~200 characters."""
    from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet

    names = sorted(set(names))
    if not names:
        return "none"
    try:
        text = str(NodeSet.fromlist(names, resolver=RESOLVER_NOGROUP))
    except Exception:  # noqa: BLE001 - a name NodeSet cannot fold is still a name
        text = ",".join(names)
    if len(text) > _SHOWN:
        text = text[:_SHOWN].rsplit(",", 1)[0] + ",..."
    return f"{text} ({len(names)})"


def expand_hostlist(expr: str) -> list[str]:
    """The node names one --node argument stands for; a usage error names a malformed one."""
    from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet, NodeSetException
    from ClusterShell.RangeSet import RangeSetException

    text = expr.strip()
    if not text:
        raise click.BadParameter("an empty node name", param_hint="--node")
    try:
        names = list(NodeSet(text, resolver=RESOLVER_NOGROUP))
    except (NodeSetException, RangeSetException) as exc:
        raise click.BadParameter(f"{expr!r} is not a node name or hostlist expression ({exc})",
                                 param_hint="--node") from None
    if not names:
        raise click.BadParameter(f"{expr!r} names no node", param_hint="--node")
    return names


def _close(value: str, names: Sequence[str]) -> str:
    """` (did you mean X?)` for a near miss: case, O for 0, l for 1, one character off."""
    def norm(text: str) -> str:
        return text.lower().replace("o", "0").replace("l", "1")

    by_norm = {norm(n): n for n in names}
    if norm(value) in by_norm:
        return f" (did you mean {by_norm[norm(value)]}?)"
    hit = difflib.get_close_matches(value, list(names), n=1, cutoff=0.8)
    return f" (did you mean {hit[0]}?)" if hit else ""


def select(rows: Sequence[Mapping[str, Any]], nodes: Sequence[str], models: Sequence[str], *,
           known_nodes: Iterable[str] | None = None, known_models: Iterable[str] | None = None,
           node_of: Callable[[Mapping[str, Any]], str | None] = lambda r: r.get("node"),
           model_of: Callable[[Mapping[str, Any]], str | None] = lambda r: r.get("model"),
           what: str = "GPU", hint: str = "") -> list[Mapping[str, Any]]:
    """The rows on `nodes` (hostlist expressions) and of `models`.

    Each argument must name something that exists: `known_nodes` / `known_models` (default:
    the rows' own); one that does not is an InputError listing what exists. Names inside a
    matching hostlist that are not in the fleet are said on stderr. When both filters match
    something but nothing together, that is an error too. `hint` is added to an error (e.g.
    that identities without a slot are left out)."""
    all_nodes = sorted({n for n in (known_nodes if known_nodes is not None else
                                    (node_of(r) for r in rows)) if n})
    all_models = sorted({m for m in (known_models if known_models is not None else
                                     (model_of(r) for r in rows)) if m})
    node_set = set(all_nodes)
    wanted_nodes: set[str] | None = None
    if nodes:
        wanted_nodes = set()
        for expr in nodes:
            names = expand_hostlist(expr)
            found = [n for n in names if n in node_set]
            if not found:
                shown = expr if len(names) == 1 else f"{expr} ({len(names)} names)"
                close = _close(names[0], all_nodes) if len(names) == 1 else ""
                raise InputError(f"no {what} on node {shown}{close}; nodes: {fold(all_nodes)}{hint}")
            missing = [n for n in names if n not in node_set]
            if missing:
                click.echo(f"pal: warning: --node {expr}: no {what} on {fold(missing)}", err=True)
            wanted_nodes.update(found)
    wanted_models: set[str] | None = None
    if models:
        wanted_models = set()
        for name in models:
            if name not in all_models:
                raise InputError(f"no {what} of model {name!r}{_close(name, all_models)}; models: "
                                 f"{', '.join(all_models) or 'none'}{hint}")
            wanted_models.add(name)
    out = [r for r in rows if (wanted_nodes is None or node_of(r) in wanted_nodes)
           and (wanted_models is None or model_of(r) in wanted_models)]
    if not out and rows and wanted_nodes is not None and wanted_models is not None and known_nodes is None:
        raise InputError(f"no {what} on {fold(wanted_nodes)} is of model {', '.join(sorted(wanted_models))}{hint}")
    return out
