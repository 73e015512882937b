"""The benchmark runner for real: subprocesses that hang, crash, print garbage; pinning; telemetry.

Tiny Python programs stand in for the GPU benchmarks (the machinery is the same: one
process per GPU, a hard timeout, a process-group kill, a result line); the real
benchmark programs run too, through the same executor, and say they are skipped when
neither cupy nor torch is installed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import textwrap
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import func, select

from pal_slurm.db import migrate
from pal_slurm.db.engine import make_engine, session_scope
from pal_slurm.db.models import BenchmarkFailure, ProfileRun
from pal_slurm.ingest.jsonl import parse_file
from pal_slurm.profiler.benchmarks import (
    BENCHMARKS,
    BenchmarkDef,
    program_dir,
    select_benchmarks,
)
from pal_slurm.profiler.executors import (
    RunSettings,
    SimExecutor,
    SubprocessExecutor,
    parse_result,
)
from pal_slurm.gpu.interface import GpuSample
from pal_slurm.gpu.simulated import SimBackend
from pal_slurm.gpu.simulated_fleet import make_fleet
from pal_slurm.services.ingest import import_files
from pal_slurm.profiler.run_store import save_run
from pal_slurm.profiler.runner import FAILURE_PREFIX, run_profile, write_jsonl
from pal_slurm.profiler.telemetry import reason_names, summarize

REPO = Path(__file__).resolve().parents[2]

PROGRAMS = {
    "good.py": """
        import json, os, sys, time
        time.sleep(float(os.environ.get("GOOD_SLEEP", "0.4")))
        print("warming up", file=sys.stderr)
        print(json.dumps({"format": "pal-bench/1", "benchmark": "t", "status": "ok", "score": 42.5,
                          "unit": "TFLOP/s", "lower_is_better": False, "repeats": 7, "spread": 0.004,
                          "framework": "test", "params": {"visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
                                                          "argv": sys.argv[1:]}}))
    """,
    "hang.py": """
        import os, subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        open(os.environ["CHILD_PID_FILE"], "w").write(str(child.pid))
        time.sleep(600)
    """,
    "stubborn.py": """
        import signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("ignoring SIGTERM", flush=True)
        time.sleep(600)
    """,
    "crash.py": """
        import sys
        print("about to divide", file=sys.stderr)
        1 / 0
    """,
    "garbage.py": """
        print("hello")
        print("{not json")
    """,
    "segv.py": """
        import os, signal
        os.kill(os.getpid(), signal.SIGSEGV)
    """,
    "skip.py": """
        import json, sys
        print(json.dumps({"format": "pal-bench/1", "benchmark": "t", "status": "skipped",
                          "reason": "no cupy/torch"}))
        sys.exit(3)
    """,
    "wrong_unit.py": """
        import json
        print(json.dumps({"format": "pal-bench/1", "status": "ok", "score": 1.0, "unit": "GB/s"}))
    """,
    "flood.py": """
        import json, sys
        for _ in range(40000):
            sys.stdout.write("x" * 120 + "\\n")
        print(json.dumps({"format": "pal-bench/1", "status": "ok", "score": 3.0, "unit": "TFLOP/s",
                          "repeats": 5, "spread": 0.01}))
    """,
}


def _bench(program: str, name: str | None = None) -> BenchmarkDef:
    return BenchmarkDef(name or program.removesuffix(".py"), "test", program, ("--flag",), "TFLOP/s", False,
                        "sgemm", (("V100", 10.0),), "test program")


@pytest.fixture
def progdir(tmp_path: Path) -> Path:
    d = tmp_path / "programs"
    d.mkdir()
    for name, body in PROGRAMS.items():
        (d / name).write_text(textwrap.dedent(body), encoding="utf-8")
    return d


@pytest.fixture
def backend() -> SimBackend:
    return SimBackend(make_fleet(nodes=1, gpus_per_node=2, seed=9), load=lambda i, t: 1.0)


SETTINGS = RunSettings(time_budget_s=0.5, timeout_s=10.0, warmup_s=0.1, sample_interval_s=0.05)


def _run(backend: SimBackend, progdir: Path, program: str, settings: RunSettings = SETTINGS, index: int = 0):
    ex = SubprocessExecutor(backend, progdir, settings)
    return ex.run(backend.inventory(index), _bench(program))


def test_good_program_pinned_with_telemetry(backend: SimBackend, progdir: Path) -> None:
    o = _run(backend, progdir, "good.py", index=1)
    assert o.status == "ok" and o.score == 42.5 and o.repeats == 7 and o.spread == 0.004
    assert o.details["params"]["visible"] == backend.inventory(1).uuid, "CUDA_VISIBLE_DEVICES pinned to the UUID"
    assert o.details["params"]["argv"][:1] == ["--flag"] and "--time-budget" in o.details["params"]["argv"]
    t = o.telemetry
    assert t is not None and t.samples >= 3 and t.loaded_samples == t.samples
    assert t.sm_clock_mhz and t.power_w and t.temperature_c and t.throttle_reasons is not None
    rec = o.record()
    assert rec.gpu.uuid == backend.inventory(1).uuid and rec.sm_clock_mhz == t.sm_clock_mhz
    assert rec.unit == "TFLOP/s" and rec.lower_is_better is False and rec.run_key == o.run_key


def test_hung_program_and_its_children_are_killed(backend: SimBackend, progdir: Path, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    pid_file = tmp_path / "child.pid"
    monkeypatch.setenv("CHILD_PID_FILE", str(pid_file))
    settings = RunSettings(time_budget_s=0.2, timeout_s=1.5, warmup_s=0.1, sample_interval_s=0.2)
    t0 = time.monotonic()
    o = _run(backend, progdir, "hang.py", settings)
    assert o.status == "timeout" and "1.5 s timeout" in o.error and "process group" in o.error
    assert 1.4 < time.monotonic() - t0 < 6
    child = int(pid_file.read_text())
    time.sleep(0.2)
    assert not _alive(child), "the benchmark's child must die with it"
    with pytest.raises(ValueError, match="no score"):
        o.record()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (not yet reaped by its dead parent's reaper) counts as dead
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_program_ignoring_sigterm_gets_sigkill(backend: SimBackend, progdir: Path) -> None:
    settings = RunSettings(time_budget_s=0.2, timeout_s=1.0, warmup_s=0.1)
    t0 = time.monotonic()
    o = _run(backend, progdir, "stubborn.py", settings)
    assert o.status == "timeout" and time.monotonic() - t0 < 8


@pytest.mark.parametrize(("program", "status", "error"), [
    ("crash.py", "failed", r"exit status 1: ZeroDivisionError: division by zero"),
    ("garbage.py", "failed", r"no pal-bench/1 result line on stdout \(last stdout line: '\{not json'\)"),
    ("segv.py", "failed", r"killed by SIGSEGV"),
    ("skip.py", "skipped", r"skipped: no cupy/torch"),
    ("wrong_unit.py", "failed", r"result unit 'GB/s', expected 'TFLOP/s'"),
    ("missing.py", "failed", r"exit status 2"),
])
def test_bad_programs_are_recorded_with_reason(backend: SimBackend, progdir: Path, program: str, status: str,
                                               error: str) -> None:
    o = _run(backend, progdir, program)
    assert o.status == status
    assert o.error is not None and __import__("re").search(error, o.error), o.error


def test_flood_of_output_keeps_the_result(backend: SimBackend, progdir: Path) -> None:
    o = _run(backend, progdir, "flood.py")
    assert o.status == "ok" and o.score == 3.0


def test_parse_result_edge_cases() -> None:
    b = _bench("x.py")
    ok = json.dumps({"format": "pal-bench/1", "status": "ok", "score": 2.0, "unit": "TFLOP/s", "repeats": True,
                     "spread": -1})
    r = parse_result(b, 0, "noise\n" + ok + "\n\n", "")
    assert r.status == "ok" and r.repeats is None and r.spread is None  # bad optional fields dropped
    assert parse_result(b, 0, json.dumps({"format": "pal-bench/1", "status": "ok", "score": 0, "unit": "TFLOP/s"}),
                        "").error.startswith("result has no positive score")
    assert parse_result(b, 0, '{"format": "other"}', "").status == "failed"
    assert parse_result(b, 4, json.dumps({"format": "pal-bench/1", "status": "failed", "reason": "CUDA OOM"}),
                        "").error == "CUDA OOM"
    assert parse_result(b, 0, "", "").error.endswith("(no output)")
    assert parse_result(b, -9, "", "").error == "killed by SIGKILL: no output"


# -- the real benchmark programs through the same executor ------------------------------------


def test_real_programs_skip_cleanly_without_cupy_or_torch(backend: SimBackend) -> None:
    pytest.importorskip("numpy")
    have = [m for m in ("cupy", "torch") if importlib.util.find_spec(m)]
    if have:
        pytest.skip(f"{have} installed: the programs would try the GPU")
    ex = SubprocessExecutor(backend, program_dir(), SETTINGS)
    for bench in BENCHMARKS.values():
        o = ex.run(backend.inventory(0), bench)
        assert o.status == "skipped", (bench.name, o.error)
        assert "no cupy/torch" in o.error or "no torch" in o.error


def test_broken_framework_install_is_a_failure_with_its_reason(backend: SimBackend, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """cupy installed but unable to load its CUDA libraries is not 'no cupy': the reason is kept."""
    if importlib.util.find_spec("torch"):
        pytest.skip("torch installed: it would be used instead")
    broken = tmp_path / "site" / "cupy"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text('raise ImportError("CuPy failed to load libnvrtc.so.12")\n')
    monkeypatch.setenv("PYTHONPATH", str(broken.parent))
    o = SubprocessExecutor(backend, program_dir(), SETTINGS).run(backend.inventory(0), BENCHMARKS["stream"])
    assert o.status == "failed" and o.error == "cupy: ImportError: CuPy failed to load libnvrtc.so.12"


def test_real_programs_end_to_end_on_numpy(backend: SimBackend) -> None:
    """gemm and stream run on the CPU with --framework numpy: the whole program path, real numbers."""
    settings = RunSettings(time_budget_s=0.5, timeout_s=60.0, warmup_s=0.1, target_spread=0.2, min_repeats=3)
    ex = SubprocessExecutor(backend, program_dir(), settings)
    gemm = BenchmarkDef("gemm-fp32", "gemm", "gemm.py", ("--dtype", "fp32", "--framework", "numpy", "--size", "64"),
                        "TFLOP/s", False, "sgemm", (("V100", 1.0),), "")
    stream = BenchmarkDef("stream", "stream", "stream.py", ("--framework", "numpy", "--elements", "65536"), "GB/s",
                          False, "pagerank", (("V100", 1.0),), "")
    for bench in (gemm, stream):
        o = ex.run(backend.inventory(0), bench)
        assert o.status == "ok", o.error
        assert o.score > 0 and o.repeats >= 3 and o.details["framework"].startswith("numpy")


def _load_common():
    spec = importlib.util.spec_from_file_location("pal_bench_common", REPO / "profiler" / "_common.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["pal_bench_common"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_measure_repeats_until_converged_or_budget() -> None:
    common = _load_common()
    now = [0.0]

    def clock() -> float:
        return now[0]

    def steady() -> float:
        now[0] += 0.1
        return 100.0

    m = common.measure(steady, warmup_s=0.35, time_budget_s=10, target_spread=0.01, min_repeats=5, max_repeats=50,
                       clock=clock)
    assert (m.stopped, m.repeats, m.score, m.spread) == ("converged", 5, 100.0, 0.0)
    assert m.warmup_s == pytest.approx(0.4)  # at least one step, then until 0.35 s passed
    values = iter([100.0, 50.0] * 1000)

    def noisy() -> float:
        now[0] += 0.1
        return next(values)

    m = common.measure(noisy, warmup_s=0, time_budget_s=1.0, target_spread=0.01, min_repeats=3, max_repeats=500,
                       clock=clock)
    assert m.stopped == "time_budget" and 9 <= m.repeats <= 11 and m.spread > 0.3
    m = common.measure(noisy, warmup_s=0, time_budget_s=100, target_spread=0.01, min_repeats=3, max_repeats=6,
                       clock=clock)
    assert m.stopped == "max_repeats" and m.repeats == 6
    assert common.relative_spread([1.0]) == 0.0
    assert common.relative_spread([90.0, 100.0, 110.0]) == pytest.approx(0.1)


# -- telemetry and the runner as a whole -------------------------------------------------------


def test_summarize_ignores_idle_start_up() -> None:
    idle = GpuSample(0.0, 135.0, 877.0, 40.0, 35.0, 0x1, 0, 0)
    busy = [GpuSample(1.0 + i, 1350.0 + i, 877.0, 298.0, 70.0 + i, 0x4 if i else 0x24, 100, 30) for i in range(3)]
    t = summarize([idle, *busy])
    assert (t.samples, t.loaded_samples, t.sm_clock_mhz, t.sm_clock_min_mhz) == (4, 3, 1351.0, 1350.0)
    assert t.throttle_reasons == 0x24 and t.temperature_max_c == 72.0
    assert reason_names(t.throttle_reasons) == ["sw_power_cap", "sw_thermal_slowdown"]
    no_util = summarize([GpuSample(0.0, 1000.0, None, None, None, 0x4)])
    assert no_util.loaded_samples == 1 and no_util.sm_clock_mhz == 1000.0
    assert summarize([]).loaded_samples == 0 and reason_names(0x1000) == ["0x1000"]


def test_run_profile_refuses_busy_gpu_unless_forced(progdir: Path) -> None:
    fleet = make_fleet(nodes=1, gpus_per_node=3, seed=2)
    backend = SimBackend(fleet, busy=[1], lost=[2])
    ex = SubprocessExecutor(backend, progdir, SETTINGS)
    res = run_profile(backend, ex, [_bench("good.py")], passes=2)
    assert [b.index for b in res.busy] == [1] and "pid 40001" in res.busy[0].describe()
    assert [f.index for f in res.faults] == [2] and res.faults[0].lost
    assert {o.gpu.index for o in res.outcomes} == {0} and len(res.ok) == 2
    forced = run_profile(backend, ex, [_bench("good.py")], force=True, indices=[1])
    assert forced.busy == [] and [o.gpu.index for o in forced.ok] == [1]
    with pytest.raises(Exception, match="GPU index 5 does not exist"):
        run_profile(backend, ex, [_bench("good.py")], indices=[5])


def test_gpus_run_in_parallel(progdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOOD_SLEEP", "1.0")
    backend = SimBackend(make_fleet(nodes=1, gpus_per_node=4, seed=2))
    t0 = time.monotonic()
    res = run_profile(backend, SubprocessExecutor(backend, progdir, SETTINGS), [_bench("good.py")])
    assert len(res.ok) == 4 and time.monotonic() - t0 < 3.5, "one process per GPU, all at once"


def test_results_file_and_database(progdir: Path, tmp_path: Path, sqlite_url: str) -> None:
    backend = SimBackend(make_fleet(nodes=1, gpus_per_node=2, seed=2), busy=[1])
    ex = SubprocessExecutor(backend, progdir, SETTINGS)
    res = run_profile(backend, ex, [_bench("good.py"), _bench("crash.py")], force=False)
    out = tmp_path / "run.jsonl"
    assert write_jsonl(out, res) == 1
    text = out.read_text()
    assert text.count(FAILURE_PREFIX) == 2 and '"status": "busy"' in text and "ZeroDivisionError" in text
    records = parse_file(out)  # failures are comments to the importer
    assert len(records) == 1 and records[0].run_key == res.ok[0].run_key and records[0].score == 42.5
    engine = make_engine(sqlite_url)
    migrate.upgrade(engine)
    saved = save_run(engine, res)
    assert saved.imported.added == 1 and saved.failures_added == 2 and len(saved.inventory.added) == 2
    again = import_files(engine, [out], "jsonl")
    assert again[0].result.added == 0 and again[0].result.already_present == 1
    # Saving again adds the failed run once only; "busy" is a new observation each time.
    assert save_run(engine, res).failures_added == 1
    with session_scope(engine) as s:
        fails = s.scalars(select(BenchmarkFailure).order_by(BenchmarkFailure.id)).all()
        assert [(f.benchmark, f.status) for f in fails[:2]] == [("crash", "failed"), ("*", "busy")]
        assert "ZeroDivisionError" in fails[0].error
        assert s.scalar(select(func.count()).select_from(ProfileRun)) == 1
    engine.dispose()


def test_sim_executor_is_reproducible_and_in_units() -> None:
    fleet = make_fleet(nodes=2, gpus_per_node=2, seed=11)
    start = datetime(2026, 2, 1, tzinfo=UTC)
    benches = select_benchmarks("gemm,stream,train")
    assert [b.name for b in benches] == ["gemm-fp16", "gemm-fp32", "stream", "train-resnet50", "train-bert"]

    def play() -> list[tuple[str, float]]:
        b = SimBackend(fleet)
        res = run_profile(b, SimExecutor(b, start), benches, passes=2)
        return [(o.benchmark.name, o.score) for o in res.outcomes]

    first = play()
    assert first == play() and len(first) == 4 * 5 * 2
    fp16 = [s for n, s in first if n == "gemm-fp16"]
    stream = [s for n, s in first if n == "stream"]
    assert 60 < min(fp16) and max(fp16) < 100, "V100 fp16 TFLOP/s around the nominal 92"
    assert 700 < min(stream) and max(stream) < 900
    with pytest.raises(Exception, match="unknown benchmark 'bogus'"):
        select_benchmarks("gemm,bogus")
