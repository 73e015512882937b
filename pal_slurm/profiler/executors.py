"""Running one benchmark on one GPU: as a subprocess (real GPUs) or by simulated physics.

Both executors take a GPU and a benchmark and return a `BenchmarkOutcome`, so the
runner does not know which one it drives.

`SubprocessExecutor` starts the benchmark program with an argument list (never a shell),
CUDA_VISIBLE_DEVICES pinned to the GPU's UUID, in its own process group and session; a
program that outlives its hard timeout is killed with its whole group (SIGTERM, then
SIGKILL) and recorded as `timeout`. Output goes to temporary files, of which only the
tail is read, so a program that prints without end cannot exhaust memory. While the
program runs, a thread samples the GPU's telemetry through the backend.
"""

from __future__ import annotations

import json
import logging
import math
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Any, Protocol

from pal_slurm.gpu.interface import GpuBackend, GpuError, GpuInventory, GpuSample
from pal_slurm.ingest.jsonl import run_key_for
from pal_slurm.ingest.records import ProfileRecord
from pal_slurm.profiler.benchmarks import BenchmarkDef
from pal_slurm.profiler.telemetry import TelemetrySummary, summarize

__all__ = [
    "EXIT_FAILED",
    "EXIT_SKIPPED",
    "BenchmarkOutcome",
    "Executor",
    "RunSettings",
    "SimExecutor",
    "SubprocessExecutor",
    "parse_result",
]

log = logging.getLogger(__name__)

RESULT_FORMAT = "pal-bench/1"
EXIT_SKIPPED = 3  # profiler/_common.py: no usable framework
EXIT_FAILED = 4  # profiler/_common.py: a clean failure
_TAIL_BYTES = 64 * 1024
_KILL_GRACE_S = 3.0
SOURCE = "pal-profiler"
SIM_SOURCE = "pal-sim"


@dataclass(frozen=True)
class RunSettings:
    """How long and how precisely each benchmark runs (passed to the programs)."""

    time_budget_s: float = 20.0  # timed repeats at most this long
    timeout_s: float = 300.0  # hard limit for the whole program, start-up included
    warmup_s: float = 3.0
    target_spread: float = 0.01  # stop repeating when IQR/median <= this
    min_repeats: int = 5
    max_repeats: int = 200
    sample_interval_s: float = 0.5  # telemetry sampling period

    def __post_init__(self) -> None:
        from pal_slurm.errors import InputError

        if not self.time_budget_s > 0 or not self.timeout_s > 0 or self.warmup_s < 0:
            raise InputError("--time-budget and --timeout must be > 0 seconds")
        if self.timeout_s <= self.time_budget_s + self.warmup_s:
            raise InputError(f"--timeout ({self.timeout_s:g} s) must exceed --time-budget plus warm-up "
                             f"({self.time_budget_s + self.warmup_s:g} s): programs also need time to start")
        if not 0 < self.target_spread < 1 or not 1 <= self.min_repeats <= self.max_repeats:
            raise InputError("target spread must be within (0, 1) and 1 <= min repeats <= max repeats")


@dataclass(frozen=True)
class BenchmarkOutcome:
    """One benchmark on one GPU. `status`: ok | failed | timeout | skipped | busy."""

    run_id: str
    gpu: GpuInventory
    benchmark: BenchmarkDef
    started_at: datetime
    duration_s: float
    status: str
    score: float | None = None
    repeats: int | None = None
    spread: float | None = None
    error: str | None = None
    telemetry: TelemetrySummary | None = None
    details: dict[str, Any] = field(default_factory=dict)
    source: str = SOURCE

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def run_key(self) -> str:
        return run_key_for(self.run_id)

    def record(self) -> ProfileRecord:
        """The pal-profile/1 record of a successful run (its run_key follows from run_id)."""
        if not self.ok or self.score is None:
            raise ValueError(f"{self.benchmark.name} on {self.gpu.uuid} has no score ({self.status})")
        t = self.telemetry or TelemetrySummary(samples=0, loaded_samples=0)
        return ProfileRecord(
            run_key=self.run_key, gpu=self.gpu.gpu_info(), benchmark=self.benchmark.name, started_at=self.started_at,
            score=self.score, unit=self.benchmark.unit, lower_is_better=self.benchmark.lower_is_better,
            source=self.source, source_file="<pal profile run>", line=0, duration_s=round(self.duration_s, 3),
            repeats=self.repeats, spread=self.spread, sm_clock_mhz=t.sm_clock_mhz, mem_clock_mhz=t.mem_clock_mhz,
            power_w=t.power_w, temperature_c=t.temperature_c, throttle_reasons=t.throttle_reasons,
            driver_version=self.gpu.driver_version, cuda_version=self.gpu.cuda_version,
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id, "node": self.gpu.node, "gpu_index": self.gpu.index, "uuid": self.gpu.uuid,
            "model": self.gpu.name, "benchmark": self.benchmark.name, "status": self.status, "score": self.score,
            "unit": self.benchmark.unit, "repeats": self.repeats, "spread": self.spread, "error": self.error,
            "started_at": self.started_at.isoformat(), "duration_s": round(self.duration_s, 3),
            "telemetry": self.telemetry.as_dict() if self.telemetry else None, "details": self.details,
        }


