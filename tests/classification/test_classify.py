"""Tests of pal_slurm.classification.classify on hand-made fleets whose answers are known.

Most fleets give each GPU three identical runs, so its median (and, divided by
the fleet median, its PerfVar) is known exactly and the expected bins and
slowdown factors can be computed by hand in the test.
"""

from __future__ import annotations

import dataclasses
import math
import random

import numpy as np
import pytest

from tests.support.hand_made_fleets import BIC, by_uuid, check_invariants, classify_group, fleet, group, members
from pal_slurm.classification.model import Bin, ClassifyParams, GpuResult, GroupResult
from pal_slurm.classification.stats import percentile_summary


# ----------------------------------------------------------------------------- clear groups


def test_two_clear_groups():
    a = group("a", 1.00, 10)  # 1.000 .. 1.009
    b = group("b", 1.10, 10)  # 1.100 .. 1.109
    r = classify_group(fleet({**a, **b}), lower_is_better=True)
    check_invariants(r)
    assert r.k_regular == 2 and len(r.bins) == 2
    assert members(r, 0) == set(a) and members(r, 1) == set(b)
    fleet_median = (1.009 + 1.100) / 2
    assert r.fleet_median_score == pytest.approx(fleet_median)
    # centroids: mean raw value / fleet median; slowdown: centroid / the middle half's mean
    # (ranks 6-15 of 20: five GPUs of each bin, so halfway between the two centroids)
    mean_a, mean_b = 1.0045, 1.1045
    assert r.bins[0].centroid == pytest.approx(mean_a / fleet_median)
    assert r.bins[1].centroid == pytest.approx(mean_b / fleet_median)
    assert r.bins[0].slowdown == pytest.approx(mean_a / ((mean_a + mean_b) / 2))  # 0.9526
    assert r.bins[1].slowdown == pytest.approx(mean_b / ((mean_a + mean_b) / 2))  # 1.0474
    assert r.bins[0].low == pytest.approx(1.000 / fleet_median)
    assert r.bins[1].high == pytest.approx(1.109 / fleet_median)
    assert not any(g.outlier for g in r.gpus)
    assert by_uuid(r)["b03"].perfvar == pytest.approx(1.103 / fleet_median)
    assert "BIC" in r.criterion and "K=2" in r.criterion


def test_three_clear_groups():
    a, b, c = group("a", 1.00, 8, 0.002), group("b", 1.10, 8, 0.002), group("c", 1.25, 8, 0.002)
    r = classify_group(fleet({**a, **b, **c}), lower_is_better=True)
    check_invariants(r)
    assert r.k_regular == 3
    assert [members(r, i) for i in range(3)] == [set(a), set(b), set(c)]
    means = [1.007, 1.107, 1.257]
    # the middle half (ranks 7-18 of 24): two GPUs of a, all eight of b, two of c
    anchor = (2 * means[0] + 8 * means[1] + 2 * means[2]) / 12
    for i in range(3):
        assert r.bins[i].slowdown == pytest.approx(means[i] / anchor)


def test_four_clear_groups_bic_picks_four_not_two():
    values = {}
    for j, start in enumerate([1.00, 1.08, 1.16, 1.24]):
        values.update(group(f"g{j}", start, 12, 0.0015))
    r = classify_group(fleet(values), lower_is_better=True)
    check_invariants(r)
    assert r.k_regular == 4
    for j in range(4):
        assert members(r, j) == {u for u in values if u.startswith(f"g{j}")}
    # the middle half (ranks 13-36 of 48) is the second and third tier, all of each
    means = [start + 0.0015 * 5.5 for start in [1.00, 1.08, 1.16, 1.24]]
    ref = (means[1] + means[2]) / 2
    assert [b.slowdown for b in r.bins] == pytest.approx([m / ref for m in means])


def test_max_bins_caps_k():
    # two pairs of tight tiers: BIC alone finds 4, capped at 2 it must pair them up
    values = {}
    for j, start in enumerate([1.00, 1.02, 1.20, 1.22]):
        values.update(group(f"g{j}", start, 12, 0.0005))
    assert classify_group(fleet(values), lower_is_better=True).k_regular == 4
    r = classify_group(fleet(values), lower_is_better=True, params=ClassifyParams(**BIC, max_bins=2))
    check_invariants(r)
    assert r.k_regular == 2 and len(r.bins) == 2
    assert members(r, 0) == {u for u in values if u[:2] in ("g0", "g1")}
    assert "K=1..2" in r.criterion
    r = classify_group(fleet(values), lower_is_better=True, params=ClassifyParams(**BIC, max_bins=1))
    assert r.k_regular == 1 and len(r.bins) == 1 and r.bins[0].slowdown == 1.0


