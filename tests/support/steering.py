"""Held Slurm jobs on four nodes of typed V100 slots, and the placer's pure steering rules run on them.

`place` runs what a cycle runs between reading Slurm and writing to it, without a backend: the
cluster view (placer/cluster_view.py), which held jobs are steered and their shapes
(placer/holds.py, shapes.py), the policy's decision, and the update Slurm is told
(placer/slurm_updates.py). `SF` gives class A one best GPU (n2, minor 3) and one worst (n4, minor 0).
"""

from __future__ import annotations

from dataclasses import replace

from pal_slurm.placement.model import PlacementContext, Snapshot
from pal_slurm.placement.policies import get_policy
from pal_slurm.placer import cluster_view, holds, shapes, slurm_updates
from pal_slurm.placement.variability import GpuVariability
from pal_slurm.slurm.model import SlurmJob, SlurmNode
from tests.support.recording_slurm import CLASSES, NOW


def node(name: str, used: tuple[int, ...] = (), *, state: str = "IDLE", flags: frozenset[str] = frozenset(),
         gpus: int = 4, cpus: int = 8, alloc_cpus: int = 0, features: frozenset[str] = frozenset({"v100"}),
         partitions: tuple[str, ...] = ("gpu",)) -> SlurmNode:
    """A node of `gpus` typed V100 slots, `used` the minors taken; state, CPUs, features and partitions as given."""
    gres = ",".join(f"gpu:v100_g{m}:1" for m in range(gpus))
    gres_used = ",".join(f"gpu:v100_g{m}:{1 if m in used else 0}(IDX:{m if m in used else 'N/A'})" for m in range(gpus))
    return SlurmNode(name=name, state=state, flags=flags, cpus=cpus, alloc_cpus=alloc_cpus, real_memory_mb=16000,
                     alloc_memory_mb=0, features=features, active_features=features, partitions=partitions,
                     gres=gres, gres_used=gres_used)


def job(job_id: str, *, tpn: str = "gres:gpu:1", tpj: str = "", nodes: int = 1, cls: str = "A", **kw: object) -> SlurmJob:
    # held the way job_submit.lua holds: a begin time ahead (reason BeginTime), the tag
    base = SlurmJob(job_id=job_id, name="j", user="u", state="PENDING", state_reason="BeginTime", priority=12345,
                    partition="gpu", submit_time=float(job_id), tres_per_node=tpn, tres_per_job=tpj,
                    admin_comment=f"pal:held class={cls} src=spank", node_count=nodes, memory_per_cpu_mb=1000,
                    begin_time=NOW + 90)
    return replace(base, **kw)  # type: ignore[arg-type]


def factors(per_gpu: dict[tuple[str, int], float]) -> dict[tuple[str, int], GpuVariability]:
    """Per-slot factors: class A's as given, class D's 1.0 everywhere."""
    return {k: GpuVariability(perfvar={"A": v, "D": 1.0}, slowdown={"A": v, "D": 1.0}) for k, v in per_gpu.items()}


FOUR = [node(f"n{i}") for i in range(1, 5)]
SF = {(f"n{i}", m): 1.0 + 0.01 * ((i * 5 + m * 3) % 7) for i in range(1, 5) for m in range(4)}
SF[("n2", 3)] = 0.90  # the best for class A
SF[("n4", 0)] = 1.20  # the worst


def place(jobs: list[SlurmJob], nodes: list[SlurmNode] = FOUR, policy: str = "pal-match"):  # type: ignore[no-untyped-def]
    """The view, the planned requests and each placed job's update, as one cycle would work them out."""
    view = cluster_view.build_view(nodes, jobs, factors(SF), CLASSES)
    held = [shapes.HeldJob(j, *holds.held_class(j)) for j in jobs if holds.is_held_by_pal(j, NOW)]
    planned = shapes.plan_requests(held, view)
    snap = Snapshot(cluster=view.cluster, free=view.free, running={}, now=0.0)
    import math

    d = get_policy(policy).place(snap, planned.requests, PlacementContext(locality_penalty=math.inf))
    return view, planned, {a.job_id: slurm_updates.update_for(planned.held[a.job_id].job, planned.shapes[a.job_id],
                                                              a.gpus, view)
                           for a in d.assignments}
