"""The test cluster's 16 GPUs, profiled and classified: the fleet `pal demo --slurm` places on,
shared with the real-cluster tests (tests/slurm/placer_support.py) and the placer benchmarks,
so the demo, the tests and the benchmarks place on the same fleet.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from pal_slurm.ingest.jsonl import dump_jsonl
from pal_slurm.ingest.records import GpuInfo, ProfileRecord

__all__ = ["A_PERFVAR", "NODES", "make_db", "records"]

NODES = ("pal-n1", "pal-n2", "pal-n3", "pal-n4")

#: class A (resnet50) PerfVar per (node, minor): four well-separated groups, so the
#: classification finds several bins; n3 minor 2 is in the fastest, n1 minor 0 in the slowest
_GROUPS = (0.88, 0.97, 1.04, 1.13)
A_PERFVAR = {(n, m): _GROUPS[(i + m) % 4] + 0.002 * m for i, n in enumerate(NODES) for m in range(4)}
A_PERFVAR[("pal-n3", 2)] = 0.87
A_PERFVAR[("pal-n1", 0)] = 1.14


def records(seed_runs: int = 4) -> list[ProfileRecord]:
    """Benchmark runs of the test cluster's GPUs, under the shipped profiler's names (the default
    job classes read them): train-resnet50 (class A) spread by A_PERFVAR, train-bert (B, C) a
    third as much, stream (D) equal everywhere; throughputs, as the profiler reports them."""
    t0 = datetime(2026, 11, 1, tzinfo=UTC)
    out: list[ProfileRecord] = []
    line = 0
    for (node, minor), pv in sorted(A_PERFVAR.items()):
        gpu = GpuInfo(uuid=f"GPU-test-{node}-{minor}", node=node, model="Tesla V100-SXM2-16GB",
                      nvml_index=minor, minor_number=minor)
        for bench, base, unit, var in (("train-resnet50", 1250.0, "images/s", pv),
                                       ("train-bert", 180.0, "sequences/s", 1.0 + (pv - 1.0) / 3),
                                       ("stream", 810.0, "GB/s", 1.0)):
            for r in range(seed_runs):
                line += 1
                jitter = 1.0 + 0.0005 * ((r * 3 + minor) % 3 - 1)
                out.append(ProfileRecord(run_key=f"t-{node}-{minor}-{bench}-{r}", gpu=gpu, benchmark=bench,
                                         started_at=t0 + timedelta(minutes=line), score=base / (var * jitter),
                                         unit=unit, lower_is_better=False, source="pal-profiler",
                                         source_file="test", line=line))
    return out


def make_db(tmp: Path) -> str:
    """A SQLite database `<tmp>/pal.db` with the 16 GPUs profiled and classified; returns its URL.

    The same steps as `pal db upgrade`, `pal profile import` and `pal classify`, with the
    default classification settings (not the site's /etc/pal/pal.toml): the demo and the
    tests must get the same classes everywhere.
    """
    from pal_slurm.services.classification import run_classification
    from pal_slurm.config import DatabaseConfig, PalConfig
    from pal_slurm.db import migrate
    from pal_slurm.db.engine import open_engine
    from pal_slurm.services.ingest import import_files

    db_file = (tmp / "pal.db").resolve()
    url = f"sqlite:///{db_file}"
    jsonl = tmp / "profiles.jsonl"
    jsonl.write_text(dump_jsonl(records()), encoding="utf-8")
    cfg = PalConfig(database=DatabaseConfig(url=url), data_dir=tmp)
    engine = open_engine(cfg)
    try:
        migrate.upgrade(engine)
        import_files(engine, [jsonl], "jsonl")
        run_classification(engine, cfg, note="test cluster GPUs (pal_slurm.demo.on_slurm)")
    finally:
        engine.dispose()
    return url
