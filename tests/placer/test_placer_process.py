"""PlacerProcess.stop() against a real child process (pal_slurm.placer.process).

The child is a small Python program standing in for `pal placer`, because what is tested
is stop()'s own handling of a process that ignores SIGTERM, which a healthy placer never does.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from pal_slurm.placer.process import PlacerProcess

IGNORES_SIGTERM = ("import signal, sys, time\n"
                   "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                   "print('ready', flush=True)\n"
                   "time.sleep(120)\n")


def stand_in(tmp_path: Path, program: str) -> PlacerProcess:
    placer = PlacerProcess.__new__(PlacerProcess)  # the real __init__ starts `pal placer`
    placer.log = tmp_path / "placer.log"
    placer._fh = open(placer.log, "ab")  # noqa: SIM115 - stop() closes it
    placer.proc = subprocess.Popen([sys.executable, "-c", program], stdout=subprocess.PIPE, text=True,
                                   stdin=subprocess.DEVNULL)
    assert placer.proc.stdout is not None and placer.proc.stdout.readline() == "ready\n"
    return placer


def test_a_placer_that_outlives_its_stop_timeout_is_killed_and_reported_not_clean(tmp_path: Path):
    placer = stand_in(tmp_path, IGNORES_SIGTERM)
    try:
        rc = placer.stop(timeout=0.5)
        assert rc == -signal.SIGKILL  # callers run the release-stale fail-safe on any status but 0/-SIGTERM
        assert placer.proc.poll() == -signal.SIGKILL and placer._fh.closed
    finally:
        if placer.proc.poll() is None:
            placer.proc.kill()
            placer.proc.wait()
        placer.proc.stdout.close()


def test_a_placer_that_ends_on_sigterm_reports_it(tmp_path: Path):
    placer = stand_in(tmp_path, "import time\nprint('ready', flush=True)\ntime.sleep(120)\n")
    try:
        assert placer.stop(timeout=10) == -signal.SIGTERM
        assert placer._fh.closed
    finally:
        if placer.proc.poll() is None:
            placer.proc.kill()
            placer.proc.wait()
        placer.proc.stdout.close()
