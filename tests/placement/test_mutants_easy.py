"""The one EASY mechanism (pal_slurm/placement/easy.py) on the cases the rest of the suite leaves
open (each found by `make mutation`): when the head is expected to start (running jobs' and this
decision's own releases, in time order, unknown ends last), the backfill at that very second,
and the rules of waiting for better GPUs (an estimate needed, the bound, the margin, how much
sooner, how many releases and searches a decision looks at).

slurm-backfill is Slurm's mechanism with time limits; pal-backfill waits for better GPUs with
the cost model (its wait rule, pal_slurm/placement/waiting.py's BetterLater). Snapshots are
hand-built: node sizes, who runs where and until when.
"""

from __future__ import annotations

import math
from dataclasses import replace

from pal_slurm.placement.easy import EasyBackfill, estimated_runtime, time_limit_s
from pal_slurm.placement.index import ClusterIndex
from pal_slurm.placement.model import Decision, JobRequest, PlacementContext, Snapshot
from pal_slurm.placement.policies import get_policy
from pal_slurm.placement.waiting import BetterLater
from tests.support.placement_cases import cluster, job


def place(name: str, snap: Snapshot, queue: list[JobRequest], **ctx: object) -> Decision:
    return get_policy(name).place(snap, queue, PlacementContext(locality_penalty=1.7, **ctx))  # type: ignore[arg-type]


def waiting_with(name: str, **rule: int) -> EasyBackfill:
    """The policy `name` with its wait rule's knobs (lookahead, searches) set as given."""
    pol = get_policy(name)
    assert isinstance(pol, EasyBackfill) and isinstance(pol.wait, BetterLater)
    return replace(pol, wait=replace(pol.wait, **rule))


def reason(d: Decision, job_id: str) -> str:
    return next(a.reason for a in d.assignments if a.job_id == job_id)


# --------------------------------------------------------------------------- estimates


def test_a_one_second_estimate_is_an_estimate_and_each_class_runs_at_its_own_pace() -> None:
    c = cluster([2], {"A": [1.0, 1.5], "D": [2.0, 2.0]})
    ix = ClusterIndex(c)
    assert time_limit_s(job("j", 1, remaining_s=1.0)) == 1.0
    assert time_limit_s(job("j", 1)) == math.inf
    assert estimated_runtime(ix, job("j", 1, remaining_s=1.0), (1,), 1.7) == 1.5
    assert estimated_runtime(ix, job("j", 1, "D", remaining_s=100.0), (0,), 1.7) == 200.0


# --------------------------------------------------------------------------- the head's expected start


def test_the_head_expects_the_first_release_of_this_decision_in_time_order() -> None:
    """3 GPUs free: a (300 s) and b (100 s) start now on GPUs 0 and 1; the 2-GPU head finds one
    free and expects b's at 100; c (50 s) ends by then and is backfilled on the free one."""
    c = cluster([4])
    snap = Snapshot(cluster=c, free=frozenset({0, 1, 2}), running={"r": (3,)}, now=0.0, expected_end={"r": 500.0})
    queue = [job("a", 1, remaining_s=300.0), job("b", 1, submit=1, remaining_s=100.0),
             job("head", 2, submit=2, remaining_s=1000.0), job("c", 1, submit=3, remaining_s=50.0)]
    d = place("slurm-backfill", snap, queue)
    assert d.as_dict() == {"a": (0,), "b": (1,), "c": (2,)} and d.blocked == "head"
    assert "backfilled past head: ends by its expected start (50 <= 100)" in reason(d, "c")


def test_a_decision_at_time_zero_counts_its_releases_from_zero() -> None:
    c = cluster([2])
    snap = Snapshot(cluster=c, free=frozenset({0, 1}), running={}, now=0.0)
    queue = [job("a", 1, remaining_s=100.0), job("head", 2, submit=1, remaining_s=10.0),
             job("c", 1, submit=2, remaining_s=100.0)]
    d = place("slurm-backfill", snap, queue)
    assert "ends by its expected start (100 <= 100)" in reason(d, "c"), "ending at the head's start is in time"


