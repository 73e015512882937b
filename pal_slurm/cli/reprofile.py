"""Which nodes `pal profile submit --gpus` profiles: the flagged GPUs' or the named GPUs'."""

from __future__ import annotations

from sqlalchemy import Engine

from pal_slurm.db.engine import session_scope
from pal_slurm.db.migrate import require_current


def reprofile_nodes(engine: Engine, spec: str, asked: tuple[str, ...] | None) -> tuple[str, ...]:
    """The nodes `pal profile submit --gpus SPEC` profiles (of `asked`, when --nodes is given too):
    FLAGGED, every GPU with an open flag, in Slurm's node order; else each GPU as `pal gpus --explain`
    names it (UUID, short id, NODE:SLOT; InputError naming what would match otherwise). A GPU is
    profiled with its whole node, exclusively: a benchmark beside users' jobs measures them too."""
    if spec.strip().lower() != "flagged":
        from pal_slurm.report.data import resolve_gpu
        from pal_slurm.report.service import load_stored

        stored = load_stored(engine)
        node_of = {r.uuid: r.node for r in stored.results}
        found = [node_of[resolve_gpu(stored, g)] for g in spec.split(",") if g.strip()]
        return tuple(n for n in dict.fromkeys(found) if n and (not asked or n in asked))
    from pal_slurm.db.passive_store import flagged_nodes

    require_current(engine)
    with session_scope(engine) as session:
        return tuple(n for n in flagged_nodes(session) if not asked or n in asked)
