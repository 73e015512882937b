"""The pure rule that turns job profiles into a class (pal_slurm.jobs.sensitivity)."""

from __future__ import annotations

import pytest

from pal_slurm.config import load_config
from pal_slurm.errors import ConfigError
from pal_slurm.jobs.sensitivity import (
    ProfileMetrics,
    SensitivityRule,
    classify,
    combine,
    compute_score,
)
from pal_slurm.db.sensitivity_store import sensitivity_rule

RULE = SensitivityRule.build("ABCD", {"A": 0.5, "B": 0.35, "C": 0.2}, min_samples=100, history=5)


def metrics(util: float | None, sm: float | None, mem: float | None, samples: int = 600) -> ProfileMetrics:
    return ProfileMetrics(samples=samples, gpu_util_mean=util, sm_active_mean=sm, mem_bw_util_mean=mem)


def test_compute_score_examples() -> None:
    assert compute_score(80, 30) == pytest.approx(0.8 * 0.8 / 1.1)
    assert compute_score(0, 0) == 0.0
    assert compute_score(100, 0) == 1.0
    assert compute_score(150, -5) == 1.0  # clamped readings
    assert compute_score(50, 80) < compute_score(70, 45) < compute_score(80, 30)


@pytest.mark.parametrize("sm, mem, expected", [
    (80, 30, "A"),    # ResNet-50-like training: compute-bound
    (70, 45, "B"),    # transformer
    (50, 40, "C"),
    (50, 80, "D"),    # PageRank-like: memory-bound
    (15, 5, "D"),     # GPU mostly idle (I/O- or CPU-bound): insensitive
])
def test_classes_by_how_compute_bound(sm: float, mem: float, expected: str) -> None:
    verdict = classify([metrics(sm, sm, mem)], RULE)
    assert verdict.job_class == expected, verdict


def test_gpu_util_stands_in_for_missing_sm_activity() -> None:
    with_sm = classify([metrics(90, 80, 30)], RULE)
    without = classify([metrics(80, None, 30)], RULE)
    assert with_sm.evidence.sm_source == "sm_active" and without.evidence.sm_source == "gpu_util"
    assert without.job_class == "A" and without.evidence.compute_score == pytest.approx(compute_score(80, 30))
    nothing = classify([metrics(None, None, None)], RULE)
    assert nothing.job_class is None and nothing.evidence.sm_source == "none"


def test_too_little_evidence_gives_no_class() -> None:
    verdict = classify([metrics(90, 90, 10, samples=60), metrics(90, 90, 10, samples=39)], RULE)
    assert verdict.job_class is None and verdict.evidence.samples == 99 and "min_samples" in verdict.reason
    assert classify([metrics(90, 90, 10, samples=100)], RULE).job_class == "A"


def test_jobs_combine_sample_weighted_and_only_the_newest_count() -> None:
    ev = combine([metrics(90, 90, 10, samples=300), metrics(30, 30, 60, samples=100)])
    assert ev.sm_active_mean == pytest.approx((90 * 300 + 30 * 100) / 400)
    assert ev.jobs == 2 and ev.samples == 400
    # history 5: the job changed (newest first) and the old compute-bound runs no longer count
    newest = [metrics(40, 40, 80)] * 5
    oldest = [metrics(95, 95, 5)] * 20
    assert classify(newest + oldest, RULE).job_class == "D"
    assert classify(newest + oldest, RULE).evidence.jobs == 5


def test_rule_validation_names_the_key() -> None:
    with pytest.raises(ConfigError, match="jobs.thresholds.B: 0.6 must be below A's 0.5"):
        SensitivityRule.build("ABCD", {"A": 0.5, "B": 0.6, "C": 0.2})
    with pytest.raises(ConfigError, match="class C needs a threshold"):
        SensitivityRule.build("ABCD", {"A": 0.5, "B": 0.3})
    with pytest.raises(ConfigError, match="least sensitive class D"):
        SensitivityRule.build("ABCD", {"A": 0.5, "B": 0.3, "C": 0.2, "D": 0.1})
    with pytest.raises(ConfigError, match="E is not a configured job class"):
        SensitivityRule.build("ABCD", {"A": 0.5, "B": 0.3, "C": 0.2, "E": 0.1})
    with pytest.raises(ConfigError, match="not within 0..1"):
        SensitivityRule.build("ABCD", {"A": 1.5, "B": 0.3, "C": 0.2})


def test_thresholds_come_from_the_jobs_section(tmp_path) -> None:
    conf = tmp_path / "pal.toml"
    conf.write_text("[jobs]\nmin_samples = 10\nthresholds = { A = 0.9, B = 0.5, C = 0.05 }\n")
    rule = sensitivity_rule(load_config(conf, env={"HOME": str(tmp_path)}))
    assert rule.thresholds == (("A", 0.9), ("B", 0.5), ("C", 0.05)) and rule.min_samples == 10
    assert classify([metrics(80, 80, 30, samples=10)], rule).job_class == "B"  # 0.58 < 0.9 now
    conf.write_text("[jobs]\nthresholds = { A = 0.9, B = 0.95, C = 0.05 }\n")
    with pytest.raises(ConfigError, match="jobs.thresholds.B"):
        sensitivity_rule(load_config(conf, env={"HOME": str(tmp_path)}))
