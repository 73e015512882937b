"""slurm-reserving, sched/backfill as Slurm plans it: every waiting job it tests that cannot
start gets a reservation of whole nodes for its time limit, and a later job starts only on
nodes no reservation holds during its own limit. Set against slurm-backfill (EASY: the
head's GPUs only) on the same snapshots."""

from __future__ import annotations

from pal_slurm.placement.model import PlacementContext, Snapshot
from pal_slurm.placement.policies import get_policy
from tests.support.placement_cases import cluster, job


def place(snap: Snapshot, queue, name: str = "slurm-reserving"):  # type: ignore[no-untyped-def]
    return get_policy(name).place(snap, queue, PlacementContext())


def two_nodes_head_waiting() -> Snapshot:
    """n0: GPUs 0-2 busy until t=100, GPU 3 free; n1: all busy until t=1000."""
    c = cluster([4, 4])
    return Snapshot(cluster=c, free=frozenset({3}), running={"r1": (0, 1, 2), "r2": (4, 5, 6, 7)}, now=0.0,
                    expected_end={"r1": 100.0, "r2": 1000.0})


def test_a_reserved_node_is_closed_to_later_jobs_where_easy_keeps_off_only_the_heads_gpus() -> None:
    # the head (2 GPUs on one node, limit 500) can start at t=100 on n0's GPUs 0-1. EASY reserves
    # those two GPUs and starts a long 1-GPU job on the free GPU 3; Slurm reserves n0 for
    # [100, 600), which the long job's limit overlaps, so it waits.
    snap = two_nodes_head_waiting()
    queue = [job("head", 2, max_nodes=1, remaining_s=500), job("long", 1, max_nodes=1, remaining_s=1000, submit=1)]
    assert place(snap, queue, "slurm-backfill").as_dict() == {"long": (3,)}
    d = place(snap, queue)
    assert d.as_dict() == {} and d.blocked == "head"


def test_a_job_that_ends_before_the_reservation_begins_starts_on_the_reserved_node() -> None:
    snap = two_nodes_head_waiting()
    queue = [job("head", 2, max_nodes=1, remaining_s=500), job("short", 1, max_nodes=1, remaining_s=50, submit=1)]
    assert place(snap, queue).as_dict() == {"short": (3,)}


def test_every_waiting_job_gets_a_reservation_not_only_the_head() -> None:
    # n0: GPUs 0-2 busy until t=100, GPU 3 free; n1: GPUs 4-6 until t=200, GPU 7 free; n2 busy
    # until t=1000. The head (2 GPUs, limit 500) is reserved n0 for [100, 600); the second job
    # (the same) n1 for [200, 700). A long 1-GPU job allowed on n1 only would keep off the
    # head's node, and EASY, which reserves for the head alone, starts it on GPU 7; Slurm's
    # reservation for the second job holds n1, so it waits -- and starts once that job is gone.
    c = cluster([4, 4, 4])
    snap = Snapshot(cluster=c, free=frozenset({3, 7}), running={"r1": (0, 1, 2), "r2": (4, 5, 6),
                                                                 "r3": (8, 9, 10, 11)}, now=0.0,
                    expected_end={"r1": 100.0, "r2": 200.0, "r3": 1000.0})
    head = job("head", 2, max_nodes=1, remaining_s=500)
    second = job("second", 2, max_nodes=1, remaining_s=500, submit=1)
    only_n1 = job("only-n1", 1, max_nodes=1, remaining_s=1000, submit=2, allowed_nodes=frozenset({1}))
    assert place(snap, [head, second, only_n1], "slurm-backfill").as_dict() == {"only-n1": (7,)}
    d = place(snap, [head, second, only_n1])
    assert d.as_dict() == {} and d.blocked == "head"
    assert place(snap, [head, only_n1]).as_dict() == {"only-n1": (7,)}


def test_without_contention_it_starts_jobs_in_order_on_first_fit_as_slurm_backfill_does() -> None:
    c = cluster([4, 4, 4])
    queue = [job("a", 2, max_nodes=1, remaining_s=100), job("b", 4, max_nodes=1, remaining_s=50, submit=1),
             job("c", 8, gpus_per_node=4, remaining_s=70, submit=2)]
    snap = Snapshot(cluster=c, free=frozenset(range(12)), running={}, now=0.0)
    assert place(snap, queue).as_dict() == place(snap, queue, "slurm-backfill").as_dict() == \
        {"a": (0, 1), "b": (4, 5, 6, 7)}


def test_a_running_job_without_an_expected_end_never_frees_its_gpus_in_the_plan() -> None:
    c = cluster([4])
    snap = Snapshot(cluster=c, free=frozenset({3}), running={"r": (0, 1, 2)}, now=0.0)
    d = place(snap, [job("big", 4, max_nodes=1, remaining_s=100), job("one", 1, max_nodes=1, remaining_s=10_000)])
    assert d.blocked == "big" and d.as_dict() == {"one": (3,)}
