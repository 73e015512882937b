"""pal-guard's noise rule and its fragmentation-neutral search, on hand-worked cases the
rest of the suite leaves open (each found by `make mutation`: a change to the code that
no other test noticed).

The hand-worked fleets: nodes of 2 GPUs (and one of 4); "free" lists the GPUs not in use.
A node with more free GPUs than first fit's is not neutral (taking from it would break up
free space a wider job may wait for), so the fastest free GPU is often out of reach, and
the decision falls to the comparison of the fastest *neutral* set with first fit.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from pal_slurm.placement.first_fit import FirstFit
from pal_slurm.placement.guarded import GuardedChooser, fastest, quiet_class, quiet_table
from pal_slurm.placement.index import ClusterIndex
from pal_slurm.placement.model import Snapshot
from tests.support.placement_cases import one
from tests.support.placement_cases import cluster, free_only, job


def _hand_worked(neutral_pv: float, ff_pv: float = 1.30, fast_pv: float = 1.00, noise: float = 0.05,
                 remaining_s: float = 3600):
    """A 1-GPU job. n0: GPU 0 (pace `ff_pv`) free, GPU 1 busy: first fit's (the lowest node
    with one free GPU). n1: GPU 2 (`neutral_pv`) free, GPU 3 busy: neutral. n2: four free
    GPUs at `fast_pv`: faster, but taking one would break up a whole node."""
    c = cluster([2, 2, 4], {"A": [ff_pv, 1.0, neutral_pv, 1.0] + [fast_pv] * 4})
    return one(free_only(c, [0, 2, 4, 5, 6, 7]), job("j", 1, remaining_s=remaining_s), noise=noise)


# --------------------------------------------------------------------------- the final noise comparison


def test_a_one_gpu_job_on_a_130_gpu_does_not_move_to_a_127_gpu_a_gain_below_the_noise() -> None:
    """The hand-worked case of the no-harm rule: first fit is a 1.30 GPU, a 1.27 GPU is free
    on another node with as few free GPUs (neutral), and faster GPUs are free only on a whole
    node. 1.30 / 1.27 is a 2.3 % gain, below the 5 % noise: the job keeps first fit."""
    d = _hand_worked(neutral_pv=1.27)
    assert d.as_dict() == {"j": (0,)}
    a = d.assignments[0]
    assert a.first_fit and a.instead_of is None
    assert a.reason.endswith("first fit kept: the fastest neutral set (pace 1.270) is within the noise of "
                             "first fit's (1.300)")


def test_the_same_job_moves_to_a_neutral_gpu_faster_beyond_the_noise() -> None:
    d = _hand_worked(neutral_pv=1.20)  # 8.3 % faster
    assert d.as_dict() == {"j": (2,)}
    assert not d.assignments[0].first_fit and d.assignments[0].instead_of == (0,)


def test_a_gain_of_exactly_the_noise_is_not_beyond_it() -> None:
    """Beyond the noise means more than it: 1.25 against 1.00 with a noise of 25 % is equal."""
    d = _hand_worked(neutral_pv=1.00, ff_pv=1.25, fast_pv=0.50, noise=0.25)
    assert d.as_dict() == {"j": (0,)} and d.assignments[0].first_fit


def test_when_no_free_set_beats_first_fit_beyond_the_noise_the_reason_says_so() -> None:
    """No free GPU anywhere is faster than first fit's beyond the noise (only a busy one is):
    first fit, because no set can be faster, whatever the neutral search would find."""
    c = cluster([2, 2], {"A": [1.30, 1.00, 1.27, 1.00]})
    d = one(free_only(c, [0, 2]), job("j", 1, remaining_s=3600))
    assert d.as_dict() == {"j": (0,)}
    assert d.assignments[0].reason.endswith("first fit kept: no set is faster beyond the noise (5%)")
    # the bound itself is inclusive: the best free GPU exactly the noise faster is not beyond it
    c = cluster([2, 2], {"A": [1.25, 0.50, 1.00, 0.50]})
    d = one(free_only(c, [0, 2]), job("j", 1, remaining_s=3600), noise=0.25)
    assert d.as_dict() == {"j": (0,)}
    assert d.assignments[0].reason.endswith("first fit kept: no set is faster beyond the noise (25%)")


def test_the_best_free_gpu_is_found_whatever_order_the_free_gpus_come_in() -> None:
    """The faster neutral GPU (1.00) lies between slower free ones in id order; the bound on
    what any set could gain must be the best free GPU, not whichever comes first."""
    c = cluster([2, 2, 2], {"A": [1.30, 1.00, 1.00, 1.00, 1.50, 1.60]})
    d = one(free_only(c, [0, 2, 4, 5]), job("j", 1, remaining_s=3600))
    assert d.as_dict() == {"j": (2,)} and not d.assignments[0].first_fit


def test_no_faster_neutral_set_keeps_first_fit_and_says_why() -> None:
    """The faster GPUs are all on a whole node: nothing neutral is faster."""
    c = cluster([2, 4], {"A": [1.30, 1.00, 1.00, 1.00, 1.00, 1.00]})
    d = one(free_only(c, [0, 2, 3, 4, 5]), job("j", 1, remaining_s=3600))
    assert d.as_dict() == {"j": (0,)}
    assert d.assignments[0].reason.endswith("first fit kept: the fastest neutral set (pace 1.300) is within the "
                                            "noise of first fit's (1.300)") \
        or d.assignments[0].reason.endswith("first fit kept: no faster set leaves the free GPUs as whole as first "
                                            "fit does")


def test_a_job_is_not_moved_to_a_node_it_may_not_use() -> None:
    """The faster neutral GPU lies on a node outside the job's partition: first fit stays."""
    c = cluster([2, 2, 2], {"A": [1.30, 1.00, 1.00, 1.00, 1.00, 1.00]})
    d = one(free_only(c, [0, 2, 4, 5]), job("j", 1, remaining_s=3600, allowed_nodes=frozenset({0, 2})))
    assert d.as_dict() == {"j": (0,)} and d.assignments[0].first_fit