def test_running_jobs_release_before_this_decisions_jobs_and_unknown_ends_come_last() -> None:
    """r1 ends at 100, r2 never as far as anyone knows; the head (3 GPUs) needs r1's and a's
    GPUs: a, placed now for 200 s, frees at 200; c (150 s) ends by then."""
    c = cluster([4])
    snap = Snapshot(cluster=c, free=frozenset({0}), running={"r1": (1,), "r2": (2,), "r3": (3,)}, now=0.0,
                    expected_end={"r1": 100.0, "r3": math.inf})
    queue = [job("a", 1, remaining_s=200.0), job("head", 2, submit=1, remaining_s=10.0)]
    d = place("slurm-backfill", snap, queue)
    assert d.as_dict() == {"a": (0,)} and d.blocked == "head"
    snap = Snapshot(cluster=c, free=frozenset({0, 1}), running={"r2": (2,), "r3": (3,)}, now=0.0,
                    expected_end={"r3": math.inf})
    queue = [job("a", 1, remaining_s=200.0), job("head", 2, submit=1, remaining_s=10.0),
             job("c", 1, submit=2, remaining_s=150.0)]
    d = place("slurm-backfill", snap, queue)
    assert d.as_dict() == {"a": (0,), "c": (1,)}
    assert "ends by its expected start (150 <= 200)" in reason(d, "c")


def test_a_job_placed_without_an_estimate_frees_its_gpus_only_after_every_known_end() -> None:
    """a has no time limit: the head can count on its GPU only after every known release, so
    b (150 s) cannot end by the head's start and the only free GPU is the head's."""
    c = cluster([4])
    snap = Snapshot(cluster=c, free=frozenset({0, 1}), running={"r": (2, 3)}, now=0.0, expected_end={"r": 100.0})
    queue = [job("a", 1), job("head", 4, submit=1, remaining_s=10.0), job("b", 1, submit=2, remaining_s=150.0)]
    d = place("slurm-backfill", snap, queue)
    assert d.as_dict() == {"a": (0,)} and d.blocked == "head"


def test_a_job_kept_off_the_heads_gpus_says_so() -> None:
    """The head (2 GPUs on one node) expects n1 once r ends; a long job takes n0's free GPU."""
    c = cluster([2, 2])
    snap = Snapshot(cluster=c, free=frozenset({0, 2}), running={"s": (1,), "r": (3,)}, now=0.0,
                    expected_end={"s": 1e9, "r": 100.0})
    queue = [job("head", 2, max_nodes=1, remaining_s=10.0), job("long", 1, submit=1, remaining_s=1000.0)]
    d = place("slurm-backfill", snap, queue)
    assert d.blocked == "head" and d.as_dict() == {"long": (0,)}
    assert reason(d, "long").endswith("backfilled past head: keeps off the GPUs it expects")


# --------------------------------------------------------------------------- waiting for better GPUs


def _outlier(remaining_s: float | None = 1000.0, end: float = 10.0) -> tuple[Snapshot, JobRequest]:
    """A 1-GPU job: the free GPU (4) is a 3x outlier; GPU 0 (pace 1.0) frees at `end`."""
    c = cluster([4, 4], {"A": [1.0, 1.0, 1.0, 1.0, 3.0, 3.0, 3.0, 3.0]})
    snap = Snapshot(cluster=c, free=frozenset({4}), running={"r": (0,), "s": (1, 2, 3), "t": (5, 6, 7)}, now=0.0,
                    expected_end={"r": end, "s": 1e9, "t": 1e9})
    return snap, job("j", 1, remaining_s=remaining_s or 0.0)


def test_a_job_waits_for_a_faster_gpu_and_says_when_and_how_much_sooner() -> None:
    snap, j = _outlier()
    d = place("pal-backfill", snap, [j])
    assert d.as_dict() == {} and d.blocked == "j"
    (w,) = d.waits
    # now on the outlier: 3000 s; after r ends at 10 on GPU 0: 10 + 1000
    assert (w.job_id, w.gpus, w.free_at, w.sooner_s) == ("j", (0,), 10.0, 1990.0)


