"""pal-guard, the default: Slurm's first fit unless variability pays for a change (no harm).

Pinned here: without variability its decisions are slurm-backfill's, decision by decision,
on every shared trace; a difference within the noise never moves a job off first fit while
a large one does; a faster set that would break up free space more than first fit does is
refused; waiting obeys the noise; and the explanation says which kind of choice it was.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pal_slurm.placement.base import unheld_classes
from pal_slurm.placement.decide import decide
from pal_slurm.placement.guarded import quiet_class
from pal_slurm.placement.model import Cluster, PlacementContext, Snapshot
from pal_slurm.placement.policies import get_policy
from pal_slurm.simulate.estimates import parse_runtime_estimate
from pal_slurm.simulate.event import EventOptions, simulate_events
from pal_slurm.simulate.trace_files import read_trace_file
from tests.support.placement_cases import cluster, free_only, job, one


def a_fleet(values: list[float]) -> Cluster:
    return cluster([len(values) // 2, len(values) // 2], {"A": values, "D": [1.0] * len(values)})


# --------------------------------------------------------------------------- the no-harm rule by hand


def test_a_two_percent_difference_never_moves_a_job_off_first_fit() -> None:
    c = a_fleet([1.02, 1.00, 1.00, 1.00])
    d = one(Snapshot.empty(c), job("j", 1, remaining_s=3600))
    assert d.as_dict() == {"j": (0,)}  # first fit: node 0, lowest index, although GPU 1 is 2 % faster
    assert d.assignments[0].first_fit and "first fit kept" in d.assignments[0].reason


def test_a_thirty_percent_difference_moves_it_to_the_faster_gpu_on_the_same_node() -> None:
    c = a_fleet([1.30, 1.00, 1.00, 1.00])
    d = one(Snapshot.empty(c), job("j", 1, remaining_s=3600))
    assert d.as_dict() == {"j": (1,)}
    a = d.assignments[0]
    assert not a.first_fit and a.instead_of == (0,)  # what first fit would have given (the accounting's)
    # the saving that justified it: 1 GPU x 1 h x (1.30 - 1.00) = 0.30 GPU-h
    assert a.reason.startswith("pal-guard: variability choice") and "0.30 GPU-h" in a.reason


def test_a_faster_gpu_on_a_whole_node_is_not_worth_breaking_that_node() -> None:
    # node 0 has one GPU free (slow), node 1 is whole and fast: first fit takes node 0's GPU;
    # moving would leave no whole node for a waiting 2-GPU job, so pal-guard keeps first fit
    c = a_fleet([1.0, 1.30, 1.0, 1.0])
    d = one(free_only(c, [1, 2, 3]), job("j", 1, remaining_s=3600))
    assert d.as_dict() == {"j": (1,)} and d.assignments[0].first_fit and d.assignments[0].instead_of is None


def test_a_job_backfilled_past_the_head_keeps_saying_it_is_first_fit() -> None:
    # the head (4 GPUs) waits for GPU 0, held until t=1000; a 1-GPU job that ends by then is
    # backfilled on first fit's GPU: the backfill note must not drop the first-fit mark, or
    # the daemon would pin a placement it can leave to Slurm
    c = a_fleet([1.0, 1.0, 1.0, 1.0])
    snap = Snapshot(cluster=c, free=frozenset({1, 2, 3}), running={"r": (0,)}, now=0.0, expected_end={"r": 1000.0})
    d = get_policy("pal-guard").place(snap, [job("head", 4, remaining_s=3600), job("small", 1, remaining_s=100)],
                                      PlacementContext())
    small = next(a for a in d.assignments if a.job_id == "small")
    assert "backfilled past head" in small.reason and small.first_fit


def test_a_tighter_fit_elsewhere_is_taken_when_it_is_faster() -> None:
    # first fit is node 0 (whole, slow); node 1 has one GPU free and fast: a tighter fit
    c = cluster([2, 2], {"A": [1.3, 1.3, 1.0, 1.0]})
    d = one(free_only(c, [0, 1, 3]), job("j", 1, remaining_s=3600))
    assert d.as_dict() == {"j": (3,)} and not d.assignments[0].first_fit


def test_the_noise_is_the_threshold() -> None:
    c = a_fleet([1.08, 1.00, 1.00, 1.00])
    assert one(Snapshot.empty(c), job("j", 1, remaining_s=60), noise=0.05).as_dict() == {"j": (1,)}
    assert one(Snapshot.empty(c), job("j", 1, remaining_s=60), noise=0.10).as_dict() == {"j": (0,)}


def test_a_class_with_nothing_to_choose_gets_first_fit_and_is_left_to_slurm() -> None:
    assert quiet_class(np.array([0.98, 1.0, 1.02]), 0.05)
    assert not quiet_class(np.array([0.95, 1.0, 1.02]), 0.05)
    c = a_fleet([1.30, 1.00, 1.00, 1.00])
    pol = get_policy("pal-guard")
    d = pol.place(Snapshot.empty(c), [job("d", 1, "D", remaining_s=60)], PlacementContext())
    assert d.as_dict() == {"d": (0,)} and "within the noise" in d.assignments[0].reason
    left = pol.classes_left_to_slurm({"A": c.perfvar["A"], "D": c.perfvar["D"]}, PlacementContext())
    assert left == frozenset({"D"})
    assert get_policy("slurm-backfill").classes_left_to_slurm({"D": [1.0]}, PlacementContext()) == frozenset()


def test_the_filter_leaves_classes_to_slurm_all_or_none() -> None:
    """One class left to Slurm beside held ones would let its jobs take GPUs older held jobs
    wait for (Slurm's scheduler does not see held jobs): so every class is held, or none."""
    c = a_fleet([1.30, 1.00, 1.00, 1.00])
    pol = get_policy("pal-guard")
    assert unheld_classes(pol, {"A": c.perfvar["A"], "D": c.perfvar["D"]}, PlacementContext()) == frozenset()
    assert unheld_classes(pol, {"C": [1.0, 1.01], "D": [1.0, 1.02]}, PlacementContext()) == frozenset({"C", "D"})
    assert unheld_classes(get_policy("slurm-backfill"), {"D": [1.0]}, PlacementContext()) == frozenset()


def test_a_multi_node_job_keeps_its_node_count_and_one_slot_set() -> None:
    # 2 x 2 on three 2-GPU nodes; node 0 is slow: first fit takes nodes 0 and 1, pal-guard
    # nodes 1 and 2 (same free count, same slots 0 and 1 on both)
    c = cluster([2, 2, 2], {"A": [1.4, 1.4, 1.0, 1.0, 1.0, 1.0]})
    j = job("m", 4, gpus_per_node=2, min_nodes=2, max_nodes=2, same_slots=True, remaining_s=3600)
    d = one(Snapshot.empty(c), j)
    assert d.as_dict() == {"m": (2, 3, 4, 5)} and not d.assignments[0].first_fit
    quiet = cluster([2, 2, 2], {"A": [1.0] * 6})
    d = one(Snapshot.empty(quiet), j)
    assert d.as_dict() == {"m": (0, 1, 2, 3)} and d.assignments[0].first_fit


def test_it_waits_for_a_release_only_beyond_the_noise() -> None:
    # a 1-GPU job: free GPU 0 is slow; GPU 1 (running job r, ends at 100) is fast. Waiting
    # 100 s to run an hour 30 % faster pays; for a GPU only 2 % faster it does not
    for slow, waits in ((1.30, True), (1.02, False)):
        c = cluster([2], {"A": [slow, 1.0]})
        snap = Snapshot(cluster=c, free=frozenset({0}), running={"r": (1,)}, now=0.0, expected_end={"r": 100.0})
        d = get_policy("pal-guard").place(snap, [job("j", 1, remaining_s=3600)], PlacementContext())
        assert bool(d.waits) is waits, slow
        assert (d.as_dict() == {}) is waits


# --------------------------------------------------------------------------- no variability: Slurm's decisions


@pytest.mark.parametrize("n", range(1, 7))
def test_on_a_uniform_fleet_every_decision_is_slurm_backfills(artifact_dir: Path, n: int) -> None:
    """Workload n of the shared traces, 16 x 4 GPUs all at 1.0, runtimes known only x U[1,5]:
    the same decisions in the same order, hence the same schedule."""
    trace = read_trace_file(artifact_dir / "traces" / "sia-philly" / f"workload-{n}.csv", max_gpus=64)
    c = Cluster.uniform(16, 4, slowdown={k: [1.0] * 64 for k in "ABCD"})
    opts = EventOptions(runtime_estimate=parse_runtime_estimate("uniform:1:5"))
    seen: dict[str, list[tuple[float, dict[str, tuple[int, ...]]]]] = {}
    results = {}
    for name in ("slurm-backfill", "pal-guard"):
        log: list[tuple[float, dict[str, tuple[int, ...]]]] = []
        results[name] = simulate_events(trace, c, get_policy(name), opts,
                                        on_decision=lambda s, q, b, d, log=log: log.append((s.now, d.as_dict())))
        seen[name] = log
    assert len(seen["pal-guard"]) > 50
    assert seen["pal-guard"] == seen["slurm-backfill"]
    assert [(o.start_time, o.finish_time) for o in results["pal-guard"].outcomes] == \
        [(o.start_time, o.finish_time) for o in results["slurm-backfill"].outcomes]


def test_decide_with_the_default_policy_keeps_slurms_order_on_ties() -> None:
    """Two jobs on a uniform fleet: pal-guard places them where slurm-backfill does."""
    c = cluster([4, 4])
    q = [job("a", 2, remaining_s=60), job("b", 4, remaining_s=60), job("c", 2, remaining_s=60)]
    snap = Snapshot.empty(c)
    ours = decide(get_policy("pal-guard"), None, snap, q, PlacementContext())
    theirs = decide(get_policy("slurm-backfill"), None, snap, q, PlacementContext())
    assert ours.as_dict() == theirs.as_dict() == {"a": (0, 1), "b": (4, 5, 6, 7), "c": (2, 3)}


def test_a_pal_guard_waiter_holds_no_gpu_from_the_jobs_behind_it() -> None:
    """W (2 GPUs, one node) could start now on GPUs 0 and 1, but GPU 0 is slow: it waits for
    GPU 2's release (100 s). pal-guard's waiter reserves nothing, so S behind it starts now on
    0 and 1; pal-backfill's waiter becomes the head with 1 and 2 reserved, and S (an hour,
    overlapping GPU 1) must wait. Holding free GPUs for a waiter idled half of a 32 x 8
    cluster for hours under the LLM-era mix (docs/simulation.md)."""
    c = cluster([3], {"A": [1.3, 1.0, 1.0], "D": [1.0, 1.0, 1.0]})
    snap = Snapshot(cluster=c, free=frozenset({0, 1}), running={"r": (2,)}, now=0.0, expected_end={"r": 100.0})
    queue = [job("W", 2, "A", submit=0.0, max_nodes=1, remaining_s=3600),
             job("S", 2, "D", submit=1.0, max_nodes=1, remaining_s=3600)]
    guard = get_policy("pal-guard").place(snap, queue, PlacementContext())
    assert [w.job_id for w in guard.waits] == ["W"] and set(guard.waits[0].gpus) == {1, 2}
    assert guard.as_dict() == {"S": (0, 1)} and guard.blocked is None
    backfill = get_policy("pal-backfill").place(snap, queue, PlacementContext())
    assert [w.job_id for w in backfill.waits] == ["W"] and backfill.as_dict() == {} and backfill.blocked == "W"


def test_pal_guard_plans_the_blocked_heads_start_with_slurms_first_fit() -> None:
    """H (2 GPUs on one node) is blocked until 100 s, when r frees nodes 0 and 1. First fit
    would plan it on slow node 0, the variability choice on node 1 (GPUs 2, 3), the one fast
    node. B (1
    GPU, an hour) behind it: planned by first fit, GPU 2 is not H's and B takes it, as Slurm
    would; planned by the variability choice, B is pushed to GPU 4, and the next pass's
    plan may be other nodes again."""
    import dataclasses

    c = cluster([2, 2, 2], {"A": [1.4, 1.4, 1.0, 1.0, 1.4, 1.4], "D": [1.0] * 6})
    snap = Snapshot(cluster=c, free=frozenset({2, 4}), running={"r": (0, 1, 3), "r2": (5,)}, now=0.0,
                    expected_end={"r": 100.0, "r2": 200.0})
    queue = [job("H", 2, "A", submit=0.0, max_nodes=1, remaining_s=3600),
             job("B", 1, "D", submit=1.0, max_nodes=1, remaining_s=3600)]
    guard = get_policy("pal-guard")
    d = guard.place(snap, queue, PlacementContext())
    assert d.blocked == "H" and d.as_dict() == {"B": (2,)}
    by_choice = dataclasses.replace(guard, planner=None)
    d = by_choice.place(snap, queue, PlacementContext())
    assert d.blocked == "H" and d.as_dict() == {"B": (4,)}