# --------------------------------------------------------------------------- what a move says


def test_a_move_names_both_sets_and_the_saving_in_gpu_hours_and_run_time() -> None:
    d = _hand_worked(neutral_pv=1.00, fast_pv=0.90)
    a = d.assignments[0]
    assert d.as_dict() == {"j": (2,)}
    assert a.alternatives == (((2,), 1.0), ((0,), 1.3)), "the choice and first fit's, with their paces"
    assert "pace 1.000 instead of first fit's 1.300" in a.reason
    assert "saves an expected 0.30 GPU-h, 23.1% of its run time" in a.reason


def test_the_saving_is_reported_in_gpu_hours() -> None:
    """60 s of one GPU, 30 % faster: 18 GPU-seconds, 0.005 GPU-h, which rounds to 0.01."""
    d = _hand_worked(neutral_pv=1.00, fast_pv=0.90, remaining_s=60)
    assert d.as_dict() == {"j": (2,)} and "saves an expected 0.01 GPU-h" in d.assignments[0].reason


def test_any_positive_saving_pays_for_a_neutral_move_however_short_the_job() -> None:
    """A neutral move costs nothing, so a one-second job (0.3 GPU-seconds saved) moves too."""
    d = _hand_worked(neutral_pv=1.00, fast_pv=0.90, remaining_s=1)
    assert d.as_dict() == {"j": (2,)} and "saves an expected 0.00 GPU-h" in d.assignments[0].reason


def test_a_move_without_a_runtime_estimate_says_the_saving_is_unknown() -> None:
    d = _hand_worked(neutral_pv=1.00, fast_pv=0.90, remaining_s=0)
    assert d.as_dict() == {"j": (2,)}
    assert "; saves an unknown amount (no runtime estimate), 23.1% of its run time" in d.assignments[0].reason


def test_a_kept_first_fit_still_lists_first_fits_gpus_among_the_alternatives() -> None:
    d = _hand_worked(neutral_pv=1.27)
    assert d.assignments[0].alternatives and d.assignments[0].alternatives[0][0] == (0,)


# --------------------------------------------------------------------------- multi-node jobs: one slot set


def test_a_two_node_job_moves_only_to_the_same_slot_on_both_nodes() -> None:
    """1 GPU on each of 2 nodes, one per-node request: the GPUs must share a slot. n0 is slow;
    on n1 slot 0 is fast, on n2 slot 1: the fastest pair by slot is pace 1.2, never 1.0+1.0."""
    c = cluster([2, 2, 2], {"A": [1.40, 1.40, 1.00, 1.20, 1.20, 1.00]})
    j = job("m", 2, gpus_per_node=1, min_nodes=2, max_nodes=2, same_slots=True, remaining_s=3600)
    d = one(free_only(c, [0, 2, 3, 4, 5]), j)
    assert d.as_dict() == {"m": (2, 4)} and not d.assignments[0].first_fit, "slot 0 of n1 and n2: pace 1.2"


def test_a_two_node_job_chooses_its_slot_set_by_perfvar_not_by_the_slowdown_factor() -> None:
    """pal-guard compares raw PerfVars (the slowdown factors are binned); here they disagree:
    by PerfVar slot 1 is faster on both nodes."""
    c = cluster([2, 2], {"A": [1.0, 1.4, 1.0, 1.4]}, pv={"A": [1.4, 1.0, 1.4, 1.0]})
    j = job("m", 2, gpus_per_node=1, min_nodes=2, max_nodes=2, same_slots=True, remaining_s=3600)
    assert one(Snapshot.empty(c), j).as_dict() == {"m": (1, 3)}


