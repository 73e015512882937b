"""Clusters, jobs and snapshots for the placement policies, and the invariants every decision keeps.

`cluster` and `job` build the policies' own inputs (placement/model.py) by hand; `random_case` a
seeded random cluster, free set, running jobs and queue, whose decision `check_decision` holds to
what every policy must keep, whatever it prefers.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

from pal_slurm.placement.model import Cluster, Decision, GpuRef, JobRequest, PlacementContext, Snapshot
from pal_slurm.placement.policies import get_policy

def cluster(sizes: Sequence[int], sf: Mapping[str, Sequence[float]] | None = None,
            pv: Mapping[str, Sequence[float]] | None = None) -> Cluster:
    """Nodes of the given sizes, GPU ids node-major; sf defaults to 1.0 for class A."""
    gpus = []
    for node, size in enumerate(sizes):
        for slot in range(size):
            gpus.append(GpuRef(id=len(gpus), node=node, slot=slot))
    n = len(gpus)
    sf_t = {k: tuple(map(float, v)) for k, v in (sf or {"A": [1.0] * n}).items()}
    pv_t = {k: tuple(map(float, v)) for k, v in (pv or sf_t).items()}
    return Cluster(node_names=tuple(f"n{i}" for i in range(len(sizes))), gpus=tuple(gpus), slowdown=sf_t, perfvar=pv_t)


def job(jid: str, gpus: int, cls: str | None = "A", submit: float = 0.0, **kw) -> JobRequest:
    """A queued job of `gpus` GPUs and class `cls`."""
    return JobRequest(id=jid, gpus=gpus, job_class=cls, submit_time=submit, **kw)


def free_only(c: Cluster, free: Sequence[int]) -> Snapshot:
    """`c` with only `free` free and nothing running."""
    return Snapshot(cluster=c, free=frozenset(free))


def random_case(seed: int) -> tuple[Snapshot, list[JobRequest]]:
    """A random cluster (uneven node sizes, tied factors), free set, running jobs and queue."""
    rng = random.Random(seed)
    sizes = [rng.randint(1, 6) for _ in range(rng.randint(1, 7))]
    n = sum(sizes)
    sf = {k: [rng.choice(levels) for _ in range(n)] for k, levels in
          {"A": (0.95, 1.0, 1.1, 1.6), "B": (1.0, 1.05), "C": (0.98, 1.0, 1.03), "D": (1.0,)}.items()}
    pv = {k: [v * rng.uniform(0.97, 1.03) for v in vals] for k, vals in sf.items()}
    c = cluster(sizes, sf, pv)
    busy = [g for g in range(n) if rng.random() < 0.4]
    running: dict[str, tuple[int, ...]] = {}
    while busy:
        k = rng.randint(1, min(4, len(busy)))
        running[f"r{len(running)}"] = tuple(busy[:k])
        busy = busy[k:]
    held = {g for gs in running.values() for g in gs}
    now = rng.uniform(0, 100)
    ends = {jid: now + rng.uniform(1, 500) for jid in running if rng.random() < 0.8}
    snap = Snapshot(cluster=c, free=frozenset(set(range(n)) - held), running=running, now=now, expected_end=ends)
    queue = []
    for i in range(rng.randint(0, 9)):
        gpus = rng.randint(1, max(1, min(n, 10)))
        per = None
        if rng.random() < 0.2:
            per = rng.choice([d for d in range(1, gpus + 1) if gpus % d == 0])
        allowed = None
        if rng.random() < 0.2:
            allowed = frozenset(v for v in range(len(sizes)) if rng.random() < 0.6)
        queue.append(JobRequest(id=f"j{i}", gpus=gpus, job_class=rng.choice(["A", "B", "C", "D", None, "Q"]),
                                submit_time=float(i), gpus_per_node=per, allowed_nodes=allowed,
                                remaining_s=rng.choice([0.0, rng.uniform(1, 800)])))
    return snap, queue


def check_decision(snap: Snapshot, queue: Sequence[JobRequest], d: Decision) -> None:
    """What every decision keeps: free GPUs only, each once, the job's count and shape, its allowed nodes,
    nothing of a running job; everything placed unless a job is blocked."""
    c = snap.cluster
    jobs = {j.id: j for j in queue}
    used: list[int] = []
    seen_jobs: set[str] = set()
    for a in d.assignments:
        j = jobs[a.job_id]
        assert a.job_id not in seen_jobs
        seen_jobs.add(a.job_id)
        assert len(a.gpus) == j.gpus == len(set(a.gpus))
        assert set(a.gpus) <= snap.free, "only free GPUs"
        nodes = [c.node_of[g] for g in a.gpus]
        if j.allowed_nodes is not None:
            assert set(nodes) <= j.allowed_nodes
        if j.gpus_per_node is not None:
            counts = {v: nodes.count(v) for v in set(nodes)}
            assert len(counts) == j.gpus // j.gpus_per_node and set(counts.values()) == {j.gpus_per_node}
        assert "sf=" in a.reason
        used.extend(a.gpus)
    assert len(used) == len(set(used)), "a GPU used twice"
    assert len(used) <= len(snap.free), "capacity"
    held = {g for gs in snap.running.values() for g in gs}
    assert not held & set(used), "a running job's GPU"
    if d.blocked is None:
        assert seen_jobs == set(jobs), "nothing blocked, so everything placed"
    else:
        assert d.blocked in jobs and d.blocked not in seen_jobs


def one(snap: Snapshot, j: JobRequest, noise: float = 0.05) -> Decision:
    """pal-guard's decision for one job, with the given noise."""
    return get_policy("pal-guard").place(snap, [j], PlacementContext(noise=noise))


#: the parity fleet: four nodes of GPN GPUs, factors for every class
CLASSES = ("A", "B", "C", "D")
GPN = 4


def fleet():  # type: ignore[no-untyped-def]
    """The parity fleet: seeded factors per class, a few GPUs much slower, the perfvar close to them."""
    import random

    rng = random.Random(3)
    n = 4 * GPN
    sf = {c: [rng.choice([0.9, 1.0, 1.0, 1.1, 1.4]) for _ in range(n)] for c in CLASSES}
    pv = {c: [v * rng.uniform(0.98, 1.02) for v in vals] for c, vals in sf.items()}
    c = cluster([GPN] * 4, sf, pv)
    return c
