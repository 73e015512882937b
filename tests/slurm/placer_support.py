"""A classified database for the test cluster's 16 fake GPUs, and a placer wired to it.

The code lives in pal_slurm.demo_slurm (`pal demo --slurm` uses the same database and
placer); this module keeps the tests' import path.
"""

from __future__ import annotations

from pal_slurm.demo_slurm import (
    A_PERFVAR,
    NODES,
    PlacerProcess,
    make_db,
    records,
    write_config,
)

__all__ = ["A_PERFVAR", "NODES", "PlacerProcess", "make_db", "records", "write_config"]
