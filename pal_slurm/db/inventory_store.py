"""The GPU inventory as the database knows it, for `pal slurm` (gres.conf generation, checks).

Agents fill the inventory on the nodes; this is the one place that reads it back in the
node/minor/model form the Slurm configuration is generated from.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from pal_slurm.db.models import Gpu, Node
from pal_slurm.slurm.gresconf import GpuRow

__all__ = ["present_gpus"]


def present_gpus(engine: Engine) -> list[GpuRow]:
    """GPUs in state 'present', by node name and minor number (empty when none is known)."""
    stmt = (select(Node.name, Gpu.minor_number, Gpu.model, Gpu.uuid).join(Gpu.node)
            .where(Gpu.state == "present").order_by(Node.name, Gpu.minor_number))
    with Session(engine) as session:
        return [GpuRow(node=r[0], minor=r[1], model=r[2], uuid=r[3]) for r in session.execute(stmt)]
