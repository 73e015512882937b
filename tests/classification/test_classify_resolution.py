"""pal_slurm.classification.classify (docs/classification.md): factors anchored to the typical GPU, fast
outliers that move nobody, and a resolution that serves placement (method shrink).

Pure and fast: hand-made fleets whose answers are known.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from pal_slurm.classification.classify import classify_group
from pal_slurm.classification.model import METHODS, ClassifyParams, GroupResult


def fleet(values: dict[str, float], runs: int = 3) -> dict[str, list[float]]:
    return {u: [v] * runs for u, v in values.items()}


def noisy(values: dict[str, float], *, runs: int = 5, noise: float = 0.01, seed: int = 0) -> dict[str, list[float]]:
    """`runs` runs per GPU with relative (log-normal) run-to-run noise."""
    rng = np.random.default_rng(seed)
    return {u: [v * float(np.exp(rng.normal(0.0, noise))) for _ in range(runs)] for u, v in values.items()}


def even(n: int, lo: float, hi: float, prefix: str = "g") -> dict[str, float]:
    return {f"{prefix}{i:03d}": float(v) for i, v in enumerate(np.linspace(lo, hi, n))}


def by_uuid(r: GroupResult) -> dict:
    return {g.uuid: g for g in r.gpus}


def regular_bins(r: GroupResult):
    return [b for b in r.bins if not b.outlier]


# ----------------------------------------------------------------------------- anchoring


@pytest.mark.parametrize("method", METHODS)
def test_the_majority_bin_reads_one_not_three_percent_fast(method: str) -> None:
    # the demo's pagerank: 63 GPUs in one tier, 1 a bit slower (not an outlier); before: 0.970x63 1.030x1
    values = {**{f"a{i:02d}": 1.0 + 0.0002 * (i % 5) for i in range(63)}, "b": 1.06}
    r = classify_group(fleet(values), lower_is_better=True, params=ClassifyParams(method=method))
    bins = regular_bins(r)
    assert [b.gpus for b in bins] == [63, 1]
    assert bins[0].slowdown == 1.0
    assert bins[1].slowdown == pytest.approx(1.06 / np.mean([1.0 + 0.0002 * (i % 5) for i in range(63)]), rel=1e-9)


def test_longhorn_pagerank_shape_the_big_bin_is_one() -> None:
    # 28 fast GPUs and 144 typical ones; before: 0.985x28 1.015x144 (the majority labelled slow)
    values = {**{f"f{i:03d}": 0.971 + 0.0001 * (i % 3) for i in range(28)},
              **{f"t{i:03d}": 1.0 + 0.0001 * (i % 5) for i in range(144)}}
    r = classify_group(fleet(values), lower_is_better=True, params=ClassifyParams(method="bic"))
    bins = regular_bins(r)
    assert [b.gpus for b in bins] == [28, 144]
    assert bins[1].slowdown == 1.0 and bins[0].slowdown == pytest.approx(0.971 / 1.0002, abs=2e-4)


def test_a_fleet_split_in_halves_is_anchored_between_them() -> None:
    # 10 fast, 10 slow: no bin holds the typical GPU; the middle half is five of each
    values = {**{f"f{i}": 1.0 for i in range(10)}, **{f"s{i}": 1.08 for i in range(10)}}
    r = classify_group(fleet(values), lower_is_better=True, params=ClassifyParams(method="bic"))
    assert [(b.gpus, b.slowdown) for b in r.bins] == [(10, pytest.approx(1.0 / 1.04)), (10, pytest.approx(1.08 / 1.04))]
    # one fast GPU less: 9 fast, 10 slow; the window (ranks 4.75-14.25) holds 4.25 fast, 5.25 slow
    fewer = classify_group(fleet({u: v for u, v in values.items() if u != "f0"}), lower_is_better=True,
                           params=ClassifyParams(method="bic"))
    anchor = (4.25 * 1.0 + 5.25 * 1.08) / 9.5
    assert [b.slowdown for b in fewer.bins] == [pytest.approx(1.0 / anchor), pytest.approx(1.08 / anchor)]
    assert abs(fewer.bins[0].slowdown / r.bins[0].slowdown - 1) < 0.005  # gap / n = 0.4 %


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("seed", range(6))
def test_one_gpu_more_or_less_moves_no_factor_by_half_a_percent(method: str, seed: int) -> None:
    # three tiers whose sizes put the median near a tier boundary, 20-60 GPUs, noisy runs: every
    # single removal and one added GPU keep every other GPU's factor within 0.5 % -- every GPU whose
    # bin keeps its other members (a bin that splits or merges moves its own members, as any binning
    # must; the scale under everyone else must not move)
    rng = np.random.default_rng(seed)
    sizes = rng.integers(6, 21, size=3)
    values = {f"t{t}g{i:02d}": level + 0.001 * i for t, (level, size) in enumerate(zip((1.0, 1.03, 1.07), sizes))
              for i in range(size)}
    runs = noisy(values, runs=4, noise=0.003, seed=seed)
    params = ClassifyParams(method=method)
    first = classify_group(runs, lower_is_better=True, params=params)
    base = {g.uuid: g.slowdown for g in first.gpus}
    variants = [{u: r for u, r in runs.items() if u != drop} for drop in runs]
    variants.append({**runs, "extra": noisy({"extra": 1.03}, runs=4, noise=0.003, seed=99)["extra"]})
    kept_bins = 0
    for variant in variants:
        got = classify_group(variant, lower_is_better=True, params=params)
        common = set(runs) & set(variant)
        before, after = _bin_mates(first, common), _bin_mates(got, common)
        steady = [g for g in got.gpus if g.uuid in common and before[g.uuid] == after[g.uuid]]
        kept_bins += len(steady)
        moved = max(abs(g.slowdown / base[g.uuid] - 1) for g in steady)
        assert moved <= 0.005, (sorted(set(runs) ^ set(variant)), moved)
    assert kept_bins >= 0.9 * len(runs) * len(variants)  # the bound was checked on nearly everyone


def _bin_mates(r: GroupResult, among: set[str]) -> dict[str, frozenset[str]]:
    """Each GPU's bin, as the set of its members among `among`."""
    members: dict[int, set[str]] = {}
    for g in r.gpus:
        if g.uuid in among and g.bin is not None:
            members.setdefault(g.bin, set()).add(g.uuid)
    return {u: frozenset(ms) for ms in members.values() for u in ms}


