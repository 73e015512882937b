"""pal-backfill and pal-match: EASY backfilling with the head's GPUs reserved, waiting for
better GPUs, and class matching, on hand-built snapshots whose right answer is known."""

from __future__ import annotations

import random

import pytest

from pal_slurm.placement.model import Decision, JobRequest, PlacementContext, Snapshot
from pal_slurm.placement.policies import get_policy
from tests.support.placement_cases import cluster, job, random_case

OURS = ("pal-backfill", "pal-match")


def place(name: str, snap: Snapshot, queue: list[JobRequest], lam: float = 1.7) -> Decision:
    return get_policy(name).place(snap, queue, PlacementContext(locality_penalty=lam))


@pytest.mark.parametrize("name", OURS)
def test_a_job_that_ends_before_the_head_can_start_is_backfilled_a_longer_one_is_not(name: str) -> None:
    c = cluster([4, 4])
    snap = Snapshot(cluster=c, free=frozenset(range(4)), running={"r": (4, 5, 6, 7)}, now=0.0,
                    expected_end={"r": 100.0})
    queue = [job("head", 8, remaining_s=10.0), job("short", 1, submit=1, remaining_s=60.0),
             job("long", 1, submit=2, remaining_s=500.0)]
    d = place(name, snap, queue)
    assert d.as_dict() == {"short": (0,)} and d.blocked == "head"
    assert "ends by its expected start (60 <= 100)" in d.assignments[0].reason


@pytest.mark.parametrize("name", OURS)
def test_a_long_job_is_backfilled_only_off_the_heads_expected_gpus(name: str) -> None:
    # n2 is the worst for class A, so the 10-GPU head expects n0, n1 and n2's first two GPUs
    # (PM-First, stable in id order) once r ends at 100
    c = cluster([4, 4, 4], {"A": [1.0] * 8 + [1.2] * 4})
    snap = Snapshot(cluster=c, free=frozenset([0, 1, 2, 3, 8, 9, 10, 11]), running={"r": (4, 5, 6, 7)},
                    now=0.0, expected_end={"r": 100.0})
    queue = [job("head", 10, remaining_s=10.0), job("long", 2, submit=1, remaining_s=500.0)]
    d = place(name, snap, queue)
    assert d.blocked == "head"
    assert d.as_dict() == {"long": (10, 11)}
    assert "GPUs it will not need" in d.assignments[0].reason
    assert place("pal", snap, queue[1:]).as_dict() == {"long": (0, 1)}


@pytest.mark.parametrize("name", OURS)
def test_jobs_without_an_estimate_only_use_unreserved_gpus(name: str) -> None:
    c = cluster([4, 4])
    snap = Snapshot(cluster=c, free=frozenset(range(4)), running={"r": (4, 5, 6, 7)}, now=0.0,
                    expected_end={"r": 100.0})
    d = place(name, snap, [job("head", 8, remaining_s=10.0), job("unknown", 1, submit=1)])
    assert d.assignments == () and d.blocked == "head"


@pytest.mark.parametrize("name", OURS)
def test_a_head_that_can_never_fit_holds_nothing(name: str) -> None:
    c = cluster([4])
    d = place(name, Snapshot.empty(c), [job("huge", 6), job("small", 2, submit=1)])
    assert d.as_dict() == {"small": (0, 1)} and d.blocked == "huge"


@pytest.mark.parametrize("name", OURS)
def test_a_running_job_without_an_expected_end_never_frees_its_gpus(name: str) -> None:
    c = cluster([4, 4])
    snap = Snapshot(cluster=c, free=frozenset(range(4)), running={"r": (4, 5, 6, 7)}, now=0.0)
    # the head cannot start until r ends, which is never as far as we know: short jobs go
    # ahead only off the GPUs it would take then, and it would take them all
    d = place(name, snap, [job("head", 8, remaining_s=10.0), job("short", 1, submit=1, remaining_s=1.0)])
    assert d.assignments == () and d.blocked == "head"


@pytest.mark.parametrize("name", OURS)
def test_backfill_looks_no_further_than_its_lookahead(name: str) -> None:
    la = get_policy(name).lookahead
    snap = Snapshot.empty(cluster([4]))
    big = [job(f"big{i}", 5, submit=i) for i in range(la)]
    d = place(name, snap, big + [job("small", 1, submit=la)])
    assert d.as_dict() == {"small": (0,)} and d.blocked == "big0"
    d = place(name, snap, big + [job("one-more", 5, submit=la), job("small", 1, submit=la + 1)])
    assert d.assignments == () and d.blocked == "big0"


