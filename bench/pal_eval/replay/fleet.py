"""The replay cluster's GPUs: names, Slurm inventory and the factors its jobs run by (pure).

The simulator's fleet of `nodes` x `gpus_per_node` GPUs (GPU i on node i // gpus_per_node,
node-major) becomes Slurm nodes `<prefix>01`, `<prefix>02`, ... (zero-padded, so name
order is Slurm's node order and the simulator's) with device minors 0..gpus_per_node-1.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from pal_slurm.errors import InputError
from pal_slurm.placement.model import Cluster
from pal_slurm.placement.variability import GpuVariability
from pal_slurm.simulate.artifact_draw import ArtifactProfiles, draw_artifact
from pal_slurm.simulate.fleets import PerGpuVariability, parametric_from_spec

MODEL = "Tesla V100-SXM2-16GB"  # the Longhorn profiles' GPU; any model would do


#: the replay clusters' node names start so: pal-r01, pal-r02, ...
PREFIX = "pal-r"


def node_name(prefix: str, index: int, nodes: int) -> str:
    return f"{prefix}{index + 1:0{max(2, len(str(nodes)))}d}"


def node_names(nodes: int, prefix: str = PREFIX) -> list[str]:
    """Every node's name, in Slurm's order."""
    return [node_name(prefix, i, nodes) for i in range(nodes)]


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


#: the fleets a replay can run on (bench/replay.py --fleet), each stored as the database's
#: classification, so the placer places by it, the jobs sleep by it and the simulator predicts from it
FLEETS = {
    "artifact": "the PAL artifact's draw from the profiles (one random run per GPU; Longhorn seed 42 is the paper's)",
    "wide": "parametric, up to ~25 % spread for class A and 1 % of GPUs at 1.5x (simulate.fleets preset 'wide')",
    "quiet": "each GPU one real GPU of the profiles, its median run (simulate.fleets.PerGpuVariability)",
}


def variability_of(cluster: Cluster) -> list[GpuVariability]:
    """A simulator `Cluster`'s GPUs as GpuVariability rows, in GPU order (what name_fleet takes)."""
    classes = list(cluster.perfvar)
    return [GpuVariability(perfvar={c: float(cluster.perfvar[c][g]) for c in classes},
                           slowdown={c: float(cluster.slowdown[c][g]) for c in classes})
            for g in range(len(cluster.gpus))]


def draw_fleet(kind: str, profiles: ArtifactProfiles, nodes: int, gpus_per_node: int, seed: int) -> list[GpuVariability]:
    """The replay's GPUs for fleet `kind` (see FLEETS), reproducible from `seed`."""
    if kind == "artifact":
        return draw_artifact(profiles, nodes * gpus_per_node, random.Random(seed))
    if kind == "wide":
        return variability_of(parametric_from_spec("wide", nodes, gpus_per_node, seed).fleet)
    if kind == "quiet":
        return variability_of(PerGpuVariability(profiles, nodes, gpus_per_node).cluster(random.Random(seed)))
    raise InputError(f"unknown fleet {kind!r}: expected one of {', '.join(FLEETS)}")
