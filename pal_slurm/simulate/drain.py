"""The "Slurm after drain" baseline: the cluster left once `pal gpus drain`'s advice is taken.

Why: the honest alternative to variability-aware placement is not "do nothing" but "drain
the bad GPUs and schedule as Slurm does". A policy only earns its keep if it beats Slurm
on the cluster an operator would be left with after following the drain recommendation.

Rules, the same as the recommendation's (pal_slurm.classification.actions): a GPU whose raw PerfVar for
any compute class (A, B, C: ResNet-50 and BERT profiles) is >= ``[report] drain_perfvar``
drains its whole node, because Slurm drains nodes, not GPUs. The GPUs left keep their
factors (nobody re-classifies the fleet after a drain). Pure: clusters and traces in.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from pal_slurm.classification.actions import ActionPolicy
from pal_slurm.errors import InputError
from pal_slurm.placement.model import Cluster, GpuRef
from pal_slurm.simulate.fleets import COMPUTE_CLASSES, VariabilityModel
from pal_slurm.simulate.traces import Trace

__all__ = ["DRAIN_PERFVAR", "Drained", "check_drain_fits", "drained"]

#: The default threshold, the one `pal gpus drain` recommends by.
DRAIN_PERFVAR: float = ActionPolicy.drain_perfvar


def drained(cluster: Cluster, threshold: float = DRAIN_PERFVAR,
            classes: Sequence[str] = COMPUTE_CLASSES) -> tuple[Cluster, list[str]]:
    """The cluster without every node that has a GPU with PerfVar >= `threshold` for one of
    `classes` (those the cluster has), and the drained nodes' names in node order. GPU and
    node ids of what is left are renumbered densely, node-major; slots and UUIDs are kept."""
    if not (isinstance(threshold, (int, float)) and math.isfinite(threshold) and threshold > 0):
        raise InputError(f"drain threshold must be a positive PerfVar, got {threshold!r}")
    tables = [cluster.perfvar[c] for c in classes if c in cluster.perfvar]
    bad_nodes = {cluster.node_of[g] for table in tables for g, pv in enumerate(table) if pv >= threshold}
    keep = [n for n in range(len(cluster.node_names)) if n not in bad_nodes]
    new_node = {old: new for new, old in enumerate(keep)}
    kept_gpus = [g for n in keep for g in cluster.node_gpus[n]]
    refs = tuple(GpuRef(id=i, node=new_node[cluster.gpus[g].node], slot=cluster.gpus[g].slot,
                        uuid=cluster.gpus[g].uuid) for i, g in enumerate(kept_gpus))
    left = Cluster(node_names=tuple(cluster.node_names[n] for n in keep), gpus=refs,
                   slowdown={c: tuple(v[g] for g in kept_gpus) for c, v in cluster.slowdown.items()},
                   perfvar={c: tuple(v[g] for g in kept_gpus) for c, v in cluster.perfvar.items()})
    return left, [cluster.node_names[n] for n in sorted(bad_nodes)]


def check_drain_fits(trace: Trace, cluster_after: Cluster, drained_nodes: Sequence[str] = ()) -> None:
    """Refuse a drained cluster that cannot run every job of `trace`: a job wider than the
    GPUs left, or one that needs ``gpus_per_node`` GPUs on each of several nodes when fewer
    nodes have that many. Checked before simulating, since a job that can never start would
    stall the run instead of failing it. The message names the widest such job."""
    per_node = [len(ids) for ids in cluster_after.node_gpus]
    what = (f"after draining {len(drained_nodes)} node(s) ({', '.join(drained_nodes)})" if drained_nodes
            else "after the drain")
    for job in sorted(trace.jobs, key=lambda j: -j.num_gpus):
        if job.num_gpus > cluster_after.size:
            raise InputError(f"{trace.name}: job {job.job_id} needs {job.num_gpus} GPUs, "
                             f"{cluster_after.size} GPUs are left {what}")
        if job.gpus_per_node:
            need = math.ceil(job.num_gpus / job.gpus_per_node)
            fit = sum(1 for n in per_node if n >= job.gpus_per_node)
            if fit < need:
                raise InputError(f"{trace.name}: job {job.job_id} needs {job.num_gpus} GPUs as {need} node(s) x "
                                 f"{job.gpus_per_node}; {fit} node(s) with {job.gpus_per_node} GPUs "
                                 f"({cluster_after.size} GPUs) are left {what}")


@dataclass(frozen=True)
class Drained:
    """Any variability model, drained: a run of a SimulationSpec with this variability is
    "<policy> after drain" with no change to the runner. `inner` sees the run's rng as it
    would undrained, so the fleet drained is the fleet the other runs of the seed see."""

    inner: VariabilityModel
    threshold: float = DRAIN_PERFVAR

    def cluster(self, rng: random.Random) -> Cluster:
        return drained(self.inner.cluster(rng), self.threshold)[0]

    def drained_nodes(self, rng: random.Random) -> list[str]:
        return drained(self.inner.cluster(rng), self.threshold)[1]
