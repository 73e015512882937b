"""Slurm hostlists (`n[1-3],gpu7`) as node names (pure).

Why a module of its own: a job's node list, its required nodes and a placement read back all
come as hostlists, and the placer compares them name by name. ClusterShell parses the bracket
forms; the plain comma list a placed job reads back as is split here, which is most of them.
"""

from __future__ import annotations

from functools import lru_cache

from ClusterShell.NodeSet import NodeSet, NodeSetParseError

from pal_slurm.slurm.gresconf import natural_key


def expand_nodes(expr: str) -> list[str]:
    """Node names of a Slurm hostlist (`n[1-3],gpu7`), in order; none for an empty field
    (squeue writes `(null)` or `None` there)."""
    if not expr or expr in ("(null)", "None"):
        return []
    return list(_expand(expr))


@lru_cache(maxsize=4096)
def _expand(expr: str) -> tuple[str, ...]:
    if not any(c in expr for c in "[@ "):
        # a plain list (what a placed job's NodeList reads back as): no NodeSet parse,
        # which costs more than the rest of verifying a placement
        return tuple(sorted(dict.fromkeys(n for n in expr.split(",") if n), key=natural_key))
    try:
        return tuple(NodeSet(expr))
    except NodeSetParseError:
        return tuple(n for n in expr.split(",") if n)