def test_a_job_without_a_runtime_estimate_never_waits() -> None:
    snap, j = _outlier(remaining_s=None)
    d = place("pal-backfill", snap, [j])
    assert d.as_dict() == {"j": (4,)} and not d.waits


def test_a_job_waits_only_for_a_release_within_the_wait_bound() -> None:
    """The bound: wait_fraction of the estimate, at most max_wait_s (PlacementContext)."""
    snap, j = _outlier(end=10.0)
    assert not place("pal-backfill", snap, [j], max_wait_s=9.0).waits
    assert place("pal-backfill", snap, [j], max_wait_s=10.0).waits or place("pal-backfill", snap, [j]).waits
    assert not place("pal-backfill", snap, [j], max_wait_s=0.0).waits


def test_a_job_waits_only_to_finish_sooner_by_more_than_the_margin() -> None:
    """Now on a GPU of pace 1.05 (1050 s); GPU 0 (1.0) frees at `end`: waiting finishes at
    end + 1000. The margin is 5 % of the estimate (50 s): worth it only for end < 0."""
    c = cluster([2, 2], {"A": [1.0, 1.0, 1.05, 1.05]})
    for end, waits in ((0.5, False), (20.0, False)):
        snap = Snapshot(cluster=c, free=frozenset({2}), running={"r": (0,), "s": (1,), "t": (3,)}, now=0.0,
                        expected_end={"r": end, "s": 1e9, "t": 1e9})
        assert bool(place("pal-backfill", snap, [job("j", 1, remaining_s=1000.0)]).waits) is waits, end
    c = cluster([2, 2], {"A": [1.0, 1.0, 1.2, 1.2]})  # 1200 s now; 1000 + end later: worth it up to end < 150
    for end, waits in ((149.0, True), (150.0, False)):
        snap = Snapshot(cluster=c, free=frozenset({2}), running={"r": (0,), "s": (1,), "t": (3,)}, now=0.0,
                        expected_end={"r": end, "s": 1e9, "t": 1e9})
        assert bool(place("pal-backfill", snap, [job("j", 1, remaining_s=1000.0)]).waits) is waits, end


def test_of_several_releases_the_job_waits_for_the_one_it_finishes_soonest_after() -> None:
    """GPU 1 (pace 1.0) frees at 300, GPU 0 (pace 1.5) at 10: 10 + 1500 against 300 + 1000."""
    c = cluster([4], {"A": [1.5, 1.0, 3.0, 3.0]})
    snap = Snapshot(cluster=c, free=frozenset({2}), running={"r": (0,), "q": (1,), "s": (3,)}, now=0.0,
                    expected_end={"r": 10.0, "q": 300.0, "s": 1e9})
    (w,) = place("pal-backfill", snap, [job("j", 1, remaining_s=1000.0)]).waits
    assert (w.gpus, w.free_at, w.sooner_s) == ((1,), 300.0, 3000.0 - 1300.0)


def test_a_job_spanning_two_nodes_waits_for_a_release_that_gathers_it_on_one() -> None:
    """2 GPUs on one node if it can (max_nodes unset: Slurm may split it): now only one GPU
    free on each node (two nodes, the locality penalty); n0's other GPU frees at 10."""
    c = cluster([2, 2])
    snap = Snapshot(cluster=c, free=frozenset({0, 2}), running={"r": (1,), "s": (3,)}, now=0.0,
                    expected_end={"r": 10.0, "s": 1e9})
    d = place("pal-backfill", snap, [job("j", 2, remaining_s=1000.0)])
    (w,) = d.waits
    assert w.gpus == (0, 1) and w.free_at == 10.0


