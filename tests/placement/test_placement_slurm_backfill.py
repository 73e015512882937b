"""slurm-backfill, the Slurm-as-shipped baseline: cons_tres's variability-blind first
fit, sched/backfill's EASY reservation on time limits, and never waiting for better GPUs."""

from __future__ import annotations

from pal_slurm.placement.index import cluster_index
from pal_slurm.placement.model import PlacementContext, Snapshot
from pal_slurm.placement.policies import get_policy
from tests.support.placement_cases import cluster, free_only, job

SLOW, FAST = 1.5, 0.9


def place(snap: Snapshot, queue, name: str = "slurm-backfill"):  # type: ignore[no-untyped-def]
    return get_policy(name).place(snap, queue, PlacementContext())


def test_first_fit_takes_the_first_node_that_fits_and_its_lowest_gpus_however_slow() -> None:
    # n0: GPUs 0-3 all slow; n1: all fast. A variability-aware policy takes n1.
    c = cluster([4, 4], {"A": [SLOW] * 4 + [FAST] * 4})
    d = place(Snapshot.empty(c), [job("a", 2, max_nodes=1)])
    assert d.as_dict() == {"a": (0, 1)}
    assert place(Snapshot.empty(c), [job("a", 2, max_nodes=1)], "pal").as_dict() == {"a": (4, 5)}
    # n0 has only one free: the first node with two
    d = place(free_only(c, [3, 5, 6, 7]), [job("b", 2, max_nodes=1)])
    assert d.as_dict() == {"b": (5, 6)}


def test_a_job_that_may_span_nodes_takes_one_node_when_one_fits_else_the_fewest() -> None:
    c = cluster([4, 4, 4])
    assert place(free_only(c, [0, 4, 5, 6, 8]), [job("a", 3)]).as_dict() == {"a": (4, 5, 6)}
    # no node has 4: the emptiest nodes first (n1 with 3, then n0)
    assert place(free_only(c, [0, 4, 5, 6, 8]), [job("a", 4)]).as_dict() == {"a": (0, 4, 5, 6)}
    assert place(free_only(c, [0, 1, 4, 5, 8, 9]), [job("a", 4, gpus_per_node=2)]).as_dict() == \
        {"a": (0, 1, 4, 5)}


def test_easy_backfill_on_time_limits_keeps_the_heads_reservation() -> None:
    """Head: 4 GPUs on one node, none free until r1 ends at t=100 (its limit). A job that ends by
    then (limit 50) starts on the free GPUs; one with limit 500 would hold the head's reserved
    GPUs past t=100 and waits; a job of the same length off the reserved node starts."""
    c = cluster([4, 4])
    snap = Snapshot(cluster=c, free=frozenset({0, 1, 4}), running={"r1": (2, 3), "r2": (5, 6, 7)}, now=0.0,
                    expected_end={"r1": 100.0, "r2": 1000.0})
    queue = [job("head", 4, max_nodes=1, remaining_s=300), job("short", 2, max_nodes=1, remaining_s=50, submit=1),
             job("long", 2, max_nodes=1, remaining_s=500, submit=2)]
    d = place(snap, queue)
    assert d.blocked == "head" and d.as_dict() == {"short": (0, 1)}
    queue = [job("head", 4, max_nodes=1, remaining_s=300), job("long", 1, max_nodes=1, remaining_s=500, submit=2)]
    assert place(snap, queue).as_dict() == {"long": (4,)}, "off the head's node (n0): starts now"


def test_the_estimate_is_the_time_limit_whatever_the_gpus() -> None:
    from pal_slurm.placement.easy import EasyBackfill

    c = cluster([2], {"A": [SLOW, SLOW]})
    ix = cluster_index(c)
    slurm, pal = get_policy("slurm-backfill"), get_policy("pal-backfill")
    assert isinstance(slurm, EasyBackfill) and isinstance(pal, EasyBackfill)
    assert slurm.estimate(ix, job("a", 1, remaining_s=600), (0,), 1.7) == 600.0
    assert pal.estimate(ix, job("a", 1, remaining_s=600), (0,), 1.7) == 900.0


def test_it_never_waits_for_better_gpus() -> None:
    """The slow GPU is free, the fast one frees in 10 s: pal-backfill waits, Slurm starts now."""
    c = cluster([1, 1], {"A": [SLOW, FAST]})
    snap = Snapshot(cluster=c, free=frozenset({0}), running={"r": (1,)}, now=0.0, expected_end={"r": 10.0})
    queue = [job("a", 1, remaining_s=3600)]
    d = place(snap, queue)
    assert d.as_dict() == {"a": (0,)} and d.waits == ()
    d = place(snap, queue, "pal-backfill")
    assert d.as_dict() == {} and [w.job_id for w in d.waits] == ["a"]