def test_noisy_unimodal_fleet_gets_one_bin():
    rng = np.random.default_rng(7)
    values = {f"gpu{i:03d}": float(v) for i, v in enumerate(rng.normal(1.0, 0.02, 300))}
    r = classify_group(fleet(values), lower_is_better=True)
    check_invariants(r)
    assert r.k_regular == 1
    regular = [b for b in r.bins if not b.outlier]
    assert len(regular) == 1 and regular[0].slowdown == 1.0


def test_uniform_fleet_is_not_split():
    # evenly spread values carry no evidence of tiers; the artifact's fixed K=2 would split them
    r = classify_group(fleet(group("g", 0.95, 41, 0.0025)), lower_is_better=True)
    assert r.k_regular == 1 and len(r.bins) == 1 and r.bins[0].slowdown == 1.0


# ----------------------------------------------------------------------------- outliers


def test_one_slow_outlier_gets_own_bin_and_is_excluded_from_reference():
    regular = group("r", 1.00, 19)  # 1.000 .. 1.018, median 1.009
    r = classify_group(fleet({**regular, "slow": 1.5}), lower_is_better=True)
    check_invariants(r)
    assert r.k_regular == 1 and len(r.bins) == 2
    g = by_uuid(r)["slow"]
    assert g.outlier and g.bin == 1 and r.bins[1].outlier and r.bins[1].gpus == 1
    assert not r.bins[0].outlier and members(r, 0) == set(regular)
    fleet_median = 1.009  # median of the 19 regular GPUs' medians (the outlier is left out)
    assert r.fleet_median_score == pytest.approx(fleet_median)
    assert g.perfvar == pytest.approx(1.5 / fleet_median)
    # reference = the regular centroid only (a median over both centroids would make it != 1)
    assert r.bins[0].slowdown == 1.0
    assert g.slowdown == pytest.approx(1.5 / 1.009)
    assert g.slowdown > 1.4


def test_fast_outlier_is_flagged_in_its_own_bin_with_the_typical_factor():
    regular = group("r", 1.00, 19)
    alone = classify_group(fleet(regular), lower_is_better=True)
    r = classify_group(fleet({**regular, "fast": 0.5}), lower_is_better=True)
    check_invariants(r)
    g = by_uuid(r)["fast"]
    assert g.outlier and g.fast and g.bin == 0 and g.slowdown == 1.0
    assert r.bins[0] == Bin(0, 0.5 / 1.009, 1.0, 1, True, 0.5 / 1.009, 0.5 / 1.009, fast=True)
    # the healthy GPUs are classified exactly as without it
    assert [x for x in r.gpus if x.uuid != "fast"] == [dataclasses.replace(x, bin=x.bin + 1) for x in alone.gpus]


def test_outlier_min_excess_guards_zero_mad():
    base = {f"g{i}": 1.0 for i in range(9)}  # MAD = 0
    r = classify_group(fleet({**base, "bit_slow": 1.08}), lower_is_better=True)
    assert not by_uuid(r)["bit_slow"].outlier  # 0.08 excess < 0.10 (the default)
    r = classify_group(fleet({**base, "slow": 1.15}), lower_is_better=True)
    check_invariants(r)
    assert by_uuid(r)["slow"].outlier  # 0.15 > max(0.10, 0)
    assert r.k_regular == 1 and r.bins[0].slowdown == 1.0 and r.bins[1].slowdown == pytest.approx(1.15)


def test_outlier_rule_uses_modified_z():
    # regular PerfVars spread so that MAD is known: 1.00 .. 1.018 in 0.001 steps (19 GPUs, median 1.009)
    regular = group("r", 1.00, 19)
    # with the probe added the median is 1.0095 and MAD = 0.005 (raw units, before normalising)
    # threshold (raw) = 3.5 * 1.4826 * 0.005 = 0.0259455 ; probes at +0.0255 and +0.0265 from 1.0095
    # min_excess 0 so that only the z-rule decides
    params = ClassifyParams(**BIC, outlier_min_excess=0.0)
    below = classify_group(fleet({**regular, "p": 1.0095 + 0.0255}), lower_is_better=True, params=params)
    above = classify_group(fleet({**regular, "p": 1.0095 + 0.0265}), lower_is_better=True, params=params)
    assert not by_uuid(below)["p"].outlier
    assert by_uuid(above)["p"].outlier


def test_several_outliers_each_get_a_bin():
    values = {**group("r", 1.00, 30), "s1": 1.4, "s2": 1.6, "s3": 1.6}
    r = classify_group(fleet(values), lower_is_better=True)
    check_invariants(r)
    out_bins = [b for b in r.bins if b.outlier]
    assert len(out_bins) == 3 and all(b.gpus == 1 for b in out_bins)
    assert [g.bin for g in r.gpus if g.outlier] == [1, 2, 3]  # s1, s2, s3 (tie broken by uuid)
    assert r.bins[0].slowdown == 1.0


