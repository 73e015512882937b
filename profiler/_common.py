"""What every benchmark program shares: options, framework choice, the repeat loop, the result line.

The programs in this directory run on GPU nodes as standalone scripts (`python3
profiler/gemm.py --dtype fp16`); they import nothing from pal_slurm so that they can be
copied to a node and run by hand. `pal profile run` starts one per GPU with
CUDA_VISIBLE_DEVICES pinned, so a program always uses its device 0.

Contract with the runner (pal_slurm/profiler/executors.py):
* stdout: exactly one JSON object on the last line, format "pal-bench/1", with
  "status" ok | skipped | failed; ok results carry score, unit, lower_is_better,
  repeats, spread (IQR / median of the repeats), warmup_s, framework, device.
* exit status: 0 ok, 3 skipped (no usable framework), 4 failed (a clean failure, e.g.
  a CUDA error); anything else is a crash.
* diagnostics go to stderr only.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

FORMAT = "pal-bench/1"
EXIT_OK = 0
EXIT_SKIPPED = 3
EXIT_FAILED = 4
GPU_FRAMEWORKS = ("cupy", "torch")
NO_FRAMEWORK = "no cupy/torch: install cupy-cuda12x (or cupy-cuda11x) or torch on the GPU nodes"


def relative_spread(scores: Sequence[float]) -> float:
    """Interquartile range / median: robust to the odd slow repeat, 0 for a single score."""
    if len(scores) < 2:
        return 0.0
    q1, _, q3 = statistics.quantiles(scores, n=4, method="inclusive")
    med = statistics.median(scores)
    return (q3 - q1) / med if med > 0 else float("inf")


@dataclass(frozen=True)
class Measurement:
    score: float  # median of the repeats
    spread: float
    repeats: int
    warmup_s: float
    stopped: str  # converged | time_budget | max_repeats


def measure(step: Callable[[], float], *, warmup_s: float, time_budget_s: float, target_spread: float,
            min_repeats: int, max_repeats: int, clock: Callable[[], float] = time.perf_counter) -> Measurement:
    """Warm up, then repeat `step` (which returns one repeat's score) until the relative
    spread of the scores is at most `target_spread` (after `min_repeats`), the time budget
    is spent, or `max_repeats` is reached; the score is the median.

    Warm-up runs at least one step and lasts `warmup_s`: the first steps pay for kernel
    selection and memory allocation, and the clocks settle only after the GPU has heated.
    """
    t0 = clock()
    step()
    while clock() - t0 < warmup_s:
        step()
    warm = clock() - t0
    scores: list[float] = []
    start = clock()
    stopped = "max_repeats"
    while len(scores) < max_repeats:
        scores.append(float(step()))
        if len(scores) >= min_repeats and relative_spread(scores) <= target_spread:
            stopped = "converged"
            break
        if clock() - start >= time_budget_s:
            stopped = "time_budget"
            break
    return Measurement(statistics.median(scores), relative_spread(scores), len(scores), warm, stopped)


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--framework", choices=("auto", "cupy", "torch", "numpy"), default="auto",
                   help="auto: cupy if it works, else torch. numpy runs on the CPU, for a self-test only.")
    p.add_argument("--time-budget", type=float, default=20.0, metavar="S", help="seconds of timed repeats at most")
    p.add_argument("--target-spread", type=float, default=0.01, metavar="F", help="stop when IQR/median <= F")
    p.add_argument("--warmup", type=float, default=3.0, metavar="S", help="seconds of warm-up before timing")
    p.add_argument("--min-repeats", type=int, default=5)
    p.add_argument("--max-repeats", type=int, default=200)
    return p


def emit(result: dict[str, Any]) -> None:
    print(json.dumps({"format": FORMAT, **result}, allow_nan=False), flush=True)


def skip(benchmark: str, reason: str) -> int:
    print(f"{benchmark}: skipped: {reason}", file=sys.stderr)
    emit({"benchmark": benchmark, "status": "skipped", "reason": reason})
    return EXIT_SKIPPED


def fail(benchmark: str, reason: str) -> int:
    print(f"{benchmark}: failed: {reason}", file=sys.stderr)
    emit({"benchmark": benchmark, "status": "failed", "reason": reason})
    return EXIT_FAILED


def load_framework(choice: str, allowed: Sequence[str] = GPU_FRAMEWORKS) -> tuple[str, Any] | None:
    """(name, module) of the first usable framework, or None when none is installed.

    A framework that imports but finds no GPU raises RuntimeError with its reason.
    """
    names = [n for n in allowed if n != "numpy"] if choice == "auto" else [choice]
    errors = []
    for name in names:
        if name not in allowed:
            raise RuntimeError(f"this benchmark cannot run on {name} (it needs one of {', '.join(allowed)})")
        if importlib.util.find_spec(name) is None:
            continue  # not installed
        try:
            module = importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - installed but broken (missing CUDA libraries): say so, not "not installed"
            errors.append(f"{name}: {type(exc).__name__}: {exc}")
            continue
        problem = _no_device(name, module)
        if problem is None:
            return name, module
        errors.append(f"{name}: {problem}")
    if errors:
        raise RuntimeError("; ".join(errors))
    return None


def _no_device(name: str, module: Any) -> str | None:
    try:
        if name == "cupy":
            return None if module.cuda.runtime.getDeviceCount() > 0 else "no CUDA device visible"
        if name == "torch":
            return None if module.cuda.is_available() else "torch.cuda.is_available() is False"
    except Exception as exc:  # noqa: BLE001 - any CUDA error means "no usable device", with its reason
        return f"{type(exc).__name__}: {exc}"
    return None


def device_name(name: str, module: Any) -> str:
    try:
        if name == "cupy":
            props = module.cuda.runtime.getDeviceProperties(0)
            raw = props["name"]
            return raw.decode() if isinstance(raw, bytes) else str(raw)
        if name == "torch":
            return str(module.cuda.get_device_name(0))
    except Exception:  # noqa: BLE001 - the name is informational
        return "unknown"
    return "cpu"


def framework_version(module: Any) -> str:
    return f"{module.__name__} {getattr(module, '__version__', '?')}"


def run_main(benchmark: str, unit: str, args: argparse.Namespace, allowed: Sequence[str],
             make_step: Callable[[str, Any], tuple[Callable[[], float], dict[str, Any]]]) -> int:
    """The whole life of a benchmark program: framework, step, measurement, one result line.

    `make_step(framework_name, module)` builds the timed step (returning one repeat's
    score in `unit`) and the parameters to report.
    """
    try:
        found = load_framework(args.framework, allowed)
    except RuntimeError as exc:
        return fail(benchmark, str(exc))
    if found is None:
        need = "torch" if tuple(allowed) == ("torch",) else "cupy/torch"
        reason = NO_FRAMEWORK if need == "cupy/torch" else "no torch: install torch on the GPU nodes"
        return skip(benchmark, reason)
    name, module = found
    try:
        step, params = make_step(name, module)
        m = measure(step, warmup_s=args.warmup, time_budget_s=args.time_budget, target_spread=args.target_spread,
                    min_repeats=args.min_repeats, max_repeats=args.max_repeats)
    except Exception as exc:  # noqa: BLE001 - CUDA errors, out of memory: a clean failure with its reason
        return fail(benchmark, f"{type(exc).__name__}: {exc}")
    emit({"benchmark": benchmark, "status": "ok", "score": m.score, "unit": unit, "lower_is_better": False,
          "repeats": m.repeats, "spread": m.spread, "warmup_s": round(m.warmup_s, 3), "stopped": m.stopped,
          "framework": framework_version(module), "device": device_name(name, module), "params": params})
    return EXIT_OK