def new_run_id(gpu: GpuInventory, bench: BenchmarkDef, started_at: datetime) -> str:
    """Unique per run: a second `pal profile run` is a new measurement, never a duplicate."""
    return f"{gpu.node}/{gpu.uuid}/{bench.name}/{started_at.isoformat()}/{secrets.token_hex(4)}"


class Executor(Protocol):
    parallel: bool  # whether the runner may run several GPUs at once

    def run(self, gpu: GpuInventory, bench: BenchmarkDef) -> BenchmarkOutcome: ...


# -- parsing a program's result (pure) -------------------------------------------------------


@dataclass(frozen=True)
class ParsedResult:
    status: str
    score: float | None = None
    repeats: int | None = None
    spread: float | None = None
    error: str | None = None
    details: dict[str, Any] = field(default_factory=dict)


def _last_line(text: str) -> str:
    return next((line.strip() for line in reversed(text.splitlines()) if line.strip()), "")


def _short(text: str, limit: int = 160) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _exit_text(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit status {returncode}"


def parse_result(bench: BenchmarkDef, returncode: int, stdout: str, stderr: str) -> ParsedResult:
    """Turn a finished program's exit status and output into a result, whatever it printed."""
    line = _last_line(stdout)
    obj: Any = None
    if line:
        try:
            obj = json.loads(line)
        except ValueError:
            obj = None
    if not isinstance(obj, dict) or obj.get("format") != RESULT_FORMAT:
        why = _short(_last_line(stderr)) or (f"last stdout line: {_short(line)!r}" if line else "no output")
        if returncode == 0:
            return ParsedResult("failed", error=f"no {RESULT_FORMAT} result line on stdout ({why})")
        return ParsedResult("failed", error=f"{_exit_text(returncode)}: {why}")
    status = obj.get("status")
    reason = obj.get("reason")
    reason = _short(str(reason)) if reason is not None else None
    if status == "skipped" or returncode == EXIT_SKIPPED:
        return ParsedResult("skipped", error=f"skipped: {reason or 'no reason given'}")
    if status != "ok" or returncode != 0:
        return ParsedResult("failed", error=reason or f"{_exit_text(returncode)} (status {status!r})")
    score, repeats, spread, unit = obj.get("score"), obj.get("repeats"), obj.get("spread"), obj.get("unit")
    if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score) or score <= 0:
        return ParsedResult("failed", error=f"result has no positive score (got {score!r})")
    if unit != bench.unit:
        return ParsedResult("failed", error=f"result unit {unit!r}, expected {bench.unit!r}")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        repeats = None
    if isinstance(spread, bool) or not isinstance(spread, (int, float)) or not math.isfinite(spread) or spread < 0:
        spread = None
    details = {k: obj[k] for k in ("framework", "device", "params", "stopped", "warmup_s") if k in obj}
    return ParsedResult("ok", score=float(score), repeats=repeats, spread=None if spread is None else float(spread),
                        details=details)


# -- the subprocess executor ----------------------------------------------------------------


def _tail(stream: IO[bytes]) -> str:
    stream.seek(0, os.SEEK_END)
    size = stream.tell()
    stream.seek(max(0, size - _TAIL_BYTES))
    return stream.read().decode("utf-8", "replace")


def _kill_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class _Sampler:
    """Samples one GPU every `interval` seconds in a thread until stopped."""

    def __init__(self, backend: GpuBackend, index: int, interval: float) -> None:
        self.samples: list[GpuSample] = []
        self.error: str | None = None
        self._backend, self._index, self._interval = backend, index, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"telemetry-gpu{index}", daemon=True)

    def _loop(self) -> None:
        while True:
            try:
                self.samples.append(self._backend.sample(self._index))
            except GpuError as exc:  # a GPU lost mid-run: the program will fail too; say why
                self.error = str(exc)
                return
            if self._stop.wait(self._interval):
                return

    def __enter__(self) -> _Sampler:  # noqa: PYI034 - a private class, never subclassed
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5.0)


