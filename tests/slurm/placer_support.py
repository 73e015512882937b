"""A classified database for the test cluster's 16 fake GPUs, and a placer wired to it.

The classified GPUs are the demo's (pal_slurm.demo.cluster_gpus: `pal demo --slurm` places on the
same fleet); the background placer is pal_slurm.placer.process's (the replay uses it too).
"""

from __future__ import annotations

from pal_slurm.demo.cluster_gpus import A_PERFVAR, NODES, make_db, records
from pal_slurm.placer.process import PlacerProcess, write_config

__all__ = ["A_PERFVAR", "NODES", "PlacerProcess", "make_db", "records", "write_config"]