def test_a_job_looks_at_no_more_than_its_lookahead_of_helpful_releases() -> None:
    """Nine releases of GPUs barely faster than its own come first (each looked at, none worth
    waiting for), then the fast one: past the wait rule's lookahead (8) it is not looked at."""
    pv = [3.0] + [2.99] * 9 + [1.0]
    c = cluster([11], {"A": pv})
    ends = {f"r{i}": 1.0 + i for i in range(9)}
    running = {f"r{i}": (i + 1,) for i in range(9)}
    running["fast"] = (10,)
    ends["fast"] = 50.0
    snap = Snapshot(cluster=c, free=frozenset({0}), running=running, now=0.0, expected_end=ends)
    pol = get_policy("pal-backfill")
    assert isinstance(pol, EasyBackfill) and isinstance(pol.wait, BetterLater) and pol.wait.lookahead == 8
    d = pol.place(snap, [job("j", 1, remaining_s=1000.0)], PlacementContext(locality_penalty=1.7))
    assert not d.waits, "the fast GPU is the 10th release"
    pol = waiting_with("pal-backfill", lookahead=20)
    d = pol.place(snap, [job("j", 1, remaining_s=1000.0)], PlacementContext(locality_penalty=1.7))
    assert [w.gpus for w in d.waits] == [(10,)]


def test_a_decision_searches_for_better_gpus_no_more_than_its_wait_rules_searches() -> None:
    """Two jobs that would each wait for a faster GPU; with one search left only the first waits
    and the second starts now."""
    c = cluster([4], {"A": [1.0, 1.0, 3.0, 3.0]})
    snap = Snapshot(cluster=c, free=frozenset({2, 3}), running={"r": (0,), "q": (1,)}, now=0.0,
                    expected_end={"r": 10.0, "q": 20.0})
    queue = [job("a", 1, remaining_s=1000.0), job("b", 1, submit=1, remaining_s=1000.0)]
    both = get_policy("pal-backfill").place(snap, queue, PlacementContext(locality_penalty=1.7))
    assert [w.job_id for w in both.waits] == ["a", "b"]
    one = waiting_with("pal-backfill", searches=1).place(snap, queue, PlacementContext(locality_penalty=1.7))
    assert [w.job_id for w in one.waits] == ["a"] and set(one.as_dict()) == {"b"}
    assert not waiting_with("pal-backfill", searches=0).place(snap, queue, PlacementContext(locality_penalty=1.7)).waits


def test_a_job_restricted_to_some_nodes_waits_for_a_release_on_one_of_them() -> None:
    """The release on n1 is no use to a job that may only use n0 and n2; n2's is."""
    c = cluster([2, 2, 2], {"A": [3.0, 3.0, 1.0, 1.0, 1.5, 1.5]})
    snap = Snapshot(cluster=c, free=frozenset({0}), running={"x": (1,), "r": (2, 3), "q": (4, 5)}, now=0.0,
                    expected_end={"x": 1e9, "r": 10.0, "q": 20.0})
    d = place("pal-backfill", snap, [job("j", 1, remaining_s=1000.0, allowed_nodes=frozenset({0, 2}))])
    (w,) = d.waits
    assert w.gpus == (4,) and w.free_at == 20.0


def test_releases_that_cannot_help_do_not_count_against_the_lookahead() -> None:
    """Nine releases of GPUs no faster than the one it has now are passed over uncounted; the
    fast tenth is looked at. Of helpful ones, the eighth is the last looked at."""
    c = cluster([11], {"A": [3.0] * 10 + [1.0]})
    running = {f"r{i}": (i + 1,) for i in range(9)} | {"fast": (10,)}
    ends = {f"r{i}": 1.0 + i for i in range(9)} | {"fast": 50.0}
    snap = Snapshot(cluster=c, free=frozenset({0}), running=running, now=0.0, expected_end=ends)
    assert [w.gpus for w in place("pal-backfill", snap, [job("j", 1, remaining_s=1000.0)]).waits] == [(10,)]
    for helpful, waits in ((7, True), (8, False)):
        pv = [3.0] + [2.99] * helpful + [1.0]
        c = cluster([len(pv)], {"A": pv})
        running = {f"r{i}": (i + 1,) for i in range(helpful)} | {"fast": (helpful + 1,)}
        ends = {f"r{i}": 1.0 + i for i in range(helpful)} | {"fast": 50.0}
        snap = Snapshot(cluster=c, free=frozenset({0}), running=running, now=0.0, expected_end=ends)
        assert bool(place("pal-backfill", snap, [job("j", 1, remaining_s=1000.0)]).waits) is waits, helpful