def test_a_two_node_job_finds_a_faster_slot_set_on_first_fits_own_nodes() -> None:
    """Only first fit's two nodes have room: slot 1 is faster than slot 0 on both."""
    c = cluster([2, 2], {"A": [1.40, 1.00, 1.40, 1.00]})
    j = job("m", 2, gpus_per_node=1, min_nodes=2, max_nodes=2, same_slots=True, remaining_s=3600)
    d = one(Snapshot.empty(c), j)
    assert d.as_dict() == {"m": (1, 3)} and not d.assignments[0].first_fit


def test_a_two_node_job_is_not_moved_onto_nodes_with_more_free_gpus() -> None:
    """n0 and n1 have one free GPU each (first fit's); n2 and n3 are whole and fast: not neutral."""
    c = cluster([2, 2, 2, 2], {"A": [1.40, 1.00, 1.40, 1.00, 1.00, 1.00, 1.00, 1.00]})
    j = job("m", 2, gpus_per_node=1, min_nodes=2, max_nodes=2, same_slots=True, remaining_s=3600)
    d = one(free_only(c, [0, 2, 4, 5, 6, 7]), j)
    assert d.as_dict() == {"m": (0, 2)} and d.assignments[0].first_fit
    assert d.assignments[0].reason.endswith("first fit kept: no faster set leaves the free GPUs as whole as first "
                                            "fit does")


