"""Hand-made fleets whose classification is known, classified with the binning method the tests of
the binning pin down (BIC: one factor per bin), and the structure every result must have.

Most fleets give each GPU three identical runs, so its median (and, divided by the fleet median,
its PerfVar) is known exactly and the expected bins and slowdown factors can be computed by hand
in the test.
"""

from __future__ import annotations

from pal_slurm.classification.classify import classify_group as _classify_group
from pal_slurm.classification.model import ClassifyParams, GpuResult, GroupResult

#: The tests of these fleets pin down the binning itself (one factor per bin); tests/classification/test_classify_resolution.py
#: covers the default method, which also shrinks each GPU's own factor.
BIC = {"method": "bic"}


def classify_group(runs, *, params=None, **kw) -> GroupResult:
    return _classify_group(runs, params=params or ClassifyParams(**BIC), **kw)


def fleet(values: dict[str, float], runs: int = 3) -> dict[str, list[float]]:
    """Each GPU gets `runs` identical runs at its value."""
    return {u: [v] * runs for u, v in values.items()}


def group(prefix: str, start: float, n: int, step: float = 0.001) -> dict[str, float]:
    """n GPUs named prefix00.. with values start, start+step, ..."""
    return {f"{prefix}{i:02d}": start + step * i for i in range(n)}


def by_uuid(result: GroupResult) -> dict[str, GpuResult]:
    return {g.uuid: g for g in result.gpus}


def members(result: GroupResult, bin_index: int) -> set[str]:
    return {g.uuid for g in result.gpus if g.bin == bin_index}


def check_invariants(result: GroupResult) -> None:
    """Structure every result must have, whatever the fleet."""
    assert [g.uuid for g in result.gpus] == sorted(g.uuid for g in result.gpus)
    assert [b.index for b in result.bins] == list(range(len(result.bins)))
    assert [b.centroid for b in result.bins] == sorted(b.centroid for b in result.bins)
    for b in result.bins:
        assert b.gpus == len(members(result, b.index)) > 0
        pvs = [g.perfvar for g in result.gpus if g.bin == b.index]
        assert b.low == min(pvs) and b.high == max(pvs)
    for g in result.gpus:
        if g.profiled:
            assert g.bin is not None and g.slowdown == result.bins[g.bin].slowdown
            assert g.outlier == result.bins[g.bin].outlier
        else:
            assert g.perfvar is None and g.bin is None and g.slowdown is None and not g.outlier