# ----------------------------------------------------------------------------- degenerate fleets


def test_all_equal():
    r = classify_group(fleet({f"g{i}": 2.0 for i in range(6)}), lower_is_better=True)
    check_invariants(r)
    assert r.k_regular == 1 and len(r.bins) == 1
    assert r.bins[0] == Bin(0, 1.0, 1.0, 6, False, 1.0, 1.0)
    assert all(g.perfvar == 1.0 and g.slowdown == 1.0 and not g.outlier for g in r.gpus)
    assert "all values equal" in r.criterion


def test_one_gpu():
    r = classify_group({"only": [3.0, 1.0, 2.0]}, lower_is_better=True)
    check_invariants(r)
    assert r.fleet_median_score == 2.0 and r.k_regular == 1
    noise = 1.2533141373155 * 0.5 / math.sqrt(3)  # runs at PerfVar 0.5, 1.0, 1.5: standard deviation 0.5
    assert r.gpus == (GpuResult("only", 3, 2.0, 1.0, 0, 1.0, False, True, noise=pytest.approx(noise)),)


def test_two_gpus_never_outliers():
    r = classify_group(fleet({"a": 1.0, "b": 3.0}), lower_is_better=True)
    check_invariants(r)
    assert not any(g.outlier for g in r.gpus)


def test_empty_input():
    r = classify_group({}, lower_is_better=True)
    assert r == GroupResult(None, 0, r.criterion, (), (), method="bic")


def test_no_profiled_gpu():
    r = classify_group({"a": [1.0, 1.0], "b": [], "c": [float("nan")] * 5}, lower_is_better=False)
    assert r.fleet_median_score is None and r.k_regular == 0 and r.bins == ()
    assert [g.profiled for g in r.gpus] == [False, False, False]
    assert by_uuid(r)["a"].median_score == 1.0 and by_uuid(r)["b"].median_score is None
    assert [g.runs for g in r.gpus] == [2, 0, 0]


def test_missing_and_invalid_runs():
    nan, inf = float("nan"), float("inf")
    runs = {
        "good1": [1.0, 1.0, 1.0],
        "good2": [1.2, 1.2, 1.2],
        "good3": [1.1, nan, 1.1, -5.0, 1.1, 0.0, inf, -inf],  # 3 valid runs
        "short": [9.0, 9.0, nan, -1.0, 0.0],  # 2 valid runs -> unprofiled
        "junk": [None, "x", nan],  # type: ignore[list-item]
        "empty": [],
    }
    r = classify_group(runs, lower_is_better=True)
    check_invariants(r)
    g = by_uuid(r)
    assert g["good3"].runs == 3 and g["good3"].median_score == 1.1 and g["good3"].profiled
    assert g["short"] == GpuResult("short", 2, 9.0, None, None, None, False, False)
    assert g["junk"] == GpuResult("junk", 0, None, None, None, None, False, False)
    assert g["empty"].runs == 0 and not g["empty"].profiled
    # the unprofiled GPUs (median 9.0) do not move the fleet median
    assert r.fleet_median_score == 1.1
    assert g["good1"].perfvar == pytest.approx(1.0 / 1.1)
    assert sum(b.gpus for b in r.bins) == 3


def test_min_runs_param():
    runs = {"a": [1.0], "b": [1.0, 1.0], "c": [2.0, 2.0]}
    assert [g.profiled for g in classify_group(runs, lower_is_better=True).gpus] == [False, False, False]
    r = classify_group(runs, lower_is_better=True, params=ClassifyParams(**BIC, min_runs=2))
    assert [g.profiled for g in r.gpus] == [False, True, True]
    assert r.fleet_median_score == 1.5


# ----------------------------------------------------------------------------- direction


def test_direction_throughput_is_mirror_of_time():
    throughput = {**{f"g{i}": 100.0 for i in range(9)}, "half": 50.0, "double": 200.0}
    r_thr = classify_group(fleet(throughput), lower_is_better=False)
    check_invariants(r_thr)
    assert r_thr.fleet_median_score == 100.0
    g = by_uuid(r_thr)
    assert g["half"].perfvar == 2.0 and g["double"].perfvar == 0.5 and g["g0"].perfvar == 1.0
    assert g["half"].outlier and not g["half"].fast
    assert g["double"].outlier and g["double"].fast and g["double"].slowdown == 1.0  # twice as fast: suspect
    # the same GPUs measured as times (1 / throughput) give the same PerfVars and bins
    times = {u: 1.0 / v for u, v in throughput.items()}
    r_time = classify_group(fleet(times), lower_is_better=True)
    assert [x.perfvar for x in r_time.gpus] == pytest.approx([x.perfvar for x in r_thr.gpus])
    assert [x.bin for x in r_time.gpus] == [x.bin for x in r_thr.gpus]
    assert [x.slowdown for x in r_time.gpus] == pytest.approx([x.slowdown for x in r_thr.gpus])
    # and reading throughputs as if they were times flips the picture
    r_wrong = classify_group(fleet(throughput), lower_is_better=True)
    assert by_uuid(r_wrong)["half"].perfvar == 0.5


