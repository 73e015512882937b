"""The no-harm matrix's figures by job size (bench/pal_eval/size_buckets.py), and the matrix at
today's cluster shape (bench/vs_slurm.py --shape 8x8 --workload llm) writing them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, harness_env
from pal_eval.size_buckets import bucket_of, cell_bucket_ratios, fleet_sizes, run_sizes
from pal_slurm.simulate.metrics import JobOutcome
from tests.support.placement_cases import cluster


@pytest.mark.parametrize(("gpus", "label"), [(1, "1"), (2, "2-8"), (8, "2-8"), (9, "9-64"), (64, "9-64"),
                                              (65, ">64"), (4096, ">64")])
def test_each_size_has_one_bucket(gpus: int, label: str) -> None:
    assert bucket_of(gpus) == label


def _outcome(jid: str, gpus: tuple[int, ...], submit: float, start: float, end: float, cls: str = "A") -> JobOutcome:
    return JobOutcome(job_id=jid, gpus=len(gpus), submit_time=submit, start_time=start, finish_time=end,
                      gpu_ids=gpus, job_class=cls)


def test_a_run_counts_multi_node_jobs_on_a_slow_gpu_and_the_largest_jobs_wait() -> None:
    # 2 nodes x 4 GPUs; GPU 5 is at 1.3x for class A (exactly the bound), 1.29 for class D
    c = cluster([4, 4], {"A": [1.0] * 5 + [1.3, 1.0, 1.0], "D": [1.0] * 5 + [1.29, 1.0, 1.0]})
    runs = run_sizes([
        _outcome("small", (0,), 0, 10, 20),                       # 1 GPU, JCT 20
        _outcome("one-node", (4, 5), 0, 0, 30),                   # on the slow GPU, but one node: not counted
        _outcome("multi-slow", (2, 3, 4, 5), 5, 50, 105),         # spans nodes, holds GPU 5: counted slow
        _outcome("multi-ok", (0, 1, 6, 7), 1, 9, 50),             # spans nodes on normal GPUs (biggest, first)
        _outcome("multi-d", (2, 3, 4, 5), 8, 60, 70, cls="D"),    # class D's PerfVar of GPU 5 is below 1.3
    ], c)
    assert runs["buckets"] == {"1": [20.0, 1], "2-8": [30.0 + 100.0 + 49.0 + 62.0, 4], "9-64": [0.0, 0],
                               ">64": [0.0, 0]}
    assert (runs["multi_node"], runs["slow_multi_node"]) == (3, 1)
    assert runs["largest_wait_s"] == 8.0  # "multi-ok": 4 GPUs like two others, but submitted first


def _run(buckets: dict[str, list[float]], slow: int = 0, multi: int = 0, wait: float = 0.0) -> dict:
    full = {"1": [0.0, 0], "2-8": [0.0, 0], "9-64": [0.0, 0], ">64": [0.0, 0], **buckets}
    return {"sizes": {"buckets": full, "multi_node": multi, "slow_multi_node": slow, "largest_wait_s": wait}}


def test_a_cells_bucket_ratio_is_of_the_means_over_the_copies_and_skips_empty_buckets() -> None:
    pal = [_run({"1": [10.0, 2], "2-8": [30.0, 1]}), _run({"1": [30.0, 2], "2-8": [0.0, 0]})]
    slurm = [_run({"1": [20.0, 2], "2-8": [30.0, 1]}), _run({"1": [20.0, 2], "2-8": [10.0, 1]})]
    # "1": pal means 5 and 15 (mean 10), slurm 10 and 10: 1.0; "2-8": empty in one of pal's copies
    assert cell_bucket_ratios(pal, slurm) == {"1": pytest.approx(1.0)}


def test_a_fleets_sizes_pool_the_slow_shares_and_the_waits_over_its_cells() -> None:
    cells = [{"runs": {"pal": [_run({"1": [10.0, 1]}, slow=1, multi=4, wait=3600.0)],
                       "slurm": [_run({"1": [20.0, 1]}, slow=3, multi=4, wait=0.0)]}},
             {"runs": {"pal": [_run({"1": [40.0, 1]}, slow=0, multi=6, wait=7200.0)],
                       "slurm": [_run({"1": [10.0, 1]}, slow=2, multi=6, wait=3600.0)]}}]
    row = fleet_sizes(cells, "pal", "slurm")
    assert row["buckets"]["1"] == pytest.approx((0.5 * 4.0) ** 0.5)  # geomean of the cells' 0.5 and 4
    assert row["slow_multi_node_share"] == {"pal": pytest.approx(0.1), "slurm": pytest.approx(0.5)}
    assert row["largest_job_wait_s"] == {"pal": 5400.0, "slurm": 1800.0}


def test_the_matrix_at_todays_shape_writes_the_sizes_and_checks_their_targets(tmp_path: Path) -> None:
    out = tmp_path / "vs.json"
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "vs_slurm.py"), "--shape", "8x8", "--workload", "llm",
                           "--llm-jobs", "60", "--traces", "1", "--fleets", "wide-1", "--lambdas", "1.0",
                           "--shakes", "2", "--jobs", "1", "--json", str(out)],
                          capture_output=True, text=True, timeout=300, cwd=REPO, env=harness_env())
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    assert "event mode, 8x8 GPUs, llm (60 jobs a trace)" in proc.stdout
    assert "worst size bucket" in proc.stdout and "multi-node jobs that held a GPU at >= 1.3x" in proc.stdout
    sizes = json.loads(out.read_text())["fleets"]["wide-1"]["sizes"]
    assert set(sizes["buckets"]) <= {"1", "2-8", "9-64", ">64"} and sizes["buckets"]
    assert sizes["multi_node_jobs"]["pal-guard"] > 0


@pytest.mark.parametrize(("args", "words"), [(["--shape", "8by8"], "--shape takes NODESxGPUS"),
                                              (["--workload", "llm", "--llm-jobs", "0"], "--llm-jobs")])
def test_the_matrix_refuses_a_shape_or_size_it_cannot_run(args: list[str], words: str) -> None:
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "vs_slurm.py"), "--fleets", "uniform", *args],
                          capture_output=True, text=True, timeout=120, cwd=REPO, env=harness_env())
    assert proc.returncode == 2 and words in proc.stderr, proc.stdout + proc.stderr
