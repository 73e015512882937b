"""Passive speed (pal_slurm.classification.passive): factors learned from finished jobs' run times.

Each test builds runs from known factors (a seeded fleet, recurring fingerprints of 1-8 GPUs, run
time = baseline x the slowest GPU's factor x lognormal noise) and checks what the estimator must
get right: the factors, the attribution of a multi-GPU job to its slowest GPU, the isolation of one
GPU's evidence, the rows it skips, and an interval that narrows with evidence.
"""

from __future__ import annotations

import dataclasses
import math
import random

import numpy as np
import pytest

from pal_slurm.classification.passive import (
    SKIP_BEYOND_LIMIT,
    SKIP_CLASS_CONFLICT,
    SKIP_NO_GPUS,
    SKIP_NO_KEY,
    SKIP_ONE_PLACEMENT,
    SKIP_REACHED_LIMIT,
    SKIP_RUNTIME_NOT_NUMBER,
    SKIP_RUNTIME_NOT_POSITIVE,
    JobRun,
    PassiveResult,
    estimate,
)

SLOW = "n0:3"


def fleet(n: int = 64, seed: int = 1) -> dict[str, float]:
    """GPU key -> true factor: lognormal 5 % around 1, and SLOW at 1.5x."""
    rng = np.random.default_rng(seed)
    factors = {f"n{g // 8}:{g % 8}": float(np.exp(rng.normal(0, 0.05))) for g in range(n)}
    factors[SLOW] = 1.5
    return factors


def recurring(factors: dict[str, float], fingerprints: int = 40, runs_each: int = 60, seed: int = 2,
              sizes: tuple[int, ...] = (1, 1, 2, 4, 8), noise: float = 0.025, job_class: str = "A") -> list[JobRun]:
    """Runs of recurring fingerprints on random GPUs: baseline x max factor x lognormal(noise)."""
    rng = np.random.default_rng(seed)
    keys = sorted(factors)
    out = []
    for k in range(fingerprints):
        size, base = sizes[k % len(sizes)], float(rng.uniform(600, 7200))
        for j in range(runs_each):
            gpus = tuple(keys[i] for i in rng.choice(len(keys), size, replace=False))
            t = base * max(factors[g] for g in gpus) * float(np.exp(rng.normal(0, noise)))
            out.append(JobRun(f"{job_class}{k}-{j}", f"fp{job_class}{k}", job_class, gpus, t, 1e9 + j * 600.0))
    return out


def factors_of(res: PassiveResult, job_class: str = "A") -> dict[str, float]:
    return {e.gpu: e.factor for e in res.estimates if e.job_class == job_class}


def test_known_factors_are_recovered() -> None:
    truth = fleet()
    got = factors_of(estimate(recurring(truth)))
    assert set(got) == set(truth)
    typical = float(np.median(list(truth.values())))
    errors = [abs(got[g] / (truth[g] / typical) - 1) for g in truth]
    assert float(np.median(errors)) <= 0.01
    assert max(errors) <= 0.03
    ranks = sorted(truth, key=truth.__getitem__)
    assert sorted(got, key=got.__getitem__)[-1] == SLOW == ranks[-1]


def test_baselines_are_the_typical_gpu_time_not_the_median_run() -> None:
    """An 8-GPU fingerprint's median run is paced by the slowest of 8, well above the typical
    GPU: its baseline must come out at the true base time on the typical GPU all the same."""
    truth = fleet()
    typical = float(np.median(list(truth.values())))
    runs = recurring(truth, sizes=(1, 8), noise=0.0)
    res = estimate(runs)
    for k in (1, 3, 5):
        mine = [r for r in runs if r.fingerprint == f"fpA{k}"]
        base = mine[0].runtime_s / max(truth[g] for g in mine[0].gpus)
        assert res.baselines[f"fpA{k}"] == pytest.approx(base * typical, rel=0.005)
        assert res.baselines[f"fpA{k}"] < float(np.median([r.runtime_s for r in mine])) / 1.03


