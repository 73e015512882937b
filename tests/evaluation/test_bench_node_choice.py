"""bench/node_choice.py on a hand-made replay result: each job's free GPUs rebuilt from the run's
own starts and ends, and each node model's pick compared with the GPUs Slurm gave."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import harness_env

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "node_choice.py"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, check=False,
                          timeout=60, env=harness_env())


def job(jid: str, start: float, end: float, placed: list[tuple[str, int]]) -> dict:
    return {"trace_id": jid, "gpus": len(placed), "nodes": len({n for n, _ in placed}), "start": start, "end": end,
            "placed_on": [list(p) for p in placed]}


def test_counts_the_jobs_each_model_names(tmp_path: Path) -> None:
    out = tmp_path / "fleet"
    (out / "t" / "rep1-seed1").mkdir(parents=True)
    (out / "replay.json").write_text(json.dumps({"nodes": 2, "gpus_per_node": 4}))
    jobs = [
        # Slurm put it on pal-r02; both models name pal-r01 (equal nodes: the first)
        job("a", 0, 100, [("pal-r02", 0), ("pal-r02", 1), ("pal-r02", 2)]),
        # one GPU free on pal-r02: cons_tres's tightest node; first fit names pal-r01's slot 0
        job("b", 10, 50, [("pal-r02", 3)]),
        # after b's end (it frees pal-r02 slot 3 at 50): started at 50 exactly, it sees slot 3 free
        job("c", 50, 60, [("pal-r02", 3)]),
    ]
    (out / "t" / "rep1-seed1" / "slurm.json").write_text(json.dumps({"complete": True, "run": {"jobs": jobs}}))
    proc = run(str(out), "--json")
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads(proc.stdout)
    assert row == {"run": "fleet/t/rep1-seed1/slurm.json", "jobs": 3, "left out": 0, "first fit": 0,
                   "cons_tres fit": 2}
    table = run(str(out)).stdout
    assert "fleet/t/rep1-seed1/slurm.json" in table and "67%" in table


def test_a_directory_without_results_is_refused_by_name(tmp_path: Path) -> None:
    proc = run(str(tmp_path))
    assert proc.returncode == 2
    assert f"{tmp_path / 'replay.json'}: not found" in proc.stderr and "Traceback" not in proc.stderr


def test_a_result_that_does_not_parse_is_refused_by_name(tmp_path: Path) -> None:
    (tmp_path / "t" / "rep1-seed1").mkdir(parents=True)
    (tmp_path / "replay.json").write_text(json.dumps({"nodes": 2, "gpus_per_node": 4}))
    bad = tmp_path / "t" / "rep1-seed1" / "slurm.json"
    bad.write_text('{"run": {"jobs": [{"start": 0}]')
    proc = run(str(tmp_path))
    assert proc.returncode == 2
    assert f"{bad}: not a bench/replay.py result" in proc.stderr and "Traceback" not in proc.stderr
