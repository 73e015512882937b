"""`pal placer` as a child process: its configuration file, the process, and the wait for its
first heartbeat. For the code that runs a real placer beside a real cluster: `pal demo
--slurm`, the replay's pal arm (bench/pal_eval/replay/experiment.py), the latency bench and
the real-cluster tests.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Self

from pal_slurm.errors import PalError
from pal_slurm.placement.model import DEFAULT_POLICY

__all__ = ["PlacerProcess", "wait_heartbeat", "write_config"]

log = logging.getLogger(__name__)


def write_config(tmp: Path, db_url: str, state_file: Path, *, mode: str = "enforce", interval: float = 0.5,
                 stale_after: int = 30, replan_after: float = 120.0, max_hold: float = 600.0,
                 policy: str = DEFAULT_POLICY, hold_s: int | None = None, jobs: Mapping[str, object] | None = None,
                 **placer: object) -> Path:
    """A pal.toml for a placer on the test cluster (`<tmp>/pal.toml`); `placer` adds [placer] keys,
    `jobs` a [jobs] section. Metrics are off unless `metrics_port` is given: several test placers
    share one machine."""
    placer.setdefault("metrics_port", 0)
    path = tmp / "pal.toml"
    path.write_text("\n".join([
        "[database]", f"url = {json.dumps(db_url)}", "connect_timeout_s = 2",
        "[placer]", f"mode = {json.dumps(mode)}", f"state_file = {json.dumps(str(state_file))}",
        f"interval_s = {interval}", f"stale_after_s = {stale_after}", f"replan_after_s = {replan_after}",
        f"max_hold_s = {max_hold}", f"policy = {json.dumps(policy)}", "classes_refresh_s = 5",
        "command_timeout_s = 10", *([f"hold_s = {int(hold_s)}"] if hold_s is not None else []),
        *(f"{k} = {json.dumps(v)}" for k, v in placer.items()),
        *(["[jobs]", *(f"{k} = {json.dumps(v)}" for k, v in jobs.items())] if jobs else []), ""]),
        encoding="utf-8")
    return path


class PlacerProcess:
    """`pal placer` running in the background, as systemd would run it (output to `log`)."""

    def __init__(self, config: Path, env: Mapping[str, str], log: Path) -> None:
        self.log = log
        self._fh: IO[bytes] = open(log, "ab")  # noqa: SIM115 - lives as long as the process
        self.proc = subprocess.Popen([sys.executable, "-m", "pal_slurm", "-v", "--config", str(config), "placer"],
                                     env={**os.environ, **env, "PAL_CONFIG": str(config)}, stdout=self._fh,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def stop(self, sig: int | None = None, timeout: float = 30) -> int:
        """Signal the placer (SIGTERM: it releases what it holds) and wait for it; its exit status.

        A placer still running `timeout` s after the signal is killed (status -SIGKILL), never
        left behind: callers read any status but 0 or -SIGTERM as "it may hold jobs" and run
        the fail-safe (`pal placer release-stale`).
        """
        try:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM if sig is None else sig)
            try:
                return self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                log.warning("pal placer (pid %d) still running %g s after the signal: killing it (log %s)",
                            self.proc.pid, timeout, self.log)
                self.proc.kill()
                return self.proc.wait()
        finally:
            self._fh.close()

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.stop()


def wait_heartbeat(state_file: Path, placer: PlacerProcess, timeout: float = 30.0) -> None:
    """Until the placer has published a fresh enforce-mode heartbeat (the filter holds nothing before)."""
    from pal_slurm.slurm.filter_state import heartbeat_age, published_mode

    start = time.time()
    while time.time() - start < timeout:
        if placer.proc.poll() is not None:
            tail = " | ".join(placer.output().strip().splitlines()[-3:])
            raise PalError(f"pal placer exited with status {placer.proc.returncode}: {tail}")
        age = heartbeat_age(str(state_file))
        if age is not None and age < 3 and published_mode(state_file) == "enforce":
            return
        time.sleep(0.2)
    raise PalError(f"pal placer wrote no heartbeat to {state_file} within {timeout:g} s "
                   f"(log {placer.log})")
