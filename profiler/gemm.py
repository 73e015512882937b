#!/usr/bin/env python3
"""Dense matrix multiply (GEMM) throughput in TFLOP/s: the compute-bound benchmark.

GEMM runs at whatever SM clock the power cap and temperature allow, so its score tracks
the GPU's clock: it is the benchmark that shows silicon and cooling variability most.
fp16 runs on the tensor cores (fp32 accumulation); fp32 is plain FMA (TF32 disabled).
One repeat = k back-to-back n x n multiplies timed with CUDA events, k chosen so that
a repeat lasts ~0.25 s; score = 2 n^3 k / time. See _common.py for the output contract.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common

REPEAT_S = 0.25


def _iterations(once_s: float) -> int:
    return max(1, min(1000, round(REPEAT_S / max(once_s, 1e-6))))


def make_step(name: str, mod: Any, dtype: str, n: int):
    flops = 2.0 * n ** 3
    if name == "cupy":
        cp = mod
        dt = cp.float16 if dtype == "fp16" else cp.float32
        a = cp.random.random((n, n), dtype=cp.float32).astype(dt)
        b = cp.random.random((n, n), dtype=cp.float32).astype(dt)
        c = cp.empty((n, n), dtype=dt)
        start, end = cp.cuda.Event(), cp.cuda.Event()

        def timed(k: int) -> float:
            start.record()
            for _ in range(k):
                cp.matmul(a, b, out=c)
            end.record()
            end.synchronize()
            return cp.cuda.get_elapsed_time(start, end) / 1000.0
    elif name == "torch":
        torch = mod
        torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32
        dt = torch.float16 if dtype == "fp16" else torch.float32
        a = torch.randn(n, n, device="cuda", dtype=dt)
        b = torch.randn(n, n, device="cuda", dtype=dt)
        c = torch.empty(n, n, device="cuda", dtype=dt)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

        def timed(k: int) -> float:
            start.record()
            for _ in range(k):
                torch.matmul(a, b, out=c)
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1000.0
    else:  # numpy on the CPU: a self-test of this program, not a GPU score
        np = mod
        dt = np.float16 if dtype == "fp16" else np.float32
        rng = np.random.default_rng(0)
        a = rng.random((n, n), dtype=np.float32).astype(dt)
        b = rng.random((n, n), dtype=np.float32).astype(dt)
        c = np.empty((n, n), dtype=dt)

        def timed(k: int) -> float:
            t0 = time.perf_counter()
            for _ in range(k):
                np.matmul(a, b, out=c)
            return time.perf_counter() - t0

    timed(1)  # first call: kernel selection, lazy allocation
    k = _iterations(timed(1))

    def step() -> float:
        return flops * k / timed(k) / 1e12

    return step, {"dtype": dtype, "n": n, "multiplies_per_repeat": k}


def main(argv: list[str] | None = None) -> int:
    p = _common.parser("GEMM throughput (TFLOP/s) on device 0.")
    p.add_argument("--dtype", choices=("fp16", "fp32"), default="fp16")
    p.add_argument("--size", type=int, default=None, metavar="N", help="matrix size [8192; numpy: 256]")
    args = p.parse_args(argv)
    n = args.size or (256 if args.framework == "numpy" else 8192)
    return _common.run_main(f"gemm-{args.dtype}", "TFLOP/s", args, ("cupy", "torch", "numpy"),
                            lambda name, mod: make_step(name, mod, args.dtype, n))


if __name__ == "__main__":
    sys.exit(main())
