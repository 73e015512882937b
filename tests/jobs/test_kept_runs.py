"""KeptRuns: the placer's incremental learning gives exactly what learning every run again gives,
whatever the order and batching of the runs added and however the age cutoff moves."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from pal_slurm.jobs.runtimes import KeptRuns, RuntimeRule, learn_runtimes

T = datetime(2026, 11, 1, tzinfo=UTC)


@pytest.mark.parametrize("seed", range(30))
def test_incremental_learning_equals_learning_everything_again(seed: int) -> None:
    rnd = random.Random(seed)
    rule = RuntimeRule(min_jobs=rnd.randint(1, 4), history=rnd.randint(1, 8), quantile=rnd.choice([0.0, 0.5, 0.9, 1.0]))
    kept: KeptRuns[str] = KeptRuns(rule)
    everything: list[tuple[str, datetime, float]] = []
    cutoff = T
    for _batch in range(rnd.randint(1, 8)):
        # starts on a coarse grid, so ties in start (kept in the order added) are common
        runs = [(rnd.choice("abcde"), T + timedelta(hours=rnd.randint(0, 40)), float(rnd.randint(1, 50)))
                for _ in range(rnd.randint(0, 25))]
        kept.add(runs)
        everything.extend(runs)
        cutoff += timedelta(hours=rnd.choice([0, 0, 1, 5]))  # cutoffs only move forward
        want = learn_runtimes([r for r in everything if r[1] >= cutoff], rule)
        assert dict(kept.learned(cutoff)) == want


def test_a_key_whose_runs_all_age_out_is_forgotten() -> None:
    kept: KeptRuns[str] = KeptRuns(RuntimeRule(min_jobs=1))
    kept.add([("a", T, 10.0), ("b", T + timedelta(days=2), 20.0)])
    assert dict(kept.learned(T)) == {"a": 10.0, "b": 20.0}
    assert dict(kept.learned(T + timedelta(days=1))) == {"b": 20.0}
