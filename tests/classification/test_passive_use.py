"""The one rule of what placement takes of passive speed, and which runs count (the placer and
the simulator both call pal_slurm.classification.passive_use)."""

from __future__ import annotations

import pytest

from pal_slurm.classification.passive import JobRun, PassiveEstimate
from pal_slurm.classification.passive_use import placement_takes, since_profile


def est(factor: float, half: float, paced: int) -> PassiveEstimate:
    return PassiveEstimate("g", "A", factor, factor - half, factor + half, paced, paced, 1.0)


@pytest.mark.parametrize(("e", "bench", "taken"), [
    (est(1.30, 0.02, 10), 1.00, True),    # slower, intervals apart
    (est(0.80, 0.02, 10), 1.00, True),    # faster, intervals apart
    (est(1.03, 0.02, 10), 1.00, False),   # 1.01-1.05 overlaps the benchmark's 0.98-1.02
    (est(1.30, 0.02, 9), 1.00, False),    # too few jobs paced
    (est(1.30, 0.30, 50), 1.00, False),   # too uncertain to contradict
])
def test_placement_takes_a_passive_factor_only_where_it_contradicts_the_benchmark(e, bench, taken) -> None:
    assert placement_takes(e, bench, min_paced=10, benchmark_noise=0.02) is taken


def test_runs_begun_before_a_gpus_latest_profile_do_not_count() -> None:
    def run(jid: str, gpus: tuple[str, ...], start: float) -> JobRun:
        return JobRun(jid, "f", "A", gpus, 100.0, start + 100.0)

    runs = [run("1", ("a",), 0.0), run("2", ("a", "b"), 500.0), run("3", ("b",), 900.0), run("4", ("c",), 0.0)]
    kept = since_profile(runs, {"a": 400.0, "b": 800.0})
    assert [r.job_id for r in kept] == ["3", "4"]  # 2 began before b's profile; c was never re-profiled
    assert since_profile(runs, {}) == runs
