"""The training-step benchmark's batch grows with the GPU's memory, so a large GPU is measured
busy rather than waiting on the host's kernel launches (docs/profiler.md, "Measured on a real
H200"), and every GPU of one model gets the same batch."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
GIB = 2**30


def _train_step():  # type: ignore[no-untyped-def]
    sys.path.insert(0, str(REPO / "profiler"))
    try:
        spec = importlib.util.spec_from_file_location("pal_train_step", REPO / "profiler" / "train_step.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    finally:
        sys.path.remove(str(REPO / "profiler"))


@pytest.mark.parametrize(("memory_bytes", "multiple"), [
    (16 * GIB, 1),                # V100 16 GB: the base batch, as every earlier measurement used
    (15.8 * GIB, 1),              # a card reporting a little under its size keeps at least the base
    (40 * GIB, 2),                # A100 40 GB
    (79.6 * GIB, 4),              # A100/H100 80 GB (NVML reports 81,559 MiB: 79.6 GiB)
    (143771 * 2**20, 8),          # H200 141 GB (measured: 143,771 MiB)
    (180 * GIB, 8),               # B200: capped
    (4 * GIB, 1),
])
def test_the_batch_is_the_base_per_16_gib_of_memory_at_most_8_times(memory_bytes: float, multiple: int) -> None:
    ts = _train_step()
    for _name, _unit, base in ts.MODELS.values():
        assert ts.default_batch(base, int(memory_bytes)) == base * multiple


def test_a_batch_below_one_is_a_failure_with_its_reason() -> None:
    res = subprocess.run([sys.executable, str(REPO / "profiler" / "train_step.py"), "--batch", "0"],
                         capture_output=True, text=True, timeout=60)
    line = json.loads(res.stdout.strip().splitlines()[-1])
    assert res.returncode == 4 and line["status"] == "failed" and "--batch must be at least 1" in line["reason"]
