"""The placer's wake-up file (pal_slurm.placer.wake): created safely, poked without ever
blocking, seen within a poll step, kept small. The submit filter's side is in
tests/lua/test_job_submit.lua, the whole path on a real cluster in tests/slurm/test_placer_wake.py."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from pal_slurm.config import PlacerConfig
from pal_slurm.placer import service, wake
from pal_slurm.placer.cycle_report import CycleReport
from pal_slurm.slurm import filter_state


def test_ensure_creates_a_regular_file_and_keeps_an_existing_ones_mode(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "placer-wake"
    assert wake.ensure(path)
    assert path.is_file() and path.stat().st_size == 0
    path.chmod(0o660)
    path.write_bytes(b"111")
    assert wake.ensure(path)
    assert path.stat().st_mode & 0o777 == 0o660 and path.read_bytes() == b"111"


def test_ensure_refuses_a_fifo_and_a_symlink(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert not wake.ensure(fifo)
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "elsewhere")
    assert not wake.ensure(link)


def test_poke_never_blocks_on_a_fifo_without_a_reader_nor_fails_on_a_missing_file(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    t0 = time.monotonic()
    assert wake.poke(fifo) is False
    assert wake.poke(tmp_path / "missing") is False
    assert time.monotonic() - t0 < 1.0


def test_a_poke_is_seen_within_a_poll_step_and_a_timeout_is_not_a_poke(tmp_path: Path) -> None:
    path = tmp_path / "placer-wake"
    assert wake.ensure(path)
    watch = wake.WakeWatch(str(path), poll_s=0.01)
    stop = threading.Event()
    t0 = time.monotonic()
    assert watch.wait(0.1, stop) is False
    assert 0.09 <= time.monotonic() - t0 < 1.0
    threading.Timer(0.05, wake.poke, args=(path,)).start()
    t0 = time.monotonic()
    assert watch.wait(5.0, stop) is True
    assert time.monotonic() - t0 < 1.0
    # two pokes in one tick of the file system's clock: the size still moves
    wake.poke(path)
    assert watch.poked()
    wake.poke(path)
    assert watch.poked()
    assert not watch.poked()


def test_stop_ends_the_wait_at_once(tmp_path: Path) -> None:
    path = tmp_path / "placer-wake"
    wake.ensure(path)
    watch = wake.WakeWatch(str(path))
    stop = threading.Event()
    threading.Timer(0.05, stop.set).start()
    t0 = time.monotonic()
    assert watch.wait(30.0, stop) is False
    assert time.monotonic() - t0 < 1.0


def test_a_large_file_is_emptied_and_pokes_after_it_are_seen(tmp_path: Path) -> None:
    path = tmp_path / "placer-wake"
    path.write_bytes(b"1" * wake.TRUNCATE_AT)
    watch = wake.WakeWatch(str(path))
    assert path.stat().st_size == 0
    wake.poke(path)
    assert watch.poked()
    path.write_bytes(b"1" * (wake.TRUNCATE_AT + 1))
    assert watch.poked() and path.stat().st_size == 0
    wake.poke(path)
    assert watch.poked()


def test_the_filter_state_names_the_wake_file_only_when_there_is_one() -> None:
    base = dict(mode="enforce", heartbeat=1, stale_after=30)
    assert "wake" not in filter_state.render(filter_state.FilterState(**base))  # type: ignore[arg-type]
    text = filter_state.render(filter_state.FilterState(**base, wake='/var/lib/pal/placer-"wake'))  # type: ignore[arg-type]
    assert 'wake = "/var/lib/pal/placer-\\034wake",' in text
    assert wake.default_path("/var/lib/pal/filter-state.lua") == "/var/lib/pal/placer-wake"


EPILOG_CTLD = Path(__file__).resolve().parent.parent / "spank_hooks" / "pal-epilog-slurmctld.sh"


def _epilog(wake_file: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["/bin/sh", str(EPILOG_CTLD)], env={"PAL_WAKE_FILE": str(wake_file), "SLURM_JOB_ID": "7"},
                          capture_output=True, text=True, timeout=10, check=False)


def test_the_slurmctld_epilog_pokes_a_regular_file_and_exits_0_whatever_is_there(tmp_path: Path) -> None:
    path = tmp_path / "placer-wake"
    path.write_bytes(b"")
    for n in (1, 2):
        out = _epilog(path)
        assert (out.returncode, out.stdout, out.stderr) == (0, "", "")
        assert path.stat().st_size == n
    assert _epilog(tmp_path / "missing").returncode == 0
    assert not (tmp_path / "missing").exists()
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert _epilog(fifo).returncode == 0   # a FIFO without a reader: not opened, so no hang
    (tmp_path / "link").symlink_to(path)
    assert _epilog(tmp_path / "link").returncode == 0
    assert path.stat().st_size == 2


# -- the rate limit of woken cycles ------------------------------------------------------------
@pytest.mark.parametrize(("started", "ended", "gap", "want"), [
    (100.0, 100.1, 0.5, 100.5),   # a short cycle: the gap after its start
    (100.0, 101.0, 0.5, 102.0),   # a long one (a big queue): idle as long as it took
    (100.0, 100.2, 0.0, 100.4),   # no gap asked for: still idle as long as the cycle took
    (100.0, 100.0, 2.0, 102.0),
])
def test_woken_start_is_the_gap_after_the_start_or_an_idle_time_as_long_as_the_cycle(
        started: float, ended: float, gap: float, want: float) -> None:
    assert wake.woken_start(started, ended, gap) == pytest.approx(want)


def test_a_poke_before_the_gap_wakes_the_placer_at_its_end_and_is_not_lost(tmp_path: Path) -> None:
    path = tmp_path / "placer-wake"
    wake.ensure(path)
    watch = wake.WakeWatch(str(path), poll_s=0.01)
    stop = threading.Event()
    wake.poke(path)
    t0 = time.monotonic()
    assert watch.wait(5.0, stop, not_before=t0 + 0.3) is True
    assert 0.3 <= time.monotonic() - t0 < 1.0
    # the interval ending before the gap does: a timed cycle, as without a poke
    wake.poke(path)
    t0 = time.monotonic()
    assert watch.wait(0.1, stop, not_before=t0 + 5.0) is False
    assert time.monotonic() - t0 < 1.0


class _LoopPlacer:
    """What run_forever asks of a Placer: a cycle taking `cycle_s`, the config, the heartbeat."""

    def __init__(self, cfg: PlacerConfig, cycle_s: float) -> None:
        self.cfg, self.cycle_s = cfg, cycle_s
        self.starts: list[float] = []
        self.wake_file = ""

    #: no database thread: nothing to wait for at start
    runner = None

    def publish(self, **_kw: object) -> None:
        pass

    def prime(self, _wait_s: float) -> bool:
        return True

    def cycle(self) -> CycleReport:
        self.starts.append(time.monotonic())
        time.sleep(self.cycle_s)
        return CycleReport()

    def release_all(self, _why: str, *, grace_s: int = 0) -> list[str]:
        return []


@pytest.mark.parametrize(("cycle_s", "gap_s"), [(0.05, 0.4), (0.3, 0.1)])
def test_a_burst_of_pokes_does_not_run_cycles_back_to_back(tmp_path: Path, cycle_s: float, gap_s: float) -> None:
    """A submission burst pokes the file every 5 ms for 2.5 s; the loop runs a woken cycle
    no sooner than the gap after the last start and after an idle time as long as a cycle."""
    cfg = PlacerConfig(interval_s=60, state_file=str(tmp_path / "filter-state.lua"), wake_poll_s=0.005,
                       wake_min_gap_s=gap_s)
    p = _LoopPlacer(cfg, cycle_s)
    path = Path(wake.default_path(cfg.state_file))
    done = threading.Event()

    def burst() -> None:
        end = time.monotonic() + 2.5
        while time.monotonic() < end:
            wake.poke(path)
            time.sleep(0.005)
        done.set()
        os.kill(os.getpid(), signal.SIGTERM)

    old = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    # the burst ends with a SIGTERM to this process: it must find run_forever's handler, never
    # the default one (which would end the whole test run), so a loop that failed early waits for it
    signal.signal(signal.SIGTERM, lambda *_a: None)
    timer = threading.Timer(0.2, burst)
    timer.start()
    try:
        service.run_forever(p, cfg.interval_s)  # type: ignore[arg-type]
    finally:
        timer.join(5)
        signal.signal(signal.SIGTERM, old[0])
        signal.signal(signal.SIGINT, old[1])
    assert done.is_set()
    want = max(gap_s, 2 * cycle_s)
    gaps = [b - a for a, b in zip(p.starts, p.starts[1:])]
    assert len(p.starts) >= 3, p.starts  # woken, not waiting for the 60 s interval
    assert min(gaps) >= want - 0.02, gaps
    assert len(p.starts) <= 2.7 / want + 2, gaps
