"""Per-GPU variability from the stored classification: the one loader the simulator
(`pal simulate --variability db`) and the placement daemon both read.

Why here: the model itself (pal_slurm.placement.variability) is pure; this adapter maps
the latest (or a given) classification run to it, with each GPU's node and device minor
number (which names its Slurm GRES slot), so what the daemon places by and what the
simulator credits come from the same rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from pal_slurm.db import classification_store as cstore
from pal_slurm.db.models import Gpu
from pal_slurm.errors import PalError
from pal_slurm.placement.variability import GpuVariability, from_classification


@dataclass(frozen=True)
class StoredVariability:
    """The GPUs of one classification run (sorted by model, node, UUID) and its version."""

    version: int
    gpus: tuple[GpuVariability, ...]


def load_variability(session: Session, classes: Sequence[str], version: int | None = None) -> StoredVariability:
    """The variability of every classified GPU for `classes`; PalError when there is no
    classification (or not that version). An unprofiled GPU gets its class's worst factor
    (see from_classification)."""
    run = cstore.get_run(session, version)
    if run is None:
        if version is None:
            raise PalError("no classification yet: run `pal classify` first")
        raise PalError(f"classification version {version} does not exist")
    stored = cstore.load_classification(session, run)
    minors = {uuid: minor for uuid, minor in session.execute(select(Gpu.uuid, Gpu.minor_number))}
    rows: dict[str, dict[str, Any]] = {}
    by_bench = {(r.uuid, r.benchmark): r for r in stored.results}
    for r in stored.results:
        rows.setdefault(r.uuid, {"uuid": r.uuid, "node": r.node, "model": r.model, "minor": minors.get(r.uuid),
                                 "classes": {}})
    for uuid, row in rows.items():
        for job_class, bench in stored.job_classes.items():
            res = by_bench.get((uuid, bench))
            if res is not None and res.profiled:
                row["classes"][job_class] = {"slowdown": res.slowdown, "perfvar": res.perfvar}
    ordered = sorted(rows.values(), key=lambda x: (x["model"], x["node"] or "", x["uuid"]))
    return StoredVariability(version=stored.version, gpus=tuple(from_classification(ordered, classes)))
