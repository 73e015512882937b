"""Hysteresis in pal_slurm.classification.classify: a GPU near the border of the bin it was in last
time stays there; a clear change, an outlier or an emptied bin is never held back."""

from __future__ import annotations

from tests.support.hand_made_fleets import BIC, by_uuid, check_invariants, classify_group, fleet, group
from pal_slurm.classification.model import ClassifyParams


def _hysteresis_fleet() -> tuple[dict[str, float], float, float]:
    values = {**group("a", 1.00, 10, 0.005), **group("b", 1.10, 10, 0.005)}  # 1.000..1.045, 1.100..1.145
    values["border"] = 1.05  # joins bin 0 by k-means, but is near bin 1's low end
    values["moved"] = 1.001  # clearly in bin 0 now
    r = classify_group(fleet(values), lower_is_better=True)
    assert r.k_regular == 2
    assert by_uuid(r)["border"].bin == 0 and by_uuid(r)["moved"].bin == 0
    return values, r.bins[0].slowdown, r.bins[1].slowdown


def test_hysteresis_keeps_borderline_and_moves_clear_change():
    values, slow_fast, slow_slow = _hysteresis_fleet()
    previous = {u: (slow_slow if u.startswith("b") else slow_fast) for u in values}
    previous["border"] = slow_slow  # was in the slow bin last time
    previous["moved"] = slow_slow  # was in the slow bin last time too, but is now clearly fast
    params = ClassifyParams(**BIC, hysteresis=0.06)
    plain = classify_group(fleet(values), lower_is_better=True)
    r = classify_group(fleet(values), lower_is_better=True, params=params, previous=previous)
    check_invariants(r)
    g = by_uuid(r)
    fm = r.fleet_median_score
    # border: PerfVar 1.05/fm is within [1.10/fm - 0.06, ...] -> stays in the slow bin
    assert 1.10 / fm - 0.06 <= g["border"].perfvar < 1.10 / fm
    assert g["border"].bin == 1 and g["border"].slowdown == r.bins[1].slowdown
    # moved: 1.001/fm is far below the slow bin's range -> takes its new bin
    assert g["moved"].bin == 0
    # centroids and slowdowns come from the clustering; counts and ranges from final members
    assert [b.centroid for b in r.bins] == [b.centroid for b in plain.bins]
    assert [b.slowdown for b in r.bins] == [b.slowdown for b in plain.bins]
    assert [b.gpus for b in r.bins] == [plain.bins[0].gpus - 1, plain.bins[1].gpus + 1]
    assert r.bins[1].low == g["border"].perfvar
    assert r.bins[0].high == g["a09"].perfvar  # border was the fast bin's top member
    # everybody else is where the clustering put them
    for u in values:
        if u != "border":
            assert g[u].bin == by_uuid(plain)[u].bin


def test_hysteresis_off_or_without_previous_changes_nothing():
    values, slow_fast, slow_slow = _hysteresis_fleet()
    previous = {"border": slow_slow}
    plain = classify_group(fleet(values), lower_is_better=True)
    assert classify_group(fleet(values), lower_is_better=True, previous=previous) == plain
    assert classify_group(fleet(values), lower_is_better=True, params=ClassifyParams(**BIC, hysteresis=0.06)) == plain
    # a margin too small to reach the slow bin (gap 0.05 raw) changes nothing either
    small = classify_group(
        fleet(values), lower_is_better=True, params=ClassifyParams(**BIC, hysteresis=0.04), previous=previous
    )
    assert small.gpus == plain.gpus


def test_hysteresis_never_touches_outliers():
    values = {**group("r", 1.00, 19), "slow": 1.5}
    r = classify_group(
        fleet(values), lower_is_better=True, params=ClassifyParams(**BIC, hysteresis=1.0), previous={"slow": 1.0}
    )
    assert by_uuid(r)["slow"].outlier and by_uuid(r)["slow"].bin == 1


def test_hysteresis_emptied_bin_is_dropped():
    values = {**group("a", 1.00, 10), **group("b", 1.10, 10)}
    plain = classify_group(fleet(values), lower_is_better=True)
    previous = {u: plain.bins[0].slowdown for u in values}  # everybody was fast last time
    r = classify_group(fleet(values), lower_is_better=True, params=ClassifyParams(**BIC, hysteresis=0.2), previous=previous)
    check_invariants(r)
    assert r.k_regular == 2  # what BIC chose
    assert len(r.bins) == 1 and r.bins[0].gpus == 20
    assert r.bins[0].slowdown == plain.bins[0].slowdown  # the clustering's scale is kept