def _two_releases(pace_first: float = 1.5) -> Snapshot:
    """The job's free GPU is a 3x outlier; GPU 0 (`pace_first`) frees at 10, GPU 1 (1.0) at 300;
    GPU 3 (0.5, never free) makes the fastest pace of the class 0.5."""
    c = cluster([4], {"A": [pace_first, 1.0, 3.0, 0.5]})
    return Snapshot(cluster=c, free=frozenset({2}), running={"r": (0,), "q": (1,), "s": (3,)}, now=0.0,
                    expected_end={"r": 10.0, "q": 300.0, "s": 1e9})


def test_a_search_budget_spent_mid_job_keeps_the_best_wait_found_so_far() -> None:
    snap = _two_releases()
    pol = waiting_with("pal-backfill", searches=2)
    (w,) = pol.place(snap, [job("j", 1, remaining_s=1000.0)], PlacementContext(locality_penalty=1.7)).waits
    assert (w.gpus, w.free_at) == ((1,), 300.0), "300 + 1000 beats 10 + 1500"
    pol = waiting_with("pal-backfill", searches=1)
    (w,) = pol.place(snap, [job("j", 1, remaining_s=1000.0)], PlacementContext(locality_penalty=1.7)).waits
    assert (w.gpus, w.free_at) == ((0,), 10.0), "one search: the first release's"


def test_of_two_releases_finishing_the_job_at_the_same_time_it_waits_for_the_earlier() -> None:
    snap = _two_releases(pace_first=1.29)  # 10 + 1290 = 300 + 1000
    (w,) = place("pal-backfill", snap, [job("j", 1, remaining_s=1000.0)]).waits
    assert (w.gpus, w.free_at) == ((0,), 10.0)


def test_a_wait_bound_of_one_second_still_allows_a_release_within_it() -> None:
    snap, j = _outlier(end=0.5)
    assert place("pal-backfill", snap, [j], max_wait_s=1.0).waits


def test_a_short_job_waits_too_when_that_finishes_it_sooner() -> None:
    """Its estimate is one second: three on the outlier, 0.1 + 1 after GPU 0 frees at 0.1."""
    snap, _j = _outlier(end=0.1)
    assert place("pal-backfill", snap, [job("j", 1, remaining_s=1.0)], wait_fraction=1.0).waits


def test_a_job_waits_by_its_own_classs_factors() -> None:
    """For class A the free GPU is as fast as the one being released; for D it is 3x slower."""
    c = cluster([2, 2], {"A": [1.0, 1.0, 1.0, 1.0], "D": [1.0, 1.0, 3.0, 3.0]})
    snap = Snapshot(cluster=c, free=frozenset({2}), running={"r": (0,), "s": (1,), "t": (3,)}, now=0.0,
                    expected_end={"r": 10.0, "s": 1e9, "t": 1e9})
    assert place("pal-backfill", snap, [job("d", 1, "D", remaining_s=1000.0)]).waits
    assert not place("pal-backfill", snap, [job("a", 1, "A", remaining_s=1000.0)]).waits


def test_a_job_waits_by_its_own_classs_fastest_gpu_too() -> None:
    """For class A every GPU is 3x: no release could help an A job, and for a D job the fastest
    D GPU (1.0) is what bounds how soon it could finish."""
    c = cluster([2, 2], {"A": [3.0, 3.0, 3.0, 3.0], "D": [3.0, 1.0, 1.0, 1.0]})
    snap = Snapshot(cluster=c, free=frozenset({0}), running={"r": (1,), "s": (2, 3)}, now=0.0,
                    expected_end={"r": 10.0, "s": 1e9})
    assert place("pal-backfill", snap, [job("d", 1, "D", remaining_s=1000.0)]).waits


def test_past_the_lookahead_the_best_wait_found_so_far_stands() -> None:
    pol = waiting_with("pal-backfill", lookahead=1)
    (w,) = pol.place(_two_releases(), [job("j", 1, remaining_s=1000.0)], PlacementContext(locality_penalty=1.7)).waits
    assert (w.gpus, w.free_at) == ((0,), 10.0)