def test_a_two_node_job_is_not_moved_to_a_node_it_may_not_use() -> None:
    c = cluster([2, 2, 2, 2], {"A": [1.40, 1.40, 1.40, 1.40, 1.00, 1.00, 1.00, 1.00]})
    j = job("m", 2, gpus_per_node=1, min_nodes=2, max_nodes=2, same_slots=True, remaining_s=3600,
            allowed_nodes=frozenset({0, 1, 2}))
    d = one(free_only(c, [0, 2, 4, 6]), j)
    assert all(g // 2 in (0, 1, 2) for g in d.as_dict()["m"])


def test_a_job_first_fit_splits_moves_node_for_node_to_faster_nodes_as_full_as_its_own() -> None:
    """A 3-GPU job no node can hold alone (simulator jobs may split): first fit takes both free
    GPUs of n0 and one of n1's two. Each node is replaced by one with as many free GPUs, the
    node it takes most from first: n2 (both fast GPUs), then n3's fast slot."""
    c = cluster([2, 2, 2, 2], {"A": [1.3, 1.3, 1.3, 1.3, 1.0, 1.0, 1.0, 1.5]})
    d = one(Snapshot.empty(c), job("j", 3, remaining_s=3600))
    assert d.as_dict() == {"j": (4, 5, 6)} and d.assignments[0].instead_of == (0, 1, 2)


def test_a_split_job_moves_to_the_fastest_nodes_with_the_same_free_counts() -> None:
    """4 GPUs over nodes of 4 with 1, 3, 3 and 3 free: first fit takes n1's three and one of
    n2's; the same counts on faster GPUs are n2's three and one of n3's."""
    pv = [1.0, 1.0, 1.0, 1.3, 1.0, 1.3, 1.3, 1.3, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    c = cluster([4, 4, 4, 4], {"A": pv})
    d = one(free_only(c, [3, 5, 6, 7, 9, 10, 11, 13, 14, 15]), job("j", 4, remaining_s=3600))
    assert d.as_dict() == {"j": (9, 10, 11, 13)} and d.assignments[0].instead_of == (5, 6, 7, 9)


# --------------------------------------------------------------------------- quiet classes


def test_a_class_with_no_gpus_or_a_spread_of_exactly_the_noise_has_nothing_to_choose() -> None:
    assert quiet_class(np.array([]), 0.05)
    assert quiet_class(np.array([1.0, 1.25]), 0.25)
    assert not quiet_class(np.array([1.0, 1.26]), 0.25)


def test_a_cached_verdict_is_for_its_own_class_table_only() -> None:
    """The verdicts are cached per class table; a new table under the same key (a re-read of
    the factors) gets its own verdict and its own fastest GPU, never the old table's."""
    c = cluster([2], {"A": [1.0, 1.01]})
    ix = ClusterIndex(c)
    tab = ix.table("A")
    chooser = GuardedChooser(FirstFit("pal-guard"))
    assert quiet_table(tab, 0.05) and fastest(tab) == 1.0
    wide = replace(tab, pv=np.array([0.5, 1.3]))
    assert not quiet_table(wide, 0.05)
    assert fastest(wide) == 0.5
    assert fastest(replace(tab, pv=np.array([]))) == 1.0 and quiet_table(replace(tab, pv=np.array([])), 0.0)
    assert chooser._pv_views(ix, tab)[1].tolist() == [[1.0, 1.01]]
    assert chooser._pv_views(ix, wide)[1].tolist() == [[0.5, 1.3]]


def test_faster_gpus_on_nodes_the_job_may_not_use_do_not_count_as_a_possible_gain() -> None:
    c = cluster([2, 2], {"A": [1.30, 1.00, 1.00, 1.00]})
    d = one(free_only(c, [0, 2]), job("j", 1, remaining_s=3600, allowed_nodes=frozenset({0})))
    assert d.as_dict() == {"j": (0,)}
    assert d.assignments[0].reason.endswith("first fit kept: no set is faster beyond the noise (5%)")


# --------------------------------------------------------------------------- waiting under pal-guard


def _waits(pv: list[float], end: float, noise: float = 0.05, cls: str = "A", **classes: list[float]) -> bool:
    """A 1-GPU job (1000 s) whose free GPU is GPU 0; GPU 1 frees at `end`; waits allowed up to 1000 s."""
    c = cluster([2, 2], {"A": pv, **classes})
    snap = Snapshot(cluster=c, free=frozenset({0}), running={"r": (1,), "s": (2, 3)}, now=0.0,
                    expected_end={"r": end, "s": 1e9})
    from pal_slurm.placement.model import PlacementContext
    from pal_slurm.placement.policies import get_policy

    ctx = PlacementContext(noise=noise, wait_fraction=1.0, max_wait_s=1000.0)
    return bool(get_policy("pal-guard").place(snap, [job("j", 1, cls, remaining_s=1000.0)], ctx).waits)


def test_pal_guard_waits_only_to_finish_sooner_by_more_than_the_noise_when_that_is_above_five_percent() -> None:
    """Now 1300 s; after GPU 1 (1.0) frees at `end`, end + 1000. With a noise of 10 % the gain
    must exceed 100 s: at end=220 it is 80 s, not enough (5 % would have let it wait)."""
    assert _waits([1.3, 1.0, 1.0, 1.0], end=150.0, noise=0.10)
    assert not _waits([1.3, 1.0, 1.0, 1.0], end=220.0, noise=0.10)


def test_pal_guard_does_not_wait_on_a_gpu_within_the_noise_of_the_classs_fastest() -> None:
    """Every GPU of the class is slow; the free one (1.57) is within 5 % of the fastest (1.5):
    nothing is worth waiting for, though the release would gain 4.5 %."""
    assert not _waits([1.57, 1.5, 1.6, 1.6], end=10.0)


def test_pal_guard_waits_by_the_jobs_own_class() -> None:
    assert _waits([1.0, 1.0, 1.0, 1.0], end=10.0, cls="D", D=[1.3, 1.0, 1.0, 1.0])
    assert not _waits([1.0, 1.0, 1.0, 1.0], end=10.0, cls="A", D=[1.3, 1.0, 1.0, 1.0])


def test_first_fit_within_the_noise_of_the_classs_fastest_gpu_says_so() -> None:
    """The class has a slow GPU (busy), so it is not quiet; first fit's 1.02 is within 5 % of 1.0."""
    c = cluster([2, 2], {"A": [1.02, 1.00, 1.30, 1.00]})
    d = one(free_only(c, [0, 1]), job("j", 1, remaining_s=3600))
    assert d.as_dict() == {"j": (0,)}
    assert d.assignments[0].reason.endswith("first fit kept: no set is faster beyond the noise (5%)")


def test_pal_guard_does_not_wait_for_a_tighter_gpu_within_the_noise_of_its_own() -> None:
    """GPU 2 (1.57) is free; GPU 0 (1.5), on the node before, frees at 10: first fit would then
    take it, 4.5 % faster: within the noise of the class's fastest, so no wait."""
    c = cluster([2, 2], {"A": [1.5, 1.6, 1.57, 1.6]})
    snap = Snapshot(cluster=c, free=frozenset({2, 3}), running={"r": (0,), "s": (1,)}, now=0.0,
                    expected_end={"r": 10.0, "s": 1e9})
    from pal_slurm.placement.model import PlacementContext
    from pal_slurm.placement.policies import get_policy

    ctx = PlacementContext(wait_fraction=1.0, max_wait_s=1000.0)
    d = get_policy("pal-guard").place(snap, [job("j", 1, remaining_s=1000.0)], ctx)
    assert not d.waits and d.as_dict() == {"j": (2,)}
