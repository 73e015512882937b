"""A classified database for the test cluster's 16 fake GPUs, and a placer wired to it."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pal_slurm.ingest.jsonl import dump_jsonl
from pal_slurm.ingest.records import GpuInfo, ProfileRecord

NODES = ("pal-n1", "pal-n2", "pal-n3", "pal-n4")

#: class A (resnet50) PerfVar per (node, minor): four well-separated groups, so the
#: classification finds several bins; n3 minor 2 is in the fastest, n1 minor 0 in the slowest
_GROUPS = (0.88, 0.97, 1.04, 1.13)
A_PERFVAR = {(n, m): _GROUPS[(i + m) % 4] + 0.002 * m for i, n in enumerate(NODES) for m in range(4)}
A_PERFVAR[("pal-n3", 2)] = 0.87
A_PERFVAR[("pal-n1", 0)] = 1.14


def records(seed_runs: int = 4) -> list[ProfileRecord]:
    t0 = datetime(2026, 11, 1, tzinfo=UTC)
    out: list[ProfileRecord] = []
    line = 0
    for (node, minor), pv in sorted(A_PERFVAR.items()):
        gpu = GpuInfo(uuid=f"GPU-test-{node}-{minor}", node=node, model="Tesla V100-SXM2-16GB",
                      nvml_index=minor, minor_number=minor)
        for bench, base, var in (("resnet50", 100.0, pv), ("bert", 50.0, 1.0 + (pv - 1.0) / 3),
                                 ("pagerank", 20.0, 1.0)):
            for r in range(seed_runs):
                line += 1
                jitter = 1.0 + 0.0005 * ((r * 3 + minor) % 3 - 1)
                out.append(ProfileRecord(run_key=f"t-{node}-{minor}-{bench}-{r}", gpu=gpu, benchmark=bench,
                                         started_at=t0 + timedelta(minutes=line), score=base * var * jitter,
                                         unit="ms", lower_is_better=True, source="pal-profiler",
                                         source_file="test", line=line))
    return out


def make_db(tmp: Path) -> str:
    """A SQLite database with the 16 GPUs profiled and classified; returns its URL."""
    url = f"sqlite:///{tmp / 'pal.db'}"
    jsonl = tmp / "profiles.jsonl"
    jsonl.write_text(dump_jsonl(records()), encoding="utf-8")
    for argv in (["db", "upgrade"], ["profile", "import", str(jsonl)], ["classify"]):
        subprocess.run([sys.executable, "-m", "pal_slurm", "--db", url, *argv], check=True, capture_output=True,
                       text=True, timeout=120)
    return url