def outlier_case() -> tuple[Snapshot, list[JobRequest]]:
    """n1's GPU 4 is a 3x outlier for class A; n0 (all 1.0) frees at t=10."""
    a = [1.0] * 4 + [3.0, 1.0, 1.0, 1.0]
    c = cluster([4, 4], {"A": a})
    snap = Snapshot(cluster=c, free=frozenset(range(4, 8)), running={"r": (0, 1, 2, 3)}, now=0.0,
                    expected_end={"r": 10.0})
    queue = [job("wide", 4, remaining_s=1000.0), job("tiny", 1, submit=1, remaining_s=5.0),
             job("slow", 1, submit=2, remaining_s=2000.0)]
    return snap, queue


@pytest.mark.parametrize("name", OURS)
def test_a_job_waits_for_better_gpus_when_that_finishes_it_sooner(name: str) -> None:
    snap, queue = outlier_case()
    assert place("pal", snap, queue).as_dict() == {"wide": (4, 5, 6, 7)}  # PAL: 3000 s on the outlier
    d = place(name, snap, queue)
    # waits for n0 (finishes at 10 + 1000 instead of 3000); tiny ends before 10; slow keeps off n0
    assert d.blocked == "wide"
    assert d.as_dict() == {"tiny": (5,), "slow": (6,)}


@pytest.mark.parametrize("name", OURS)
def test_no_waiting_without_running_jobs(name: str) -> None:
    """Round mode: everything re-placed, nothing running, so nothing is worth waiting for."""
    snap, queue = outlier_case()
    free = Snapshot(cluster=snap.cluster, free=frozenset(range(4, 8)))
    assert place(name, free, queue).as_dict() == {"wide": (4, 5, 6, 7)}


@pytest.mark.parametrize("name", OURS)
def test_a_small_gain_is_not_worth_waiting_for(name: str) -> None:
    snap, queue = outlier_case()
    a = [1.0] * 4 + [1.02, 1.0, 1.0, 1.0]  # 2% slower: less than the 5% margin
    c = cluster([4, 4], {"A": a})
    snap = Snapshot(cluster=c, free=snap.free, running=snap.running, now=0.0, expected_end=snap.expected_end)
    assert place(name, snap, queue[:1]).as_dict() == {"wide": (4, 5, 6, 7)}


@pytest.mark.parametrize("seed", range(60))
def test_pal_backfill_starts_with_exactly_what_pal_places(seed: int) -> None:
    """Without expected ends nothing waits: PAL's decision is a prefix of pal-backfill's."""
    snap, queue = random_case(seed)
    snap = Snapshot(cluster=snap.cluster, free=snap.free, running=snap.running, now=snap.now)
    ctx = PlacementContext(rng=random.Random(0))
    pal = get_policy("pal").place(snap, queue, ctx)
    ours = get_policy("pal-backfill").place(snap, queue, ctx)
    assert ours.as_dict() | pal.as_dict() == ours.as_dict()
    assert [a.job_id for a in ours.assignments[: len(pal.assignments)]] == [a.job_id for a in pal.assignments]
    assert ours.blocked == pal.blocked


def test_pal_match_gives_an_insensitive_job_the_gpus_worst_for_class_a() -> None:
    # for D all GPUs are equal; for A, n1's GPUs 5 and 6 are the slow ones
    c = cluster([4, 4], {"A": [1.0, 1.0, 1.0, 1.0, 1.0, 1.2, 1.2, 1.0], "D": [1.0] * 8})
    snap = Snapshot.empty(c)
    assert place("pal", snap, [job("d", 1, "D")]).as_dict() == {"d": (0,)}
    assert place("pal-match", snap, [job("d", 1, "D")]).as_dict() == {"d": (5,)}
    assert place("pal-match", snap, [job("d", 2, "D")]).as_dict() == {"d": (5, 6)}
    assert place("pal-match", snap, [job("d", 5, "D")]).as_dict() == {"d": (0, 4, 5, 6, 7)}
    # a class-A job still gets exactly PAL's choice (PM-First's score prefers n1's pair of 1.0s)
    assert place("pal-match", snap, [job("a", 1, "A")]).as_dict() == place("pal", snap, [job("a", 1, "A")]).as_dict()


def test_pal_match_never_costs_a_job_speed_against_pal() -> None:
    """Same max sf, and never across nodes where PAL stays on one."""
    for seed in range(80):
        snap, queue = random_case(seed)
        snap = Snapshot.empty(snap.cluster)
        for j in queue:
            pal = get_policy("pal").place(snap, [j], PlacementContext())
            match = get_policy("pal-match").place(snap, [j], PlacementContext())
            if pal.assignments and match.assignments:
                c = snap.cluster
                spans = [len({c.node_of[g] for g in d.assignments[0].gpus}) > 1 for d in (pal, match)]
                assert spans[1] <= spans[0], (seed, j)
                sf = c.sf(j.job_class)
                worst = [max(sf[g] for g in d.assignments[0].gpus) for d in (pal, match)]
                assert worst[1] == worst[0], (seed, j)
