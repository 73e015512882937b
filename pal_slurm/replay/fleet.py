"""The replay cluster's GPUs: names, Slurm inventory and the factors its jobs run by (pure).

The simulator's fleet of `nodes` x `gpus_per_node` GPUs (GPU i on node i // gpus_per_node,
node-major) becomes Slurm nodes `<prefix>01`, `<prefix>02`, ... (zero-padded, so name
order is Slurm's node order and the simulator's) with device minors 0..gpus_per_node-1.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from pal_slurm.placement.variability import GpuVariability

MODEL = "Tesla V100-SXM2-16GB"  # the Longhorn profiles' GPU; any model would do


def node_name(prefix: str, index: int, nodes: int) -> str:
    return f"{prefix}{index + 1:0{max(2, len(str(nodes)))}d}"


def name_fleet(var: Sequence[GpuVariability], node_names: Sequence[str], gpus_per_node: int) -> list[GpuVariability]:
    """The drawn GPUs with the replay cluster's node names (in Slurm's node order), device
    minors and UUIDs: GPU i on node i // gpus_per_node, minor i % gpus_per_node."""
    if len(var) != len(node_names) * gpus_per_node:
        raise ValueError(f"{len(var)} GPUs of variability for {len(node_names)} x {gpus_per_node}")
    out = []
    for i, v in enumerate(var):
        node, minor = node_names[i // gpus_per_node], i % gpus_per_node
        out.append(replace(v, node=node, minor=minor, uuid=f"GPU-replay-{node}-{minor}"))
    return out


def inventory(nodes: int, gpus_per_node: int, prefix: str, first_port: int, cpus: int = 8,
              memory_mb: int = 16000) -> dict[str, Any]:
    """The JSON inventory `pal slurm gres-conf` (and the test cluster script) reads."""
    return {"nodes": [{"name": node_name(prefix, i, nodes), "model": MODEL, "gpus": gpus_per_node,
                       "slurm": {"NodeAddr": "127.0.0.1", "Port": first_port + i, "CPUs": cpus,
                                 "RealMemory": memory_mb}}
                      for i in range(nodes)]}


def job_factors(gpus: Sequence[GpuVariability]) -> dict[str, dict[str, dict[str, float]]]:
    """node -> minor -> class -> raw PerfVar: what a job is slowed by on that GPU (the
    simulator's runtime model), for the job program to look up."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for g in gpus:
        if g.node is None or g.minor is None:
            continue
        out.setdefault(g.node, {})[str(g.minor)] = dict(g.perfvar)
    return out
