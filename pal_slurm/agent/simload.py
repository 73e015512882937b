"""Load for the simulated backend: what the jobs in the mapping directory would put on their GPUs.

Only for `pal agent --backend sim` (tests, the overhead bench, trying the agent out): the
simulated fleet's telemetry needs a load per GPU, and on a real node that load comes from
the jobs. Here a job's load comes from its name when it names a known workload (so a test
can submit "resnet50" and get a compute-bound profile), else from a stable hash of its
id, and idle GPUs idle. The loads follow the benchmarks' compute fractions in
`pal_slurm.gpu.sim_specs` (ResNet-50 0.8, BERT 0.5, PageRank 0.1), so the learned classes come
out as PAL's profiles would: resnet -> A, bert -> B, vgg -> C, pagerank -> D.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

from pal_slurm.agent.jobmap import JobMapEntry

__all__ = ["WORKLOAD_LOADS", "SimLoad", "job_load"]

WORKLOAD_LOADS: tuple[tuple[str, float], ...] = (
    ("resnet", 0.92), ("sgemm", 0.98), ("gemm", 0.98),
    ("bert", 0.58), ("gpt", 0.60), ("dcgan", 0.55),
    ("vgg", 0.36), ("pointnet", 0.30),
    ("pagerank", 0.14), ("io", 0.08),
)
_HASHED = (0.92, 0.58, 0.36, 0.14)


def job_load(entry: JobMapEntry) -> float:
    """0..1: the named workload's load, else one of four by a hash of the job id (stable)."""
    name = (entry.name or "").lower()
    for key, load in WORKLOAD_LOADS:
        if key in name:
            return load
    digest = hashlib.sha256(entry.job_id.encode()).digest()
    return _HASHED[digest[0] % len(_HASHED)]


class SimLoad:
    """`load(index, t)` for SimBackend; the agent calls `assign` whenever its jobs change."""

    def __init__(self) -> None:
        self._by_index: dict[int, float] = {}

    def assign(self, jobs_by_index: Mapping[int, JobMapEntry]) -> None:
        self._by_index = {index: job_load(entry) for index, entry in jobs_by_index.items()}

    def __call__(self, index: int, t: float) -> float:
        return self._by_index.get(index, 0.0)
