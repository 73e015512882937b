"""Anchoring factors to the typical GPU divides every factor of a class by
one constant. docs/classification.md says the placement policies then decide exactly as
before, because they compare factors only with each other (ranks, and PAL's sf against
lambda * sf); this checks that claim on seeded random clusters and queues.
"""

from __future__ import annotations

import random

import pytest

from pal_slurm.placement.model import Cluster, GpuRef, JobRequest, PlacementContext, Snapshot
from pal_slurm.placement.policies import get_policy, policy_names

CLASSES = ("A", "B", "C", "D")


def random_case(seed: int) -> tuple[Cluster, dict[str, tuple[float, ...]], frozenset[int], list[JobRequest]]:
    rng = random.Random(seed)
    sizes = [rng.choice((2, 4, 4, 8)) for _ in range(rng.randint(3, 7))]
    gpus = [GpuRef(id=i, node=n, slot=s) for i, (n, s) in enumerate((n, s) for n, k in enumerate(sizes) for s in range(k))]
    levels = (0.93, 0.971, 1.0, 1.03, 1.083, 1.2)
    sf = {c: tuple(rng.choice(levels) for _ in gpus) for c in CLASSES}
    pv = {c: tuple(v * rng.uniform(0.99, 1.01) for v in sf[c]) for c in CLASSES}
    cluster = Cluster(node_names=tuple(f"n{i}" for i in range(len(sizes))), gpus=tuple(gpus), slowdown=sf, perfvar=pv)
    free = frozenset(g.id for g in gpus if rng.random() < 0.7)
    queue = [JobRequest(id=f"j{i}", gpus=rng.choice((1, 1, 2, 4, 8)), job_class=rng.choice(CLASSES),
                        submit_time=float(i)) for i in range(rng.randint(3, 12))]
    return cluster, sf, free, queue


#: the policies that read factors at all (packed, random and slurm-backfill are blind to them)
AWARE = ("pm-first", "pal", "pal-backfill", "pal-match")


def test_the_aware_policies_are_registered() -> None:
    assert set(AWARE) <= set(policy_names())


@pytest.mark.parametrize("policy", AWARE)
@pytest.mark.parametrize("scale", [0.985, 1 / 0.971])
def test_dividing_every_factor_by_one_constant_changes_no_decision(policy: str, scale: float) -> None:
    for seed in range(10):
        cluster, sf, free, queue = random_case(seed)
        scaled = Cluster(node_names=cluster.node_names, gpus=cluster.gpus,
                         slowdown={c: tuple(v * scale for v in vs) for c, vs in sf.items()}, perfvar=cluster.perfvar)
        got = [get_policy(policy).place(Snapshot(cluster=c, free=free), queue,
                                        PlacementContext(locality_penalty=1.7, rng=random.Random(seed)))
               for c in (cluster, scaled)]
        assert got[0].as_dict() == got[1].as_dict(), seed
        assert got[0].blocked == got[1].blocked
        assert [(w.job_id, w.gpus) for w in got[0].waits] == [(w.job_id, w.gpus) for w in got[1].waits]
