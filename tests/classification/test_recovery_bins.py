"""pal_slurm.demo.recovery.bin_recovery: how many places on a run's ladder of bins lie between the bin
each GPU was given and the bin its true PerfVar lies nearest to (bench/profile_recovery.py's target)."""

from __future__ import annotations

from pal_slurm.demo.recovery import Bin, bin_recovery

#: one model's bins in ascending centroid: a fast outlier, four regular bins, two slow outliers
LADDER = [Bin(0, 0.80, True), Bin(1, 0.97, False), Bin(2, 0.99, False), Bin(3, 1.01, False), Bin(4, 1.03, False),
          Bin(5, 1.30, True), Bin(6, 1.45, True)]


def given(**bins: int) -> dict[str, tuple[str, int]]:
    return {uuid: ("M", b) for uuid, b in bins.items()}


def test_regular_gpus_count_every_regular_bin_between() -> None:
    truth = {"a": 0.97, "b": 0.975, "c": 0.97, "d": 1.031}
    rec = bin_recovery("bench", truth, set(), {"M": LADDER}, given(a=1, b=2, c=3, d=1))
    assert {u: d for u, *_r, d in rec.per_gpu} == {"a": 0, "b": 1, "c": 2, "d": 3}
    assert rec.distances == {0: 1, 1: 1, 2: 1, 3: 1}
    assert rec.within(1) == 2 and rec.within(0) == 1 and rec.gpus == 4


def test_outlier_bins_on_one_side_are_one_place() -> None:
    truth = {"x": 1.31, "y": 1.44, "z": 1.44, "h": 1.03}
    rec = bin_recovery("bench", truth, {"x", "y", "z"}, {"M": LADDER}, given(x=6, y=5, z=3, h=5))
    away = {u: d for u, *_r, d in rec.per_gpu}
    # x and y swapped between the two slow outlier bins: each still in its class
    assert away["x"] == 0 and away["y"] == 0
    # a true outlier in the second-slowest regular bin: two places from the outlier bins
    assert away["z"] == 2
    # a healthy GPU whose true bin is the slowest regular one, fenced off: one place (the tier check catches it)
    assert away["h"] == 1


def test_gpus_without_a_bin_or_a_truth_are_left_out() -> None:
    rec = bin_recovery("bench", {"a": 1.0, "b": 1.0}, set(), {"M": LADDER}, given(a=2, c=2))
    assert [u for u, *_r in rec.per_gpu] == ["a"]
