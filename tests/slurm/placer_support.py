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


def write_config(tmp: Path, db_url: str, state_file: Path, *, mode: str = "enforce", interval: float = 0.5,
                 stale_after: int = 30, replan_after: float = 120.0, max_hold: float = 600.0,
                 policy: str = "pal-match") -> Path:
    """A pal.toml for a placer on the test cluster."""
    path = tmp / "pal.toml"
    path.write_text("\n".join([
        "[database]", f'url = "{db_url}"', "connect_timeout_s = 2",
        "[placer]", f'mode = "{mode}"', f'state_file = "{state_file}"', f"interval_s = {interval}",
        f"stale_after_s = {stale_after}", f"replan_after_s = {replan_after}", f"max_hold_s = {max_hold}",
        f'policy = "{policy}"', "classes_refresh_s = 5", "command_timeout_s = 10", ""]), encoding="utf-8")
    return path


class PlacerProcess:
    """`pal placer` running in the background, as systemd would run it."""

    def __init__(self, config: Path, env: dict[str, str], log: Path) -> None:
        import os

        self.log = log
        self._fh = open(log, "ab")  # noqa: SIM115 - lives as long as the process
        self.proc = subprocess.Popen([sys.executable, "-m", "pal_slurm", "-v", "--config", str(config), "placer"],
                                     env={**os.environ, **env, "PAL_CONFIG": str(config)}, stdout=self._fh,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def stop(self, sig: int | None = None, timeout: float = 30) -> int:
        import signal

        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM if sig is None else sig)
        try:
            rc = self.proc.wait(timeout=timeout)
        finally:
            self._fh.close()
        return rc

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def __enter__(self) -> "PlacerProcess":
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.stop()