def test_a_multi_gpu_job_is_attributed_to_its_slowest_gpu_only() -> None:
    """a is 1.5x, b c d typical: 2-GPU runs of (a, b) are a's evidence, not b's, and runs of two
    near-equal GPUs (c, d) are evidence for neither."""
    truth = {"a": 1.5, "b": 1.0, "c": 1.0, "d": 1.001, "e": 0.98, "f": 1.02}
    runs = []
    for j in range(30):
        for g in truth:
            runs.append(JobRun(f"s{g}{j}", "single", "A", (g,), 100.0 * truth[g] * (1 + 0.001 * (j % 5)), 0.0))
        runs.append(JobRun(f"ab{j}", "pair", "A", ("a", "b"), 200.0 * 1.5 * (1 + 0.001 * (j % 3)), 0.0))
        runs.append(JobRun(f"cd{j}", "pair", "A", ("c", "d"), 200.0 * 1.001, 0.0))
        runs.append(JobRun(f"ef{j}", "pair", "A", ("e", "f"), 200.0 * 1.02, 0.0))
    res = estimate(runs)
    a, b, c, d = (res.of(g, "A") for g in "abcd")
    assert a is not None and b is not None and c is not None and d is not None
    assert (a.jobs, a.paced) == (60, 60), "a set the pace of its 30 pairs with b"
    assert (b.jobs, b.paced) == (60, 30), "b is only bounded by them"
    assert (c.paced, d.paced) == (30, 30), "c and d are too close to tell: their pairs are nobody's"
    assert a.factor == pytest.approx(1.5 / truth["b"] * b.factor, rel=0.01)
    assert b.factor == pytest.approx(1.0, abs=0.01)


def test_one_gpus_evidence_moves_only_its_own_estimate() -> None:
    """SLOW, outside the typical band and the slowest in every job it runs: made 4x slower (its
    multi-GPU jobs too), or given garbage runs 7x slow of its one-GPU fingerprints, it changes
    nothing else, to the bit (estimates, intervals, evidence and baselines)."""
    truth = fleet()
    runs = recurring(truth)
    before = estimate(runs)
    slower = [dataclasses.replace(r, runtime_s=r.runtime_s * 4) if SLOW in r.gpus else r for r in runs]
    mine = [r for r in runs if r.gpus == (SLOW,)]
    assert len(mine) >= 10 and any(SLOW in r.gpus and len(r.gpus) == 8 for r in runs)
    garbage = runs + [dataclasses.replace(r, job_id=f"{r.job_id}g{i}", runtime_s=r.runtime_s * 7.1)
                      for i in range(3) for r in mine]
    for changed in (estimate(slower), estimate(garbage)):
        others = [e for e in changed.estimates if e.gpu != SLOW]
        assert others == [e for e in before.estimates if e.gpu != SLOW]
        assert changed.baselines == before.baselines
        mover = changed.of(SLOW, "A")
        assert mover is not None and mover.factor > before.of(SLOW, "A").factor  # type: ignore[union-attr]


def test_a_typical_gpu_made_slow_moves_no_other_gpu_beyond_its_interval() -> None:
    """Where isolation cannot be exact (the GPU voted on baselines, and now paces multi-GPU jobs
    others paced before), every other GPU stays inside its own earlier interval."""
    truth = fleet()
    runs = recurring(truth)
    victim = "n2:5"
    before = {e.gpu: e for e in estimate(runs).estimates}
    after = factors_of(estimate([dataclasses.replace(r, runtime_s=r.runtime_s * 1.4) if victim in r.gpus else r
                                 for r in runs]))
    assert after[victim] > before[victim].factor * 1.3
    moved = {g: after[g] / e.factor - 1 for g, e in before.items() if not e.low <= after[g] <= e.high}
    assert set(moved) == {victim}


def test_impossible_rows_are_skipped_and_counted_by_reason() -> None:
    good = recurring(fleet(16), fingerprints=4, runs_each=10)
    r = good[0]
    bad = [
        dataclasses.replace(r, gpus=()), dataclasses.replace(r, gpus=("",)),
        dataclasses.replace(r, runtime_s=math.nan), dataclasses.replace(r, runtime_s=math.inf),
        dataclasses.replace(r, runtime_s="soon"),  # type: ignore[arg-type]
        dataclasses.replace(r, runtime_s=0.0), dataclasses.replace(r, runtime_s=-5.0),
        dataclasses.replace(r, runtime_s=4000.0, time_limit_s=3600.0),
        dataclasses.replace(r, runtime_s=3630.0, time_limit_s=3600.0),
        dataclasses.replace(r, fingerprint=""), dataclasses.replace(r, job_class=""),
        dataclasses.replace(r, job_class="B"),
        JobRun("lone1", "lonely", "A", ("n0:0",), 50.0, 0.0), JobRun("lone2", "lonely", "A", ("n0:0",), 51.0, 0.0),
    ]
    res = estimate(good + bad)
    assert dict(res.skipped) == {SKIP_NO_GPUS: 2, SKIP_RUNTIME_NOT_NUMBER: 3, SKIP_RUNTIME_NOT_POSITIVE: 2,
                                 SKIP_BEYOND_LIMIT: 1, SKIP_REACHED_LIMIT: 1, SKIP_NO_KEY: 2,
                                 SKIP_CLASS_CONFLICT: 1, SKIP_ONE_PLACEMENT: 2}
    assert res.estimates == estimate(good).estimates
    assert "lonely" not in res.baselines