# ----------------------------------------------------------------------------- fast outliers


BASE = {**{f"a{i:02d}": 0.96 + 0.001 * i for i in range(10)},
        **{f"b{i:02d}": 1.00 + 0.001 * i for i in range(20)},
        **{f"c{i:02d}": 1.05 + 0.001 * i for i in range(10)}}


def others(r: GroupResult, planted: str) -> list[tuple]:
    """What every other GPU got: PerfVar, factor, outlier flags and its bin's members (not its index)."""
    members = {b.index: frozenset(g.uuid for g in r.gpus if g.bin == b.index) for b in r.bins}
    return [(g.uuid, g.perfvar, g.slowdown, g.outlier, g.fast, members.get(g.bin)) for g in r.gpus if g.uuid != planted]


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize(("planted", "runs"), [
    ("ten-times-fast", [0.1, 0.1, 0.1]),
    ("tiny", [1e-300, 1e-300, 1e-300]),  # three runs at 1e-300: a score that underflows every ratio
    ("huge", [1e300, 1e300, 1e300]),
    ("nan", [math.nan] * 3),
    ("negative", [-1.0, -2.0, -3.0]),
])
def test_a_planted_gpu_changes_no_other_gpus_factor(method: str, planted: str, runs: list[float]) -> None:
    params = ClassifyParams(method=method)
    clean = classify_group(noisy(BASE, runs=3, noise=0.002), lower_is_better=True, params=params)
    dirty = classify_group({**noisy(BASE, runs=3, noise=0.002), planted: runs}, lower_is_better=True, params=params)
    assert others(dirty, planted) == others(clean, planted)  # exactly: bitwise equal floats
    g = by_uuid(dirty)[planted]
    if planted in ("ten-times-fast", "tiny"):
        assert g.outlier and g.fast and g.slowdown == 1.0  # flagged, and no speed-up for the placer to chase
        assert dirty.bins[g.bin].fast and dirty.bins[g.bin].gpus == 1 and dirty.bins[g.bin].slowdown == 1.0
    elif planted == "huge":
        assert g.outlier and not g.fast and g.slowdown > 1e299
    else:
        assert not g.profiled and g.slowdown is None


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("bad_run", [1e300, 1e-300, math.nan, -5.0, math.inf])
def test_a_planted_run_changes_no_factor_at_all(method: str, bad_run: float) -> None:
    params = ClassifyParams(method=method)
    runs = noisy(BASE, runs=4, noise=0.002)
    clean = classify_group(runs, lower_is_better=True, params=params)
    for victim in ("a03", "b09", "b10", "c07"):  # b09/b10 are the middle GPUs: the fleet median's own
        dirty = classify_group({**runs, victim: [*runs[victim], bad_run]}, lower_is_better=True, params=params)
        assert [(g.uuid, g.perfvar, g.slowdown, g.bin) for g in dirty.gpus] == \
            [(g.uuid, g.perfvar, g.slowdown, g.bin) for g in clean.gpus], victim
        if math.isfinite(bad_run) and bad_run > 0:
            assert by_uuid(dirty)[victim].dropped == 1


