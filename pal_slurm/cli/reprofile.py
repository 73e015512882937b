"""What `pal profile submit --gpus` profiles: the flagged GPUs or the named ones, each with its whole
node, or, for a GPU out of service (`pal gpus quarantine`), in its own slot."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import Engine

from pal_slurm.db.engine import session_scope
from pal_slurm.db.migrate import require_current
from pal_slurm.slurm.quarantine_model import Holder


@dataclass(frozen=True)
class Target:
    """A GPU to re-profile: its UUID, node and device minor (None where no import placed it)."""

    uuid: str
    node: str
    minor: int | None


def reprofile_targets(engine: Engine, spec: str, asked: Sequence[str] | None) -> tuple[Target, ...]:
    """The GPUs `pal profile submit --gpus SPEC` re-profiles (on the nodes `asked`, when --nodes is
    given too): FLAGGED, every GPU with an open flag, in Slurm's node order; else each GPU as `pal
    gpus --explain` names it (UUID, short id, NODE:SLOT; InputError naming what would match)."""
    if spec.strip().lower() != "flagged":
        from pal_slurm.report.data import resolve_gpu
        from pal_slurm.report.service import load_stored

        stored = load_stored(engine)
        where = {r.uuid: (r.node, r.slot) for r in stored.results}
        found = [Target(u, *where[u]) for u in dict.fromkeys(resolve_gpu(stored, g) for g in spec.split(",")
                                                             if g.strip()) if where[u][0]]
    else:
        from pal_slurm.db.passive_store import flagged_slots

        require_current(engine)
        with session_scope(engine) as session:
            found = [Target(*row) for row in flagged_slots(session)]
    return tuple(t for t in found if not asked or t.node in asked)


@dataclass(frozen=True)
class ReprofilePlan:
    """Where each target is profiled: `nodes` whole (exclusive job), `in_slot` in the slot a
    running holder keeps out of service, none at all where a holder waits for its slot
    (`waiting`) or a holder keeps another slot of the node (`blocked`: an exclusive job could
    never start there; its GPUs wait for the release)."""

    nodes: tuple[str, ...]
    in_slot: tuple[tuple[Target, Holder], ...]
    waiting: tuple[tuple[Target, Holder], ...]
    blocked: tuple[tuple[Target, Holder], ...]


def plan_reprofile(targets: Sequence[Target], holders: Sequence[Holder]) -> ReprofilePlan:
    """Split `targets` by the quarantines Slurm shows (pure; the plan's doc)."""
    by_slot: dict[tuple[str, int], Holder] = {}
    for h in holders:  # during a hand-over a slot has two holders: the one on it counts
        key = (h.slot.node, h.slot.minor)
        if key not in by_slot or (h.holds and not by_slot[key].holds):
            by_slot[key] = h
    by_node: dict[str, Holder] = {}
    for h in holders:
        by_node.setdefault(h.slot.node, h)
    nodes: list[str] = []
    in_slot, waiting, blocked = [], [], []
    for t in targets:
        mine = by_slot.get((t.node, t.minor)) if t.minor is not None else None
        if mine is not None:
            (in_slot if mine.holds else waiting).append((t, mine))
        elif t.node in by_node:
            blocked.append((t, by_node[t.node]))
        elif t.node not in nodes:
            nodes.append(t.node)
    return ReprofilePlan(tuple(nodes), tuple(in_slot), tuple(waiting), tuple(blocked))
