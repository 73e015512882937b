"""`pal profile inventory|run|submit` through the CLI, and the recovery target on a 64-GPU simulated fleet:
`pal profile run --backend sim` then `pal classify` puts no GPU more than one bin away from its true class."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import func, select

from pal_slurm.cli.main import cli
from pal_slurm.db.engine import make_engine, session_scope
from pal_slurm.db.models import BenchmarkFailure, Gpu, ProfileRun
from pal_slurm.demo.recovery import load_assignments, recovery
from pal_slurm.gpu.simulated_fleet import make_fleet
from pal_slurm.profiler.benchmarks import select_benchmarks

SIM = ["--backend", "sim", "--sim-nodes", "2", "--sim-gpus-per-node", "2", "--sim-seed", "3"]


def pal(runner: CliRunner, url: str, *args: str, code: int = 0):
    result = runner.invoke(cli, ["--db", url, *args], env={"PAL_CONFIG": ""})
    assert result.exit_code == code, f"exit {result.exit_code}: {result.output}"
    assert "Traceback" not in result.output
    return result


@pytest.fixture
def db(runner: CliRunner, sqlite_url: str) -> str:
    pal(runner, sqlite_url, "db", "upgrade")
    return sqlite_url


def _count(url: str, model) -> int:
    engine = make_engine(url)
    try:
        with session_scope(engine) as s:
            return s.scalar(select(func.count()).select_from(model)) or 0
    finally:
        engine.dispose()


def test_no_gpu_means_one_clear_error(runner: CliRunner, db: str) -> None:
    for cmd in ("inventory", "run"):
        out = pal(runner, db, "profile", cmd, code=1).output
        assert out.startswith("pal: error: no NVIDIA GPU found") and "pass --backend sim" in out


def test_inventory_json_and_missing(runner: CliRunner, db: str) -> None:
    data = json.loads(pal(runner, db, "profile", "inventory", *SIM, "--json").stdout)
    assert len(data["gpus"]) == 4 and data["stored"]["added"] and data["db_error"] is None
    assert {"power_limit_w", "vbios_version", "ecc_corrected", "retired_pages"} <= set(data["gpus"][0])
    lost = json.loads(pal(runner, db, "profile", "inventory", *SIM, "--sim-lost", "1", "--json").stdout)
    assert lost["faults"][0]["lost"] and lost["stored"]["missing"] == [data["gpus"][1]["uuid"]]
    table = pal(runner, db, "profile", "inventory", *SIM).output
    assert "4 GPUs (sim)" in table and "1 back" in table
    assert _count(db, Gpu) == 4
    assert "fault:" not in pal(runner, db, "profile", "inventory", *SIM, "--no-db").output


def test_run_writes_file_and_database(runner: CliRunner, db: str, tmp_path: Path) -> None:
    out = tmp_path / "p.jsonl"
    res = pal(runner, db, "profile", "run", *SIM, "--benchmarks", "gemm,stream", "--passes", "2", "--output",
              str(out), "--json")
    data = json.loads(res.stdout)
    assert data["runs_ok"] == 4 * 3 * 2 and data["imported"] == 24 and data["output"] == str(out)
    first = data["outcomes"][0]
    assert first["telemetry"]["sm_clock_mhz"] and first["unit"] in ("TFLOP/s", "GB/s")
    assert _count(db, ProfileRun) == 24
    again = json.loads(pal(runner, db, "profile", "import", str(out), "--json").stdout)
    assert again[0]["added"] == 0 and again[0]["already_present"] == 24
    table = pal(runner, db, "profile", "run", *SIM, "--benchmarks", "gemm-fp16", "--gpus", "0,3", "--passes", "1",
                "--output", str(tmp_path / "q.jsonl")).output
    assert "sw_power_cap" in table and "2 results ->" in table


def test_run_refuses_busy_gpu_and_says_which(runner: CliRunner, db: str, tmp_path: Path) -> None:
    res = pal(runner, db, "profile", "run", *SIM, "--benchmarks", "stream", "--passes", "1", "--sim-busy", "2",
              "--output", str(tmp_path / "a.jsonl"))
    assert "not benchmarked: GPU 2" in res.output and "pid 40002" in res.output
    assert _count(db, BenchmarkFailure) == 1
    forced = pal(runner, db, "profile", "run", *SIM, "--benchmarks", "stream", "--passes", "1", "--sim-busy", "2",
                 "--force", "--gpus", "2", "--output", str(tmp_path / "b.jsonl"), "--json")
    assert json.loads(forced.stdout)["runs_ok"] == 1
    none = pal(runner, db, "profile", "run", *SIM, "--sim-nodes", "1", "--sim-busy", "0,1", "--passes", "1",
               "--output", str(tmp_path / "c.jsonl"), code=1)
    assert "no benchmark produced a result" in none.output


def test_run_with_database_down_keeps_the_file(runner: CliRunner, tmp_path: Path) -> None:
    out = tmp_path / "kept.jsonl"
    url = f"sqlite:///{tmp_path / 'never-upgraded.db'}"
    res = pal(runner, url, "profile", "run", *SIM, "--benchmarks", "stream", "--passes", "1", "--output", str(out),
              code=1)
    assert "results not stored" in res.output and f"pal profile import {out}" in res.output
    assert out.exists() and out.read_text().count('"format": "pal-profile/1"') == 4


def test_bad_options_are_one_line(runner: CliRunner, db: str) -> None:
    assert "unknown benchmark 'fft'" in pal(runner, db, "profile", "run", *SIM, "--benchmarks", "fft", code=1).output
    assert "GPU index 9 does not exist" in pal(runner, db, "profile", "run", *SIM, "--gpus", "9", code=1).output
    assert "--timeout" in pal(runner, db, "profile", "run", *SIM, "--timeout", "5", code=1).output
    assert "no node gpu777" in pal(runner, db, "profile", "inventory", *SIM, "--sim-node", "gpu777", code=1).output


def test_submit_dry_run_prints_argv(runner: CliRunner, db: str) -> None:
    res = pal(runner, db, "profile", "submit", "--nodes", "n1,n2", "--gpus-per-node", "4", "--reservation", "maint",
              "--run-args", "--benchmarks 'gemm' --passes 5", "--dry-run")
    lines = res.stdout.strip().splitlines()
    assert len(lines) == 2
    argv = shlex.split(lines[0])
    assert argv[0] == "sbatch" and "--exclusive" in argv and "--nice=10000" in argv and "--nodelist=n1" in argv
    assert "--gres=gpu:4" in argv and "--reservation=maint" in argv
    tail = argv[argv.index("profile"):]
    assert tail == ["profile", "run", "--backend", "auto", "--benchmarks", "gemm", "--passes", "5"]
    assert "--run-args" in pal(runner, db, "profile", "submit", "--nodes", "n1", "--gpus-per-node", "1",
                               "--run-args", "'oops", "--dry-run", code=1).output


# -- the target ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("seed", "bad_fraction"), [(0, 0.03), (3, 0.1)])
def test_target_sim_fleet_classes_recovered_within_one_bin(runner: CliRunner, db: str, tmp_path: Path, seed: int,
                                                           bad_fraction: float) -> None:
    pal(runner, db, "profile", "run", "--backend", "sim", "--sim-nodes", "16", "--sim-gpus-per-node", "4",
        "--sim-seed", str(seed), "--sim-bad-fraction", str(bad_fraction), "--passes", "3",
        "--output", str(tmp_path / "fleet.jsonl"))
    pal(runner, db, "classify")
    fleet = make_fleet(nodes=16, gpus_per_node=4, seed=seed, bad_fraction=bad_fraction)
    engine = make_engine(db)
    try:
        for bench in select_benchmarks(None):
            rec = recovery(bench.name, fleet.true_bins(bench.sim_benchmark), load_assignments(engine, bench.name))
            assert rec.gpus == 64, bench.name
            assert rec.within_one == 64, f"{bench.name}: {rec.matrix}"
            assert rec.exact_fraction >= 0.9, f"{bench.name}: {rec.matrix}"
            if bench.sim_benchmark == "sgemm":  # every planted defect is fenced off where the clock matters most
                bad = {g.uuid for g in fleet.bad_gpus}
                assigned = load_assignments(engine, bench.name)
                assert {u for u, a in assigned.items() if a.outlier} == bad
    finally:
        engine.dispose()