class SubprocessExecutor:
    """One program per GPU and benchmark, pinned with CUDA_VISIBLE_DEVICES, hard timeout."""

    parallel = True

    def __init__(self, backend: GpuBackend, program_dir: Path, settings: RunSettings, *,
                 python: str = sys.executable, now: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self.backend = backend
        self.program_dir = program_dir
        self.settings = settings
        self.python = python
        self._now = now

    def argv(self, bench: BenchmarkDef) -> list[str]:
        s = self.settings
        return [self.python, str(self.program_dir / bench.program), *bench.args,
                "--time-budget", f"{s.time_budget_s:g}", "--warmup", f"{s.warmup_s:g}",
                "--target-spread", f"{s.target_spread:g}", "--min-repeats", str(s.min_repeats),
                "--max-repeats", str(s.max_repeats)]

    def env(self, gpu: GpuInventory) -> dict[str, str]:
        env = dict(os.environ)
        env["CUDA_VISIBLE_DEVICES"] = self.backend.visible_device(gpu.index)
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def run(self, gpu: GpuInventory, bench: BenchmarkDef) -> BenchmarkOutcome:
        argv, env = self.argv(bench), self.env(gpu)
        started_at = self._now()
        run_id = new_run_id(gpu, bench, started_at)
        t0 = time.monotonic()
        timed_out = False
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
                _Sampler(self.backend, gpu.index, self.settings.sample_interval_s) as sampler:
            try:
                proc = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env,
                                        start_new_session=True, cwd=str(self.program_dir))
            except OSError as exc:
                return BenchmarkOutcome(run_id, gpu, bench, started_at, 0.0, "failed",
                                        error=f"cannot start {argv[0]}: {exc.strerror or exc}")
            try:
                returncode = proc.wait(timeout=self.settings.timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
                log.warning("%s on GPU %d (%s): no result after %g s, killing its process group",
                            bench.name, gpu.index, gpu.uuid, self.settings.timeout_s)
                _kill_group(proc.pid, signal.SIGTERM)
                try:
                    returncode = proc.wait(timeout=_KILL_GRACE_S)
                except subprocess.TimeoutExpired:
                    _kill_group(proc.pid, signal.SIGKILL)
                    returncode = proc.wait()
            _kill_group(proc.pid, signal.SIGKILL)  # children it left behind must not hold the GPU
            duration = time.monotonic() - t0
            stdout, stderr = _tail(out), _tail(err)
        telemetry = summarize(sampler.samples)
        if timed_out:
            return BenchmarkOutcome(run_id, gpu, bench, started_at, duration, "timeout", telemetry=telemetry,
                                    error=f"no result within the {self.settings.timeout_s:g} s timeout; "
                                          "killed with its process group")
        parsed = parse_result(bench, returncode, stdout, stderr)
        error = parsed.error
        if sampler.error and parsed.status != "ok":
            error = f"{error}; telemetry: {sampler.error}"
        if parsed.status != "ok":
            log.warning("%s on GPU %d (%s): %s", bench.name, gpu.index, gpu.uuid, error)
        return BenchmarkOutcome(run_id, gpu, bench, started_at, duration, parsed.status, score=parsed.score,
                                repeats=parsed.repeats, spread=parsed.spread, error=error, telemetry=telemetry,
                                details=parsed.details)


# -- the simulated executor -----------------------------------------------------------------


class SimExecutor:
    """Plays each benchmark with `pal_slurm.gpu.simulated_fleet`'s physics on the simulated GPU.

    Time is virtual: each GPU's runs follow one another from `start` (nodes a few seconds
    apart, like real profiling jobs), taking the simulated durations without sleeping.
    The noise of a run is seeded by fleet seed, GPU, benchmark and start time, so the
    same `start` replays the same results.
    """

    parallel = False

    def __init__(self, backend: Any, start: datetime, *, gap_s: float = 3.0) -> None:
        from pal_slurm.gpu.simulated import SimBackend

        if not isinstance(backend, SimBackend):
            raise TypeError("SimExecutor needs the simulated backend")
        self.backend = backend
        self._start = start.astimezone(UTC)
        self._gap = gap_s
        self._clock: dict[int, datetime] = {}

    def run(self, gpu: GpuInventory, bench: BenchmarkDef) -> BenchmarkOutcome:
        import numpy as np  # only the simulator needs it: a GPU node's check runs on the standard library

        sim = self.backend.sim_gpu(gpu.index)
        fleet = self.backend.fleet
        t = self._clock.get(gpu.index) or self._start + timedelta(seconds=7.0 * sim.node_index)
        seed = [fleet.seed, sim.index, zlib.crc32(bench.name.encode()), int(t.timestamp() * 1000)]
        rec = fleet.run_benchmark(sim, bench.sim_benchmark, t, np.random.default_rng(seed))
        duration = float(rec.duration_s or 0.0)
        self._clock[gpu.index] = t + timedelta(seconds=duration + self._gap)
        score = bench.nominal(fleet.model.name) * fleet.model.base_ms(bench.sim_benchmark) / rec.score
        telemetry = TelemetrySummary(
            samples=rec.repeats or 1, loaded_samples=rec.repeats or 1, sm_clock_mhz=rec.sm_clock_mhz,
            sm_clock_min_mhz=rec.sm_clock_mhz, mem_clock_mhz=rec.mem_clock_mhz, power_w=rec.power_w,
            temperature_c=rec.temperature_c, temperature_max_c=rec.temperature_c,
            throttle_reasons=rec.throttle_reasons, utilization_gpu=100.0, utilization_memory=None,
        )
        return BenchmarkOutcome(new_run_id(gpu, bench, t), gpu, bench, t, duration, "ok",
                                score=round(score, 4 if score < 100 else 2), repeats=rec.repeats, spread=rec.spread,
                                telemetry=telemetry, details={"simulated": bench.sim_benchmark},
                                source=SIM_SOURCE)