def test_a_run_within_its_limit_is_kept() -> None:
    runs = recurring(fleet(16), fingerprints=4, runs_each=10)
    limited = [dataclasses.replace(r, time_limit_s=r.runtime_s + 1.0) for r in runs]
    assert estimate(limited) == estimate(runs)


def test_nothing_in_is_nothing_out() -> None:
    res = estimate([])
    assert (res.estimates, dict(res.skipped), dict(res.baselines)) == ((), {}, {})


def test_the_interval_narrows_with_evidence_and_covers_the_truth() -> None:
    truth = fleet(32)
    few = estimate(recurring(truth, fingerprints=10, runs_each=8, sizes=(1,)))
    many = estimate(recurring(truth, fingerprints=10, runs_each=120, sizes=(1,)))
    typical = float(np.median(list(truth.values())))
    width = {}
    for name, res in (("few", few), ("many", many)):
        est = {e.gpu: e for e in res.estimates}
        width[name] = float(np.median([math.log(e.high / e.low) for e in est.values()]))
        inside = sum(est[g].low <= truth[g] / typical <= est[g].high for g in est)
        assert inside >= 0.85 * len(est), (name, inside, len(est))
        assert all(e.low < e.factor < e.high for e in est.values())
    assert width["many"] < 0.6 * width["few"]


def test_classes_are_estimated_apart_and_input_order_does_not_matter() -> None:
    truth = fleet(32)
    runs = recurring(truth, job_class="A") + recurring({g: 1.0 for g in truth}, job_class="D", seed=5)
    res = estimate(runs)
    shuffled = list(runs)
    random.Random(3).shuffle(shuffled)
    assert estimate(shuffled) == res
    d = [e.factor for e in res.estimates if e.job_class == "D"]
    assert max(abs(f - 1) for f in d) < 0.02
    assert res.of(SLOW, "A").factor > 1.4 and res.of(SLOW, "D").factor < 1.02  # type: ignore[union-attr]


def test_gpu_hours_count_the_paced_runs() -> None:
    runs = [JobRun(f"j{i}", "fp", "A", (g,), 3600.0 * (1.0 + 0.01 * (i // 3)), 0.0)
            for i, g in enumerate(["x", "y", "z"] * 4)]
    res = estimate(runs)
    x = res.of("x", "A")
    assert x is not None and x.paced == 4 and x.gpu_hours == pytest.approx(4.06)


def test_gpus_that_always_ran_together_get_a_bound_not_an_estimate() -> None:
    """a (1.5x) and b (typical) only ever ran as a pair: no run time can tell which is slow, so
    neither gets an estimate; both get the pair's pace as a bound, each naming the other."""
    truth = {"a": 1.5, "b": 1.0, "c": 1.0, "d": 1.06, "e": 0.95, "f": 1.0}
    runs = []
    for j in range(20):
        for g in "cdef":
            runs.append(JobRun(f"s{g}{j}", "single", "A", (g,), 100.0 * truth[g] * (1 + 0.002 * (j % 5)), 0.0))
        for pair in (("a", "b"), ("c", "d"), ("e", "f")):
            t = 300.0 * max(truth[g] for g in pair) * (1 + 0.002 * (j % 4))
            runs.append(JobRun(f"p{''.join(pair)}{j}", "pair", "A", pair, t, 0.0))
    res = estimate(runs)
    assert res.of("a", "A") is None and res.of("b", "A") is None
    a, b = res.bound_of("a", "A"), res.bound_of("b", "A")
    assert a is not None and b is not None
    assert (a.always_with, b.always_with, a.jobs) == (("b",), ("a",), 20)
    assert a.upper == b.upper == pytest.approx(1.5, rel=0.02)
    assert res.of("d", "A").paced == 40  # type: ignore[union-attr]


@pytest.mark.parametrize("knob", [{"min_paced": 0}, {"z": 0.0}, {"typical_band": 0.0}, {"margin": -0.1},
                                  {"max_iterations": 0}, {"noise_floor": math.nan}])
def test_settings_out_of_range_are_refused(knob: dict[str, float]) -> None:
    from pal_slurm.classification.passive import PassiveSettings

    with pytest.raises(ValueError, match="out of range"):
        PassiveSettings(**knob)  # type: ignore[arg-type]
