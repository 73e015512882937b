#!/usr/bin/env python3
"""STREAM triad a = b + s * c in GB/s: the memory-bandwidth benchmark.

Bandwidth barely depends on the SM clock, so this benchmark varies little between GPUs
of one model; a GPU slow here has a memory problem, not a clock problem. Bytes counted
per triad: 3 arrays x n x 4 (read b and c, write a), as STREAM counts them. The arrays
(float32, 2^28 elements = 1 GiB each by default) are far larger than any L2 cache.
One repeat = k triads timed with CUDA events, ~0.25 s. See _common.py for the contract.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common

REPEAT_S = 0.25
SCALAR = 3.0


def make_step(name: str, mod: Any, n: int):
    nbytes = 3.0 * 4 * n
    triad = {"cupy": _cupy_triad, "torch": _torch_triad}.get(name, _numpy_triad)
    timed, a = triad(mod, n)
    once = timed(1)
    if not _correct(a, n):
        raise RuntimeError("triad produced a wrong value")
    k = max(1, min(10000, round(REPEAT_S / max(once, 1e-6))))

    def step() -> float:
        return nbytes * k / timed(k) / 1e9

    return step, {"elements": n, "bytes_per_triad": int(nbytes), "triads_per_repeat": k}


def _correct(a: Any, n: int) -> bool:
    """Whether the triad wrote b + s * c (1 + 3 x 2) into the output array."""
    return bool(abs(float(a[n // 2]) - (1.0 + SCALAR * 2.0)) < 1e-6)


def _cupy_triad(cp: Any, n: int):
    """(k triads timed with CUDA events, in seconds; the output array) on CuPy, as one elementwise kernel."""
    triad = cp.ElementwiseKernel("float32 b, float32 c, float32 s", "float32 a", "a = b + s * c", "pal_triad")
    a = cp.zeros(n, dtype=cp.float32)
    b = cp.full(n, 1.0, dtype=cp.float32)
    c = cp.full(n, 2.0, dtype=cp.float32)
    s = cp.float32(SCALAR)
    start, end = cp.cuda.Event(), cp.cuda.Event()

    def timed(k: int) -> float:
        start.record()
        for _ in range(k):
            triad(b, c, s, a)
        end.record()
        end.synchronize()
        return cp.cuda.get_elapsed_time(start, end) / 1000.0

    return timed, a


def _torch_triad(torch: Any, n: int):
    """The same on PyTorch: one fused add with alpha per triad."""
    a = torch.zeros(n, device="cuda", dtype=torch.float32)
    b = torch.full((n,), 1.0, device="cuda", dtype=torch.float32)
    c = torch.full((n,), 2.0, device="cuda", dtype=torch.float32)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def timed(k: int) -> float:
        start.record()
        for _ in range(k):
            torch.add(b, c, alpha=SCALAR, out=a)  # one fused kernel: a true triad
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1000.0

    return timed, a


def _numpy_triad(np: Any, n: int):
    """numpy on the CPU: a self-test of this program, not a GPU score."""
    a = np.zeros(n, dtype=np.float32)
    b = np.full(n, 1.0, dtype=np.float32)
    c = np.full(n, 2.0, dtype=np.float32)
    tmp = np.empty(n, dtype=np.float32)

    def timed(k: int) -> float:
        t0 = time.perf_counter()
        for _ in range(k):
            np.multiply(c, np.float32(SCALAR), out=tmp)
            np.add(b, tmp, out=a)
        return time.perf_counter() - t0

    return timed, a


def main(argv: list[str] | None = None) -> int:
    p = _common.parser("STREAM triad bandwidth (GB/s) on device 0.")
    p.add_argument("--elements", type=int, default=None, metavar="N", help="array length [2^28; numpy: 2^20]")
    args = p.parse_args(argv)
    n = args.elements or (2 ** 20 if args.framework == "numpy" else 2 ** 28)
    return _common.run_main("stream", "GB/s", args, ("cupy", "torch", "numpy"), lambda name, mod: make_step(name, mod, n))


if __name__ == "__main__":
    sys.exit(main())