# ----------------------------------------------------------------------------- determinism


def test_deterministic_under_shuffled_order():
    rng = random.Random(3)
    runs = {}
    for i in range(200):
        tier = [1.0, 1.07, 1.15][i % 3]
        runs[f"gpu-{i:03d}"] = [tier * rng.gauss(1.0, 0.01) for _ in range(rng.randint(2, 6))]
    runs["dup-a"] = [1.07] * 3  # exact ties in PerfVar
    runs["dup-b"] = [1.07] * 3
    runs["bad"] = [float("nan"), 1.0, 1.0, 1.0]
    reference = classify_group(runs, lower_is_better=True)
    check_invariants(reference)
    assert reference.k_regular >= 2
    for _ in range(5):
        items = list(runs.items())
        rng.shuffle(items)
        shuffled = {u: rng.sample(v, len(v)) for u, v in items}
        assert classify_group(shuffled, lower_is_better=True) == reference


# ----------------------------------------------------------------------------- params and helpers


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"min_runs": 0}, "min_runs"),
        ({"max_bins": 0}, "max_bins"),
        ({"min_runs": 2.5}, "min_runs"),
        ({"outlier_z": -1.0}, "outlier_z"),
        ({"outlier_min_excess": -0.01}, "outlier_min_excess"),
        ({"hysteresis": -0.1}, "hysteresis"),
        ({"hysteresis": float("nan")}, "hysteresis"),
    ],
)
def test_params_validation(kwargs, field):
    with pytest.raises(ValueError, match=field):
        ClassifyParams(**kwargs)


def test_params_as_dict_roundtrip():
    p = ClassifyParams(**BIC, min_runs=5, max_bins=4, outlier_z=3.0, outlier_min_excess=0.05, hysteresis=0.01)
    d = p.as_dict()
    assert d == {"min_runs": 5, "max_bins": 4, "outlier_z": 3.0, "outlier_min_excess": 0.05, "hysteresis": 0.01,
                 "min_bin_gap": 0.01, "method": "bic", "run_ratio": 10.0}
    assert ClassifyParams(**d) == p
    with pytest.raises(Exception):
        p.min_runs = 1  # type: ignore[misc]  # frozen


def test_percentile_summary():
    s = percentile_summary([float(i) for i in range(101)])
    assert s == {"min": 0.0, "p5": 5.0, "median": 50.0, "p95": 95.0, "max": 100.0}
    s = percentile_summary([2.0, 1.0, float("nan")])
    assert s["p5"] == pytest.approx(1.05) and s["median"] == 1.5 and s["p95"] == pytest.approx(1.95)
    with pytest.raises(ValueError):
        percentile_summary([])


def test_twenty_thousand_gpus_are_all_binned():
    rng = np.random.default_rng(11)
    tiers = rng.choice([1.0, 1.06, 1.13], size=20_000)
    medians = tiers * rng.normal(1.0, 0.004, size=20_000)
    runs = {f"gpu-{i:05d}": (m * rng.normal(1.0, 0.002, size=5)).tolist() for i, m in enumerate(medians)}
    r = classify_group(runs, lower_is_better=True)
    assert r.k_regular >= 3
    assert sum(b.gpus for b in r.bins) == 20_000
    assert math.isclose(sum(1 for g in r.gpus if g.bin is not None), 20_000)


def test_min_bin_gap_merges_tiers_tighter_than_noise():
    tiers = {**group("a", 1.000, 6, step=0.0), **group("b", 1.001, 6, step=0.0), **group("c", 1.002, 6, step=0.0)}
    merged = classify_group(fleet(tiers), lower_is_better=True)
    assert merged.k_regular == 1
    split = classify_group(fleet(tiers), lower_is_better=True, params=ClassifyParams(**BIC, min_bin_gap=0.0))
    assert split.k_regular == 3
    apart = {**group("a", 1.00, 6, step=0.0), **group("b", 1.05, 6, step=0.0)}
    assert classify_group(fleet(apart), lower_is_better=True).k_regular == 2