def test_fast_outlier_rule_mirrors_the_slow_one() -> None:
    values = {f"r{i:02d}": 1.0 + 0.001 * i for i in range(19)}  # median 1.009, MAD 0.005
    params = ClassifyParams(method="bic", outlier_min_excess=0.0)
    # threshold 3.5 * 1.4826 * MAD; MAD with the probe added is 0.005 (raw units, before normalising)
    below = classify_group(fleet({**values, "p": 1.0085 - 0.0255}), lower_is_better=True, params=params)
    above = classify_group(fleet({**values, "p": 1.0085 - 0.0265}), lower_is_better=True, params=params)
    assert not by_uuid(below)["p"].outlier
    assert by_uuid(above)["p"].outlier and by_uuid(above)["p"].fast


def test_throughput_fast_outlier() -> None:
    thr = {**{f"g{i}": 100.0 + i for i in range(9)}, "liar": 1e300}  # an impossible throughput
    r = classify_group(fleet(thr), lower_is_better=False)
    g = by_uuid(r)["liar"]
    assert g.fast and g.outlier and g.slowdown == 1.0 and r.bins[0].fast


# ----------------------------------------------------------------------------- resolution


def test_twelve_gpus_evenly_spread_get_at_least_three_factors() -> None:
    runs = noisy(even(12, 0.871, 1.139), runs=5, noise=0.01, seed=12)
    r = classify_group(runs, lower_is_better=True)  # the default method
    assert r.method == "shrink"
    factors = [by_uuid(r)[u].slowdown for u in sorted(runs)]
    assert len({round(f, 3) for f in factors}) >= 3
    assert r.k_regular >= 3
    assert factors == sorted(factors)  # faster GPUs keep lower factors
    # the failure this method fixes: BIC alone makes one bin, so every GPU reads 1.000
    bic = classify_group(runs, lower_is_better=True, params=ClassifyParams(method="bic"))
    assert bic.k_regular == 1 and {g.slowdown for g in bic.gpus} == {1.0}
    k2 = classify_group(runs, lower_is_better=True, params=ClassifyParams(method="pal-k2"))
    assert k2.k_regular == 2


