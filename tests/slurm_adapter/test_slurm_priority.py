"""Slurm's own order (pal_slurm.slurm.priority) and the job fields the placer now reads
(time limit, end time, node range), on output captured from real Slurm 22.05 and 24.11."""

from __future__ import annotations

from pathlib import Path

import pytest

from pal_slurm.slurm import parse_json
from pal_slurm.slurm.model import SlurmJob
from pal_slurm.slurm.priority import PriorityConfig, duration_s, job_rank, parse_config, parse_partition_tiers

DATA = Path(__file__).parents[1] / "data" / "slurm"
VERSIONS = ("22.05", "24.11")


@pytest.mark.parametrize("version", VERSIONS)
def test_partition_tiers_from_scontrol(version: str) -> None:
    tiers = parse_partition_tiers((DATA / version / "show-partition.txt").read_text())
    assert tiers == {"gpu": 1, "gpu-high": 10}  # the test cluster's two partitions


@pytest.mark.parametrize(("version", "multifactor"), [("22.05", False), ("24.11", True)])
def test_the_test_clusters_priority_settings(version: str, multifactor: bool) -> None:
    """The packaged defaults: 22.05 priority/basic; 24.11 priority/multifactor with every weight
    0 (so every job has priority 1 and --nice changes nothing). No age factor in either."""
    cfg = parse_config((DATA / version / "show-config.txt").read_text())
    assert cfg == PriorityConfig(multifactor=multifactor, weight_age=0.0, max_age_s=7 * 86400.0)
    assert cfg.age_bonus(0.0, 1e6) == 0.0


def test_multifactor_age_weight_and_max_age() -> None:
    text = "PriorityType            = priority/multifactor\nPriorityMaxAge          = 1-12:00:00\n" \
           "PriorityWeightAge       = 1000\nPriorityWeightFairShare = 0\n"
    cfg = parse_config(text)
    assert cfg == PriorityConfig(multifactor=True, weight_age=1000.0, max_age_s=36 * 3600.0)
    assert cfg.age_bonus(0.0, 18 * 3600.0) == 500.0 and cfg.age_bonus(0.0, 1e9) == 1000.0
    assert cfg.age_bonus(100.0, 50.0) == 0.0  # a submit time ahead of now (clock skew) adds nothing


@pytest.mark.parametrize(("text", "seconds"), [("7-00:00:00", 604800.0), ("01:30:00", 5400.0), ("05:00", 300.0),
                                               ("UNLIMITED", None), ("", None)])
def test_durations(text: str, seconds: float | None) -> None:
    assert duration_s(text) == seconds


def test_rank_is_the_highest_tier_of_the_jobs_partitions_then_priority() -> None:
    job = SlurmJob(job_id="1", name="j", user="u", state="PENDING", state_reason="BeginTime", priority=50,
                   partition="gpu,gpu-high", submit_time=0.0)
    assert job_rank(job, {"gpu": 1, "gpu-high": 10}, PriorityConfig(), 10.0) == (10, 50.0)
    assert job_rank(job, {}, PriorityConfig(multifactor=True, weight_age=100.0, max_age_s=100.0), 10.0) == (1, 60.0)


@pytest.mark.parametrize("version", VERSIONS)
def test_time_limit_end_time_and_node_range_from_squeue(version: str) -> None:
    doc = parse_json.load((DATA / version / "squeue-limits.json").read_text(), "squeue --json")
    jobs = {j.state: j for j in parse_json.jobs_from_doc(doc)}
    held = next(j for j in jobs.values() if j.time_limit_s == 5400.0)
    assert (held.node_count, held.max_nodes) == (1, 3)  # sbatch -t 90 -N 1-3
    if version == "22.05":
        run = jobs["RUNNING"]
        assert run.time_limit_s == 300.0 and run.max_nodes is None and run.end_time == run.start_time + 300
        assert held.end_time is None
