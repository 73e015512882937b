"""Placement policies: hand-built clusters with known right answers, then invariants checked
on seeded random clusters and queues for EVERY policy of the table (new policies are covered
by adding their row)."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

from pal_slurm.placement.model import Decision, JobRequest, PlacementContext, PlacementError, Snapshot
from pal_slurm.placement.policies import Policy, get_policy, policy_names
from pal_slurm.placement.table import ROWS
from tests.support.placement_cases import check_decision, cluster, free_only, job, random_case

NAMES = policy_names()

#: The PAL artifact's six policies; every other registered policy is ours.
ARTIFACT = ("packed-sticky", "packed-nonsticky", "random-sticky", "random-nonsticky", "pm-first", "pal")


def place(name: str, snap: Snapshot, queue: Sequence[JobRequest], *, lam: float = 1.7, seed: int = 0) -> Decision:
    return get_policy(name).place(snap, queue, PlacementContext(locality_penalty=lam, rng=random.Random(seed)))


# --------------------------------------------------------------------------- registry


def test_the_table_holds_the_artifact_policies_and_ours() -> None:
    assert set(ARTIFACT) < set(NAMES)
    assert {"pal-backfill", "pal-match"} <= set(NAMES)
    assert len(set(NAMES)) == len(ROWS), "one row per name"
    for row in ROWS:
        policy = row.policy()
        assert isinstance(policy, Policy) and policy.name == row.name and policy.row is row
        assert isinstance(row.sticky, bool) and row.description == policy.description
    assert get_policy("packed-sticky").sticky and get_policy("random-sticky").sticky
    assert not any(get_policy(n).sticky for n in ("packed-nonsticky", "random-nonsticky", "pm-first", "pal",
                                                   "pal-backfill"))


def test_policy_traits_are_typed_and_consistent() -> None:
    for policy in map(get_policy, NAMES):
        assert isinstance(policy.backfills, bool) and isinstance(policy.deterministic, bool)
        assert isinstance(policy.time_aware, bool) and isinstance(policy.lookahead, int)
        assert policy.backfills == (policy.lookahead > 0)
    for name in ARTIFACT:
        assert not get_policy(name).backfills and not get_policy(name).time_aware
    assert not get_policy("random-sticky").deterministic and get_policy("pal").deterministic
    assert get_policy("pal-backfill").backfills and get_policy("pal-backfill").time_aware


def test_unknown_policy_lists_the_valid_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown policy 'best'; valid: packed-sticky, packed-nonsticky, ") as err:
        get_policy("best")
    assert isinstance(err.value, PlacementError)


def test_snapshot_naming_a_gpu_that_does_not_exist_is_refused() -> None:
    with pytest.raises(PlacementError, match="do not exist"):
        place("pal", free_only(cluster([2]), [0, 5]), [job("a", 1)])


def test_duplicate_job_ids_are_refused() -> None:
    with pytest.raises(PlacementError, match="twice"):
        place("pal", Snapshot.empty(cluster([2])), [job("a", 1), job("a", 1)])


# --------------------------------------------------------------------------- PAL / PM-First


@pytest.mark.parametrize("name", ["pal", "pm-first"])
def test_class_a_pair_gets_the_two_best_gpus_of_one_node(name: str) -> None:
    c = cluster([4, 4], {"A": [1.1, 1.0, 1.2, 1.0, 1.05, 1.05, 1.05, 1.3]})
    d = place(name, Snapshot.empty(c), [job("a", 2)])
    assert d.as_dict() == {"a": (1, 3)} and d.blocked is None
    assert "sf=1.000" in d.assignments[0].reason


def lambda_cluster() -> Snapshot:
    """Free: one sf-1.0 GPU on each of n0 and n1, two sf-1.1 GPUs on n2."""
    c = cluster([4, 4, 4], {"A": [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.1, 1.1, 1.1, 1.1]})
    return free_only(c, [0, 4, 8, 9])


def test_pal_prefers_a_slower_local_pair_when_lambda_is_high() -> None:
    d = place("pal", lambda_cluster(), [job("a", 2)], lam=1.7)
    assert d.as_dict() == {"a": (8, 9)}
    # walked: within sf<=1.0 (nothing), then within sf<=1.1 -> n2
    assert d.assignments[0].alternatives == (((), 1.0), ((8, 9), 1.1))
    assert "within-node" in d.assignments[0].reason


@pytest.mark.parametrize("lam", [1.0, 1.05])
def test_pal_takes_the_faster_cross_node_pair_when_lambda_is_about_one(lam: float) -> None:
    d = place("pal", lambda_cluster(), [job("a", 2)], lam=lam)
    assert d.as_dict() == {"a": (0, 4)}
    assert "across-nodes" in d.assignments[0].reason


def test_pm_first_ignores_locality_beyond_its_score() -> None:
    # PM-First ranks by sf first: the two sf-1.0 GPUs, wherever they are
    assert place("pm-first", lambda_cluster(), [job("a", 2)]).as_dict() == {"a": (0, 4)}


def test_pm_first_score_prefers_the_node_whose_same_sf_count_matches() -> None:
    # sf 1.0 everywhere; n0 has 3 free, n1 exactly 2: |3-2| = 1 > |2-2| = 0
    c = cluster([4, 4])
    d = place("pm-first", free_only(c, [0, 1, 2, 4, 5]), [job("a", 2)])
    assert d.as_dict() == {"a": (4, 5)}


def test_pal_within_node_tie_goes_to_the_node_with_more_qualifying_gpus() -> None:
    c = cluster([4, 4])
    d = place("pal", free_only(c, [0, 1, 4, 5, 6]), [job("a", 2)])
    assert d.as_dict() == {"a": (4, 5)}


def test_pal_within_node_takes_the_first_set_in_id_order_with_the_smallest_max() -> None:
    # node n0: levels 1.1, 1.0, 1.1, 1.0 -> for 3 GPUs max is 1.1; combinations give (0, 1, 2) first
    c = cluster([4], {"A": [1.1, 1.0, 1.1, 1.0]})
    assert place("pal", Snapshot.empty(c), [job("a", 3)]).as_dict() == {"a": (0, 1, 2)}


def test_pal_uses_pm_first_for_jobs_wider_than_a_node() -> None:
    c = cluster([2, 2, 2], {"A": [1.2, 1.0, 1.0, 1.3, 1.1, 1.0]})
    d = place("pal", Snapshot.empty(c), [job("a", 3)])
    assert d.as_dict() == {"a": (1, 2, 5)}
    assert "PM-First" in d.assignments[0].reason


def test_pal_uses_the_jobs_class_factors() -> None:
    c = cluster([2, 2], {"A": [1.0, 1.0, 1.2, 1.2], "D": [1.2, 1.2, 1.0, 1.0]})
    d = place("pal", Snapshot.empty(c), [job("a", 2, "A"), job("d", 2, "D")])
    assert d.as_dict() == {"a": (0, 1), "d": (2, 3)}
    # an unmeasured class is treated as A
    assert place("pal", Snapshot.empty(c), [job("x", 2, "Z")]).as_dict() == {"x": (0, 1)}


@pytest.mark.parametrize("name", ["pm-first", "pal"])
def test_class_sorted_prefix_places_a_before_b_before_c_before_d(name: str) -> None:
    c = cluster([4, 4], {"A": [1.0 + 0.01 * g for g in range(8)]})
    queue = [job("d", 2, "D", 0), job("c", 2, "C", 1), job("a", 2, "A", 2), job("b", 2, "B", 3),
             job("late-a", 1, "A", 4)]
    d = place(name, Snapshot.empty(c), queue)
    assert [a.job_id for a in d.assignments] == ["a", "b", "c", "d"]
    assert d.blocked == "late-a"
    assert d.as_dict()["a"] == (0, 1)


def test_class_sorted_prefix_keeps_the_rest_in_queue_order_and_ranks_unknown_as_a() -> None:
    """PM-First's order on 5 free GPUs: the prefix that fits (5 GPUs) sorted by class, unknown
    classes ranked as A, the rest in queue order."""
    queue = [job("d", 1, "D"), job("x", 1, None), job("b", 1, "B"), job("z", 2, "Z"), job("big", 9, "A"),
             job("c", 1, "C")]
    ordered, guard = get_policy("pm-first").chooser.placement_order(queue, Snapshot.empty(cluster([5])))
    assert [j.id for j in ordered] == ["x", "z", "b", "d", "big", "c"] and guard == 0


# --------------------------------------------------------------------------- packed


@pytest.mark.parametrize("name", ["packed-sticky", "packed-nonsticky"])
def test_packed_exact_fit_then_fewest_free_then_most_free(name: str) -> None:
    c = cluster([4, 4, 4, 4])
    snap = free_only(c, [0, 1, 2, 5, 6, 8, 9, 10, 11, 13, 14])  # free per node: 3, 2, 4, 2
    assert place(name, snap, [job("j", 2)]).as_dict() == {"j": (5, 6)}  # first exact fit: n1
    assert place(name, snap, [job("j", 1)]).as_dict() == {"j": (5,)}  # fewest >= 1: n1 (tie with n3)
    assert place(name, snap, [job("j", 3)]).as_dict() == {"j": (0, 1, 2)}  # exact: n0
    assert place(name, snap, [job("j", 4)]).as_dict() == {"j": (8, 9, 10, 11)}
    snap2 = free_only(c, [0, 1, 2, 5, 6, 13, 14])  # 3, 2, 0, 2: no node holds 5
    assert place(name, snap2, [job("j", 6)]).as_dict() == {"j": (0, 1, 2, 5, 6, 13)}


def test_packed_fewest_free_takes_the_lowest_ids() -> None:
    c = cluster([4, 4])
    d = place("packed-sticky", free_only(c, [0, 1, 2, 3, 5, 6, 7]), [job("j", 2)])
    assert d.as_dict() == {"j": (5, 6)}  # n1 has 3 free < 4


def test_packed_places_in_queue_order_on_the_shrinking_free_set() -> None:
    c = cluster([4, 4])
    d = place("packed-nonsticky", Snapshot.empty(c), [job("a", 3), job("b", 3), job("c", 2)])
    assert d.as_dict() == {"a": (0, 1, 2), "b": (4, 5, 6), "c": (3, 7)}


# --------------------------------------------------------------------------- random


@pytest.mark.parametrize("name", ["random-sticky", "random-nonsticky"])
def test_random_is_the_artifacts_sample_call(name: str) -> None:
    c = cluster([4] * 8)
    free = [g for g in range(32) if g % 3]
    snap = free_only(c, free)
    d = place(name, snap, [job("a", 3), job("b", 2)], seed=11)
    rng = random.Random(11)
    first = rng.sample(sorted(free), 3)
    second = rng.sample([g for g in sorted(free) if g not in first], 2)
    assert d.as_dict() == {"a": tuple(sorted(first)), "b": tuple(sorted(second))}


@pytest.mark.parametrize("name", ["random-sticky", "random-nonsticky"])
def test_random_is_reproducible_with_a_seed_and_differs_with_another(name: str) -> None:
    snap = Snapshot.empty(cluster([4] * 16))
    queue = [job("a", 4), job("b", 2), job("c", 1)]
    assert place(name, snap, queue, seed=1) == place(name, snap, queue, seed=1)
    assert place(name, snap, queue, seed=1).as_dict() != place(name, snap, queue, seed=2).as_dict()


def test_random_draws_nothing_for_a_job_that_does_not_fit() -> None:
    rng = random.Random(3)
    state = rng.getstate()
    d = get_policy("random-sticky").place(free_only(cluster([4]), [0, 1]), [job("a", 3)], PlacementContext(rng=rng))
    assert d.assignments == () and d.blocked == "a" and rng.getstate() == state


# --------------------------------------------------------------------------- no backfill vs. ours


def blocked_head_case() -> tuple[Snapshot, list[JobRequest]]:
    c = cluster([4, 4])
    snap = Snapshot(cluster=c, free=frozenset(range(4)), running={"r": (4, 5, 6, 7)}, now=0.0,
                    expected_end={"r": 100.0})
    return snap, [job("head", 8, remaining_s=50.0), job("short", 1, submit=1.0, remaining_s=50.0)]


@pytest.mark.parametrize("name", ARTIFACT)
def test_artifact_policies_stop_at_a_blocked_head(name: str) -> None:
    snap, queue = blocked_head_case()
    d = place(name, snap, queue)
    assert d.assignments == () and d.blocked == "head"


@pytest.mark.parametrize("name", [n for n in NAMES if n not in ARTIFACT])
def test_our_policies_backfill_past_a_blocked_head(name: str) -> None:
    snap, queue = blocked_head_case()
    d = place(name, snap, queue)
    assert list(d.as_dict()) == ["short"] and d.blocked == "head"
    assert "backfilled past head" in d.assignments[0].reason


# --------------------------------------------------------------------------- per-node splits


@pytest.mark.parametrize("name", sorted(NAMES))
def test_gpus_per_node_split_is_honoured(name: str) -> None:
    c = cluster([4, 4, 4], {"A": [1.0, 1.3, 1.0, 1.0, 1.2, 1.0, 1.0, 1.0, 1.0, 1.0, 1.1, 1.0]})
    snap = free_only(c, [0, 1, 2, 4, 5, 8, 9, 10, 11])  # 3, 2, 4 free
    d = place(name, snap, [job("s", 4, gpus_per_node=2)])
    got = d.as_dict()["s"]
    per_node = {v: sum(1 for g in got if c.node_of[g] == v) for v in {c.node_of[g] for g in got}}
    assert sorted(per_node.values()) == [2, 2]


def test_variability_split_prefers_nodes_with_the_better_worst_gpu() -> None:
    c = cluster([4, 4, 4], {"A": [1.0, 1.3, 1.0, 1.0, 1.2, 1.0, 1.0, 1.0, 1.0, 1.0, 1.1, 1.0]})
    snap = free_only(c, [0, 1, 2, 4, 5, 8, 9, 10, 11])
    # n0 offers 0, 2 (max 1.0), n2 offers 8, 9 (1.0), n1 only 4, 5 (max 1.2)
    assert place("pal", snap, [job("s", 4, gpus_per_node=2)]).as_dict() == {"s": (0, 2, 8, 9)}
    # packed: exact fit first (n1 has exactly 2), then the fewest free (n0: 3)
    assert place("packed-sticky", snap, [job("s", 4, gpus_per_node=2)]).as_dict() == {"s": (0, 1, 4, 5)}


@pytest.mark.parametrize("name", sorted(NAMES))
def test_allowed_nodes_are_honoured(name: str) -> None:
    c = cluster([4, 4, 4], {"A": [1.3] * 4 + [1.0] * 4 + [1.2] * 4})
    d = place(name, Snapshot.empty(c), [job("a", 3, allowed_nodes=frozenset({0, 2}))])
    assert {c.node_of[g] for g in d.as_dict()["a"]} <= {0, 2}
    blocked = place(name, Snapshot.empty(c), [job("b", 5, allowed_nodes=frozenset({1}))])
    assert blocked.assignments == () and blocked.blocked == "b"


# --------------------------------------------------------------------------- invariants


CASES = range(120)


@pytest.mark.parametrize("name", sorted(NAMES))
def test_invariants_on_random_cases(name: str) -> None:
    policy = get_policy(name)
    for seed in CASES:
        snap, queue = random_case(seed)
        d = policy.place(snap, queue, PlacementContext(locality_penalty=1.0 + (seed % 4) * 0.5,
                                                       rng=random.Random(seed)))
        check_decision(snap, queue, d)
        again = policy.place(snap, queue, PlacementContext(locality_penalty=1.0 + (seed % 4) * 0.5,
                                                           rng=random.Random(seed)))
        assert again == d, f"not deterministic for seed {seed}"


@pytest.mark.parametrize("name", sorted(NAMES))
def test_invariants_when_everything_is_free(name: str) -> None:
    """The non-sticky (round-mode) call: every job, every GPU free, no running jobs."""
    policy = get_policy(name)
    for seed in CASES:
        snap, queue = random_case(seed)
        snap = Snapshot.empty(snap.cluster)
        d = policy.place(snap, queue, PlacementContext(rng=random.Random(seed)))
        check_decision(snap, queue, d)
        if all(j.allowed_nodes is None and j.gpus_per_node is None for j in queue):
            placed = sum(len(a.gpus) for a in d.assignments)
            nxt = [j for j in queue if j.id == d.blocked]
            assert not nxt or placed + nxt[0].gpus > snap.cluster.size, "blocked although it fitted"


@pytest.mark.parametrize("name", [r.name for r in sorted(ROWS, key=lambda r: r.name) if r.sticky])
def test_sticky_policies_leave_running_jobs_alone(name: str) -> None:
    c = cluster([4, 4, 4], {"A": [1.0] * 8 + [1.5] * 4})
    running = {"r1": (0, 1, 2, 3), "r2": (4, 5)}
    snap = Snapshot(cluster=c, free=frozenset(range(6, 12)), running=running)
    d = place(name, snap, [job("a", 4), job("b", 2), job("c", 1)])
    used = {g for a in d.assignments for g in a.gpus}
    assert used == set(range(6, 12)) and d.blocked == "c"


def test_artifact_policies_need_no_timing_information() -> None:
    snap = Snapshot.empty(cluster([4, 4]))
    for name in NAMES:
        assert place(name, snap, [job("a", 8)]).as_dict() == {"a": tuple(range(8))}


def test_the_policy_list_is_the_tables_in_the_documented_order() -> None:
    """What is listed to users is the table's rows in their order, in every process, whatever
    was imported first."""
    import subprocess
    import sys

    assert NAMES == ("packed-sticky", "packed-nonsticky", "random-sticky", "random-nonsticky", "pm-first", "pal",
                        "pal-backfill", "pal-match", "slurm-backfill", "slurm-reserving", "pal-guard")
    code = ("import pal_slurm.placement.guarded, pal_slurm.placement.easy\n"
            "from pal_slurm.placement.policies import policy_names\nprint(','.join(policy_names()))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert tuple(out.split(",")) == NAMES