@pytest.mark.parametrize("seed", range(4))
def test_a_spread_wider_than_the_noise_is_never_one_bin(seed: int) -> None:
    # 100 GPUs, 4 % spread, 0.5 % run noise: a single hump BIC keeps whole
    runs = noisy(even(100, 0.98, 1.02), runs=5, noise=0.005, seed=seed)
    r = classify_group(runs, lower_is_better=True)
    assert r.k_regular >= 2 and r.noise is not None and r.noise < 0.01


@pytest.mark.parametrize("seed", range(4))
def test_identical_gpus_measured_with_noise_stay_one_bin_and_are_shrunk(seed: int) -> None:
    runs = noisy({f"g{i:02d}": 1.0 for i in range(40)}, runs=5, noise=0.02, seed=seed)
    r = classify_group(runs, lower_is_better=True)
    assert r.k_regular == 1
    pv = [g.perfvar for g in r.gpus]
    sf = [g.slowdown for g in r.gpus]
    assert np.std(sf) < 0.5 * np.std(pv)  # mostly noise: pulled toward the bin
    assert r.bins[0].slowdown == 1.0


def test_a_noisy_gpu_is_shrunk_more_than_a_precise_one() -> None:
    runs = noisy(even(30, 0.95, 1.05), runs=5, noise=0.004, seed=1)
    # two GPUs at the same measured median, one with 10x the run-to-run spread
    runs["precise"] = [1.03 * (1 + d) for d in (-0.002, -0.001, 0.0, 0.001, 0.002)]
    runs["noisy"] = [1.03 * (1 + d) for d in (-0.04, -0.02, 0.0, 0.02, 0.04)]
    r = classify_group(runs, lower_is_better=True)
    p, n = by_uuid(r)["precise"], by_uuid(r)["noisy"]
    assert p.perfvar == n.perfvar and p.bin == n.bin and n.noise > 5 * p.noise
    centre = r.bins[p.bin].slowdown
    assert abs(n.slowdown - centre) < abs(p.slowdown - centre)


def test_bin_factor_and_gpu_factors_agree_for_bic_and_pal_k2() -> None:
    runs = noisy(even(40, 0.9, 1.1), seed=3)
    for method in ("bic", "pal-k2"):
        r = classify_group(runs, lower_is_better=True, params=ClassifyParams(method=method))
        assert all(g.slowdown == r.bins[g.bin].slowdown for g in r.gpus)
    r = classify_group(runs, lower_is_better=True)
    assert len({g.slowdown for g in r.gpus}) > len(r.bins)


def test_deterministic_for_the_default_method() -> None:
    runs = noisy(even(60, 0.9, 1.1), seed=9)
    a = classify_group(runs, lower_is_better=True)
    shuffled = {u: list(reversed(v)) for u, v in reversed(list(runs.items()))}
    assert classify_group(shuffled, lower_is_better=True) == a


@pytest.mark.parametrize(("kwargs", "match"), [({"method": "kmeans"}, "method"), ({"run_ratio": 1.0}, "run_ratio"),
                                               ({"run_ratio": -1}, "run_ratio"), ({"run_ratio": math.inf}, "run_ratio")])
def test_new_params_are_validated(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ClassifyParams(**kwargs)


def test_run_ratio_zero_keeps_every_valid_run() -> None:
    runs = {**fleet({f"g{i}": 1.0 + 0.01 * i for i in range(9)}), "x": [1.0, 1.0, 1.02, 1e6]}
    kept = classify_group(runs, lower_is_better=True, params=ClassifyParams(run_ratio=0))
    assert by_uuid(kept)["x"].median_score == pytest.approx(1.01) and by_uuid(kept)["x"].dropped == 0
    dropped = classify_group(runs, lower_is_better=True)
    assert by_uuid(dropped)["x"].median_score == 1.0 and by_uuid(dropped)["x"].dropped == 1
