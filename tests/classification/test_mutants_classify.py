"""The classification steps (pal_slurm/classification/classify.py, its bins in partition.py and
its statistics in stats.py; docs/classification.md) on the cases the rest of the suite leaves open (each found by `make mutation`, or by dropping the
noise clip by hand): the pooled noise and its clip, the statistics the steps are defined by
(the mixture BIC, the chi-square quantile, the homogeneity test), the limits of K and the
words that say how it was chosen, broken runs, the parameters' checks, single-run GPUs,
hysteresis ties and gaps, and each GPU's own factor."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

from pal_slurm.classification import classify as c
from pal_slurm.classification import partition as p
from pal_slurm.classification.classify import classify_group
from pal_slurm.classification.model import ClassifyParams
from pal_slurm.classification.stats import percentile_summary, robust_median

# --------------------------------------------------------------------------- the pooled noise and its clip


def _spread(erratic: bool) -> dict[str, list[float]]:
    """20 GPUs evenly over 0.90..1.10 (run times), each run within 0.2 % of its median; with
    `erratic`, one more GPU of median speed whose runs scatter by 30 %."""
    runs = {f"g{i:02d}": [b * 0.998, b, b * 1.002] for i, b in ((i, 0.90 + 0.2 * i / 19) for i in range(20))}
    if erratic:
        runs["g20"] = [0.7, 1.0, 1.3]
    return runs


def test_one_erratic_gpu_does_not_blur_every_bin() -> None:
    """docs/classification.md, step 4: each GPU's squared error counts at most 10x the median
    one in the pooled noise, so one GPU whose runs scatter does not make a continuous spread
    look like noise: the fleet keeps its bins (unclipped it was one bin, noise 0.047)."""
    clean = classify_group(_spread(False), lower_is_better=True)
    noisy = classify_group(_spread(True), lower_is_better=True)
    assert clean.k_regular == noisy.k_regular == 8
    assert clean.noise is not None and noisy.noise is not None and noisy.noise < 1.25 * clean.noise


def test_the_pooled_noise_is_the_mean_squared_error_each_clipped_at_ten_times_the_median() -> None:
    """The formula of step 4, computed here from the runs: a GPU's standard error is
    sqrt(pi/2) * sd(its runs' PerfVars) / sqrt(runs)."""
    runs = _spread(True)
    r = classify_group(runs, lower_is_better=True)
    fleet = r.fleet_median_score
    assert fleet is not None
    se2 = []
    for u, scores in runs.items():
        pv = [s / fleet for s in scores]
        se2.append((math.sqrt(math.pi / 2) * statistics.stdev(pv) / math.sqrt(len(pv))) ** 2)
    cap = 10.0 * statistics.median(se2)
    assert r.noise == pytest.approx(math.sqrt(statistics.fmean(min(v, cap) for v in se2)), rel=1e-9)
    assert c.NOISE_CLIP == 10.0


def test_a_fleet_measured_without_any_run_noise_has_the_variance_floor_as_its_noise() -> None:
    runs = {f"g{i}": [1.0 + i / 100] * 3 for i in range(5)}
    assert classify_group(runs, lower_is_better=True).noise == pytest.approx(1e-4 * 1.0, rel=1e-9)


def test_gpus_with_one_run_have_no_noise_and_a_group_of_them_none_either() -> None:
    params = ClassifyParams(min_runs=1)
    single = classify_group({"a": [1.0], "b": [1.1], "c": [1.2]}, lower_is_better=True, params=params)
    assert single.noise is None and all(g.noise is None for g in single.gpus)
    assert single.criterion.startswith("BIC over K=1..")
    # mixed: the one-run GPU is shrunk by the pooled noise, the others by their own
    mixed = classify_group({"a": [1.0], "b": [1.1, 1.1], "c": [1.2, 1.21], "d": [1.3, 1.31]},
                           lower_is_better=True, params=params)
    assert mixed.noise is not None and {g.uuid: g.noise is None for g in mixed.gpus} == {
        "a": True, "b": False, "c": False, "d": False}
    two = classify_group({"a": [1.0, 1.02], "b": [1.1, 1.12]}, lower_is_better=True,
                         params=ClassifyParams(min_runs=2))
    assert all(g.noise is not None for g in two.gpus)


def test_a_gpus_noise_is_the_standard_error_of_its_median_also_far_from_the_typical_gpu() -> None:
    runs = {"a": [1.0, 1.0, 1.0], "b": [1.0, 1.0, 1.0], "c": [1.0, 1.0, 1.0], "slow": [2.0, 2.2, 2.4]}
    r = classify_group(runs, lower_is_better=True)
    slow = next(g for g in r.gpus if g.uuid == "slow")
    want = math.sqrt(math.pi / 2) * statistics.stdev([2.0, 2.2, 2.4]) / math.sqrt(3)
    assert slow.noise == pytest.approx(want, rel=1e-9)


# --------------------------------------------------------------------------- the statistics the steps use


def _reference_bic(x: list[float], segments: list[tuple[int, int]], floor_var: float) -> float:
    """docs/classification.md step 4's BIC, written out: weights n_k/n, means, unbiased
    variances (a singleton: the squared gap to its nearest neighbour outside; a zero-variance
    cluster: that squared gap / 36), floored; -2 log L + (3K - 1) log n."""
    n, params = len(x), []
    for s, e in segments:
        m, members = e - s, x[s:e]
        mu = sum(members) / m
        var = sum((v - mu) ** 2 for v in members) / (m - 1) if m > 1 else 0.0
        if m == 1 or var == 0.0:
            gaps = ([x[s] - x[s - 1]] if s > 0 else []) + ([x[e] - x[e - 1]] if e < n else [])
            d = min(gaps) if gaps else 0.0
            var = d * d if m == 1 else d * d / 36.0
        params.append((m / n, mu, max(var, floor_var)))
    loglik = sum(math.log(sum(w * math.exp(-(v - mu) ** 2 / (2 * var)) / math.sqrt(2 * math.pi * var)
                              for w, mu, var in params)) for v in x)
    return -2.0 * loglik + (3 * len(segments) - 1) * math.log(n)


@pytest.mark.parametrize(("x", "segments"), [
    ([0.90, 0.95, 1.0, 1.0, 1.0, 1.1, 1.3, 1.45], [(0, 8)]),
    ([0.90, 0.95, 1.0, 1.0, 1.0, 1.1, 1.3, 1.45], [(0, 2), (2, 5), (5, 6), (6, 8)]),
    ([0.90, 0.95, 1.0, 1.0, 1.0, 1.1, 1.3, 1.45], [(0, 1), (1, 8)]),
    ([0.90, 0.95, 1.0, 1.0, 1.0, 1.1, 1.3, 1.45], [(0, 4), (4, 7), (7, 8)]),
    ([0.90, 1.0, 1.0, 1.5], [(0, 1), (1, 3), (3, 4)]),  # a zero-variance bin whose nearer neighbour is left
    ([1.0, 1.0, 1.0, 1.0], [(0, 4)]),  # no neighbour at all: the floor
])
@pytest.mark.parametrize("floor_var", [1e-8, 1e-3])
def test_the_mixture_bic_is_the_documented_one(x: list[float], segments: list[tuple[int, int]],
                                               floor_var: float) -> None:
    got = p._mixture_bic(np.asarray(x), segments, floor_var)
    assert got == pytest.approx(_reference_bic(x, segments, floor_var), rel=1e-9, abs=1e-9)


def test_the_chi_square_quantile_is_within_one_percent_of_the_table() -> None:
    table = {1: 6.634897, 2: 9.210340, 3: 11.344867, 5: 15.086272, 10: 23.209251, 30: 50.892181, 100: 135.806723}
    for df, want in table.items():
        assert p._chi2_quantile_99(df) == pytest.approx(want, rel=0.01), df


def test_a_bin_is_homogeneous_when_its_spread_is_within_the_noise_at_99_percent() -> None:
    x = np.asarray([0.0, 1.0, 1.0, 1.3, 2.0])
    assert p._homogeneous(x, (2, 3), 1e-6), "one GPU"
    assert p._homogeneous(x, (1, 3), 0.0), "equal values, no noise"
    assert not p._homogeneous(x, (2, 4), 0.0), "different values, no noise"
    # two GPUs 0.3 apart: sum of squares 0.045; chi2_0.99(1) = 6.63 (df 3 would be 11.3)
    assert not p._homogeneous(x, (2, 4), 0.045 / 8.0)
    assert p._homogeneous(x, (2, 4), 0.045 / 6.0)


def test_percentile_summary_refuses_nothing_with_a_message() -> None:
    with pytest.raises(ValueError, match=r"^percentile_summary: no finite values$"):
        percentile_summary([math.nan])


# --------------------------------------------------------------------------- K: its limits and its words


def test_k_is_at_most_the_number_of_distinct_values_and_the_criterion_says_the_range() -> None:
    segments, why = p.choose_partition([1.0, 1.0, 2.0, 2.0], 8, 0.0)
    assert segments == [(0, 2), (2, 4)]
    assert why.startswith("BIC over K=1..2 (") and why.endswith("chose K=2")
    assert p.choose_partition([1.0], 8)[1] == "K=1 (one GPU; no choice to make)"
    assert p.choose_partition([1.0, 1.0], 8)[1] == "K=1 (all values equal; no choice to make)"
    assert p.choose_partition([1.0, 2.0], 1)[1] == "K=1 (max_bins=1; no choice to make)"


def test_bins_exactly_the_minimum_gap_apart_are_allowed() -> None:
    assert p.choose_partition([1.0, 1.0, 1.25, 1.25], 8, 0.25)[0] == [(0, 2), (2, 4)]


def test_perfvars_closer_than_the_variance_floor_are_one_bin_even_without_a_gap() -> None:
    """The floor (0.01 % of the median, as a standard deviation) keeps BIC from splitting GPUs
    that differ by less than that: two groups 0.001 % apart are one bin."""
    assert p.choose_partition([1.0] * 5 + [1.00001] * 5, 8, 0.0)[0] == [(0, 10)]


def test_shrink_splits_up_to_the_number_of_distinct_values_and_says_what_limited_it() -> None:
    values = [0.90 + 0.01 * i for i in range(12)]
    segments, why = p.resolve_partition(values, [(0, 12)], 8, 0.0, 1e-12)
    assert len(segments) == 8 and why == "K=8: bins still wider than measurement noise, limited by max_bins=8"
    segments, why = p.resolve_partition(values, [(0, 12)], 20, 0.0, 1e-12)
    assert len(segments) == 12 and why.startswith("K=12: the smallest K >= 1 whose every bin is within measurement noise")
    segments, why = p.resolve_partition(values, [(0, 12)], 20, 0.05, 1e-12)
    assert why.endswith("limited by min_bin_gap=0.05") and len(segments) < 12
    segments, why = p.resolve_partition([1.0, 1.0, 1.0, 3.0, 3.0, 3.0], [(0, 6)], 8, 0.0, 1e-6)
    assert segments == [(0, 3), (3, 6)]


def test_the_criterion_names_every_step_of_the_method() -> None:
    r = classify_group(_spread(False), lower_is_better=True)
    assert r.criterion.startswith("BIC over K=1..8") and r.criterion.endswith("(method shrink)")
    none = classify_group({"a": [1.0]}, lower_is_better=True)
    assert none.criterion == "no profiled GPU (none has min_runs valid runs)" and none.k_regular == 0
    bic = classify_group(_spread(False), lower_is_better=True, params=ClassifyParams(method="bic"))
    assert bic.method == "bic"


def test_pal_k2_makes_one_bin_of_identical_gpus_or_when_max_bins_is_one() -> None:
    same = {f"g{i}": [1.0, 1.0, 1.0] for i in range(6)}
    r = classify_group(same, lower_is_better=True, params=ClassifyParams(method="pal-k2"))
    assert r.k_regular == 1 and [b.gpus for b in r.bins] == [6]
    r = classify_group(_spread(False), lower_is_better=True, params=ClassifyParams(method="pal-k2", max_bins=1))
    assert r.k_regular == 1 and [b.gpus for b in r.bins] == [20]
    r = classify_group(_spread(False), lower_is_better=True, params=ClassifyParams(method="pal-k2"))
    assert r.k_regular == 2 and sum(b.gpus for b in r.bins) == 20


# --------------------------------------------------------------------------- runs and parameters


def test_a_broken_run_among_three_is_dropped_and_the_ratio_is_inclusive() -> None:
    assert robust_median([1.0, 1.0, 100.0], 10.0) == (1.0, [1.0, 1.0])
    assert robust_median([0.1, 1.0, 10.0], 10.0) == (1.0, [0.1, 1.0, 10.0])
    assert robust_median([1.0, 1.0, 100.0], 0) == (1.0, [1.0, 1.0, 100.0])


def test_an_unreadable_run_is_skipped_not_the_runs_after_it() -> None:
    r = classify_group({"a": [1.0, "x", 1.0, 1.0], "b": [1.0, 1.0, 1.0]}, lower_is_better=True)  # type: ignore[list-item]
    assert {g.uuid: g.runs for g in r.gpus} == {"a": 3, "b": 3}


def test_an_unprofiled_gpu_reports_the_runs_it_dropped() -> None:
    r = classify_group({"a": [1.0, 1.0, 1.0], "b": [1.0, 1000.0, 1.0 / 1000]}, lower_is_better=True,
                       params=ClassifyParams(min_runs=3))
    b = next(g for g in r.gpus if g.uuid == "b")
    assert not b.profiled and b.dropped == 2 and b.runs == 1


def test_the_parameters_are_checked_with_words_that_name_what_is_valid() -> None:
    with pytest.raises(ValueError, match=r"^ClassifyParams\.method must be one of shrink, bic, pal-k2, got 'x'$"):
        ClassifyParams(method="x")
    with pytest.raises(ValueError, match="run_ratio must be 0"):
        ClassifyParams(run_ratio="10")  # type: ignore[arg-type]
    ClassifyParams(run_ratio=1.5)
    with pytest.raises(ValueError, match=r"^ClassifyParams\.outlier_z must be a number, got '3'$"):
        ClassifyParams(outlier_z="3")  # type: ignore[arg-type]


def test_with_no_outlier_threshold_at_all_no_gpu_is_an_outlier() -> None:
    """outlier_z = outlier_min_excess = 0 would flag every GPU off the median: none is flagged."""
    runs = {"a": [0.9] * 3, "b": [0.95] * 3, "c": [1.05] * 3, "d": [1.1] * 3}
    r = classify_group(runs, lower_is_better=True, params=ClassifyParams(outlier_z=0, outlier_min_excess=0))
    assert not any(g.outlier for g in r.gpus) and all(g.profiled for g in r.gpus)


# --------------------------------------------------------------------------- hysteresis


def _tiers(extra: dict[str, list[float]] | None = None) -> dict[str, list[float]]:
    """Six GPUs at 1.0, two at 1.5 (identical runs: exact PerfVars; the anchor is 1.0)."""
    runs = {f"a{i}": [1.0] * 3 for i in range(6)} | {f"b{i}": [1.5] * 3 for i in range(2)}
    return runs | (extra or {})


#: no outliers: these tests are about the regular bins
NO_OUTLIERS = {"outlier_z": 100.0, "outlier_min_excess": 5.0}


def test_a_gpu_midway_between_two_bins_stays_in_its_own_on_a_tie() -> None:
    params = ClassifyParams(method="bic", hysteresis=0.5, **NO_OUTLIERS)
    base = classify_group(_tiers(), lower_is_better=True, params=params)
    assert [b.slowdown for b in base.bins] == [1.0, 1.5]
    r = classify_group(_tiers(), lower_is_better=True, params=params, previous={"b0": 1.25})
    assert next(g for g in r.gpus if g.uuid == "b0").slowdown == 1.5


def test_hysteresis_skips_gpus_with_no_usable_previous_factor_and_goes_on() -> None:
    params = ClassifyParams(method="bic", hysteresis=0.6, **NO_OUTLIERS)
    previous = {"a0": "n/a", "b0": 1.0}  # type: ignore[dict-item]
    r = classify_group(_tiers(), lower_is_better=True, params=params, previous=previous)  # type: ignore[arg-type]
    assert next(g for g in r.gpus if g.uuid == "b0").slowdown == 1.0, "b0 kept its previous bin"


def test_a_bin_hysteresis_empties_is_dropped_and_the_bins_after_it_kept() -> None:
    """Three tiers; both GPUs of the middle one keep their previous, faster bin."""
    runs = _tiers() | {f"c{i}": [2.5] * 3 for i in range(2)}
    before = classify_group(runs, lower_is_better=True, params=ClassifyParams(method="bic", **NO_OUTLIERS))
    assert [b.gpus for b in before.bins] == [6, 2, 2]
    params = ClassifyParams(method="bic", hysteresis=0.6, **NO_OUTLIERS)
    r = classify_group(runs, lower_is_better=True, params=params, previous={"b0": 0.87, "b1": 0.87})
    assert [(b.index, b.slowdown, b.gpus) for b in r.bins] == [(0, before.bins[0].slowdown, 8),
                                                               (1, before.bins[2].slowdown, 2)]
    assert {g.uuid: g.bin for g in r.gpus if g.uuid[0] != "a"} == {"b0": 0, "b1": 0, "c0": 1, "c1": 1}


# --------------------------------------------------------------------------- each GPU's own factor


def test_each_gpus_factor_is_its_perfvar_shrunk_toward_its_bin_by_its_own_noise() -> None:
    """Step 6: theta = c + w (PerfVar - c), w = tau^2 / (tau^2 + se^2), factor theta / anchor;
    a two-GPU bin is shrunk too, and a GPU measured without noise keeps its own PerfVar."""
    runs = {f"a{i}": [1.0, 1.03, 0.97] for i in range(6)} | {"p": [1.45, 1.45, 1.45], "q": [1.50, 1.52, 1.48]}
    r = classify_group(runs, lower_is_better=True, params=ClassifyParams(**NO_OUTLIERS))
    g = {x.uuid: x for x in r.gpus}
    assert g["p"].bin == g["q"].bin and g["p"].bin != g["a0"].bin
    bin_pq = r.bins[g["p"].bin]
    anchor = bin_pq.centroid / bin_pq.slowdown
    assert g["p"].slowdown == pytest.approx(g["p"].perfvar / anchor, rel=1e-12), "no noise: its own PerfVar"
    noise_var = r.noise ** 2
    tau2 = max(0.0, statistics.variance([g["p"].perfvar, g["q"].perfvar]) - noise_var)
    w = tau2 / (tau2 + g["q"].noise ** 2)
    theta = bin_pq.centroid + w * (g["q"].perfvar - bin_pq.centroid)
    assert g["q"].slowdown == pytest.approx(theta / anchor, rel=1e-9)
    assert 0.0 < w < 1.0


def test_a_gpu_without_its_own_noise_is_shrunk_by_the_pooled_noise() -> None:
    runs = {f"a{i}": [1.0, 1.01, 0.99] for i in range(6)} | {"p": [1.4], "q": [1.5, 1.52, 1.48]}
    r = classify_group(runs, lower_is_better=True,
                       params=ClassifyParams(min_runs=1, outlier_z=100.0, outlier_min_excess=5.0))
    g = {x.uuid: x for x in r.gpus}
    bin_pq = r.bins[g["p"].bin]
    anchor = bin_pq.centroid / bin_pq.slowdown
    tau2 = max(0.0, statistics.variance([g["p"].perfvar, g["q"].perfvar]) - r.noise ** 2)
    w = tau2 / (tau2 + r.noise ** 2)
    assert g["p"].slowdown == pytest.approx((bin_pq.centroid + w * (g["p"].perfvar - bin_pq.centroid)) / anchor,
                                            rel=1e-9)


def test_a_slow_outliers_factor_is_its_perfvar_over_the_anchor() -> None:
    """A fleet whose middle half straddles two bins: the anchor lies between them (not 1.0)."""
    runs = {f"a{i}": [0.9] * 3 for i in range(4)} | {f"b{i}": [1.1] * 3 for i in range(6)} | {"slow": [3.0] * 3}
    params = ClassifyParams(method="bic", outlier_z=100.0, outlier_min_excess=0.5)
    r = classify_group(runs, lower_is_better=True, params=params)
    regular = [b for b in r.bins if not b.outlier]
    anchor = regular[0].centroid / regular[0].slowdown
    assert anchor != pytest.approx(1.0, abs=1e-3)
    slow = next(g for g in r.gpus if g.uuid == "slow")
    assert slow.outlier and slow.slowdown == pytest.approx(slow.perfvar / anchor, rel=1e-12)


def test_the_hysteresis_band_includes_its_edges() -> None:
    """Bins at exactly 1.0 and 1.25 with hysteresis 0.25: a 1.25 GPU previously at 1.0 lies on
    the upper edge of bin 1.0's band, a 1.0 GPU previously at 1.25 on the lower edge of the other's."""
    runs = {f"a{i}": [1.0] * 3 for i in range(6)} | {"b0": [1.25] * 3, "b1": [1.25] * 3}
    params = ClassifyParams(method="bic", hysteresis=0.25, min_bin_gap=0.2, **NO_OUTLIERS)
    r = classify_group(runs, lower_is_better=True, params=params, previous={"b0": 1.0, "a0": 1.25})
    bins = {g.uuid: g.bin for g in r.gpus}
    assert (bins["b0"], bins["b1"], bins["a0"], bins["a1"]) == (0, 1, 1, 0)


def test_gpus_off_the_median_by_exactly_the_threshold_are_not_outliers() -> None:
    runs = {f"a{i}": [1.0] * 3 for i in range(5)} | {"slow": [1.25] * 3, "fast": [0.75] * 3}
    r = classify_group(runs, lower_is_better=True, params=ClassifyParams(outlier_min_excess=0.25))
    assert not any(g.outlier for g in r.gpus)


def test_shrink_can_split_into_as_many_bins_as_there_are_distinct_values() -> None:
    segments, why = p.resolve_partition([1.0, 1.1, 1.2, 1.3, 1.4], [(0, 5)], 8, 0.0, 1e-12)
    assert len(segments) == 5 and why.startswith("K=5: the smallest K")


def test_every_multi_gpu_bin_is_shrunk_also_after_a_one_gpu_bin() -> None:
    """The fastest regular bin holds one GPU (nothing to shrink); the slowest two, still shrunk."""
    runs = {"s": [0.8] * 3} | {f"a{i}": [1.0, 1.03, 0.97] for i in range(6)} | \
        {"p": [1.45] * 3, "q": [1.50, 1.52, 1.48]}
    r = classify_group(runs, lower_is_better=True, params=ClassifyParams(**NO_OUTLIERS))
    g = {x.uuid: x for x in r.gpus}
    assert r.bins[g["s"].bin].gpus == 1 and g["p"].bin == g["q"].bin
    assert g["q"].slowdown != r.bins[g["q"].bin].slowdown and g["q"].slowdown < g["q"].perfvar


def test_gpus_measured_once_each_keep_their_own_perfvar_as_factor() -> None:
    """No GPU has two runs: there is no noise to shrink by, each factor is its PerfVar / anchor."""
    runs = {f"g{i}": [0.9 + 0.02 * i] for i in range(10)}
    r = classify_group(runs, lower_is_better=True, params=ClassifyParams(min_runs=1, **NO_OUTLIERS))
    assert r.noise is None
    for g in r.gpus:
        b = r.bins[g.bin]
        assert g.slowdown == pytest.approx(g.perfvar / (b.centroid / b.slowdown), rel=1e-12)


def test_shrunk_factors_are_divided_by_an_anchor_that_is_not_one() -> None:
    runs = {f"a{i}": [0.9, 0.92, 0.88] for i in range(4)} | {f"b{i}": [1.1, 1.13, 1.07] for i in range(6)}
    r = classify_group(runs, lower_is_better=True, params=ClassifyParams(**NO_OUTLIERS))
    regular = [b for b in r.bins if not b.outlier]
    anchor = regular[0].centroid / regular[0].slowdown
    assert anchor != pytest.approx(1.0, abs=1e-3)
    for g in r.gpus:
        b = r.bins[g.bin]
        ms = [x.perfvar for x in r.gpus if x.bin == g.bin]
        tau2 = max(0.0, statistics.variance(ms) - r.noise ** 2) if len(ms) > 1 else 0.0
        w = tau2 / (tau2 + g.noise ** 2) if len(ms) > 1 else 1.0
        want = (b.centroid + w * (g.perfvar - b.centroid)) / anchor if len(ms) > 1 else b.slowdown
        assert g.slowdown == pytest.approx(want, rel=1e-9), g.uuid
