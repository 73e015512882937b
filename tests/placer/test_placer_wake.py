"""The placer's wake-up file (pal_slurm.placer.wake): created safely, poked without ever
blocking, seen within a poll step, kept small. The submit filter's side is in
tests/lua/test_job_submit.lua, the whole path on a real cluster in tests/slurm/test_placer_wake.py."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from types import SimpleNamespace

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


def test_the_filter_state_says_wake_1_and_never_names_a_path() -> None:
    base = dict(mode="enforce", heartbeat=1, stale_after=30)
    assert "wake" not in filter_state.render(filter_state.FilterState(**base))  # type: ignore[arg-type]
    text = filter_state.render(filter_state.FilterState(**base, wake=True))  # type: ignore[arg-type]
    assert [line for line in text.splitlines() if line.startswith("wake")] == ["wake 1"]
    assert wake.default_path("/var/lib/pal/placer/filter-state") == "/var/lib/pal/placer/placer-wake"
    assert wake.default_path("filter-state") == "placer-wake"


def test_a_large_file_is_emptied_only_if_it_is_a_regular_file_never_through_a_link(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"1" * wake.TRUNCATE_AT)
    link = tmp_path / "placer-wake"
    link.symlink_to(victim)
    watch = wake.WakeWatch(str(link))
    assert victim.stat().st_size == wake.TRUNCATE_AT, "a link is never followed to empty its target"
    victim.write_bytes(b"1" * (wake.TRUNCATE_AT + 1))
    watch.poked()
    assert victim.stat().st_size == wake.TRUNCATE_AT + 1
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    t0 = time.monotonic()
    watch = wake.WakeWatch(str(fifo))
    watch._truncate_if_large((0, wake.TRUNCATE_AT, 0))   # as if it had grown: opened without blocking
    assert time.monotonic() - t0 < 1.0


# -- the state directory ------------------------------------------------------------------------
def test_the_state_directory_is_fit_when_only_the_placer_may_write_it(tmp_path: Path) -> None:
    mine = tmp_path / "placer"
    mine.mkdir(mode=0o755)
    mine.chmod(0o755)
    me = os.geteuid()
    assert wake.state_dir_problem(mine, euid=me) is None
    mine.chmod(0o750)
    assert wake.state_dir_problem(mine, euid=me) is None
    if me == 0:
        os.chown(mine, 0, 4242)     # root:slurm 0750: a root placer's directory SlurmUser reads through
        assert wake.state_dir_problem(mine, euid=0) is None


@pytest.mark.parametrize(("mode", "said"), [(0o775, "writable by its group (mode 0775"),
                                            (0o757, "writable by others (mode 0757"),
                                            (0o777, "writable by its group and others (mode 0777"),
                                            (0o1777, "writable by its group and others (mode 1777")])
def test_a_state_directory_others_may_write_is_refused_and_named(tmp_path: Path, mode: int, said: str) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(mode)
    problem = wake.state_dir_problem(shared, euid=os.geteuid())
    assert problem is not None and problem.startswith(f"state directory {shared} is ") and said in problem


def test_a_state_directory_of_another_user_a_link_or_no_directory_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o755)
    owner = real.stat().st_uid
    if owner != 0:
        assert f"owned by uid {owner}, not by the placer's user (uid {owner + 1}) or root" in (
            wake.state_dir_problem(real, euid=owner + 1) or "")
    else:
        os.chown(real, 4242, -1)
        assert "owned by uid 4242, not by the placer's user (uid 0) or root" in (
            wake.state_dir_problem(real, euid=0) or "")
        assert wake.state_dir_problem(real, euid=4242) is None, "the placer's own user"
        os.chown(real, 0, -1)
        assert wake.state_dir_problem(real, euid=4242) is None, "root's"
    link = tmp_path / "link"
    link.symlink_to(real)
    assert "is a symbolic link" in (wake.state_dir_problem(link) or "")
    (tmp_path / "file").write_text("")
    assert "is not a directory" in (wake.state_dir_problem(tmp_path / "file") or "")
    assert "cannot be examined" in (wake.state_dir_problem(tmp_path / "missing") or "")


def _wake_placer(cfg: PlacerConfig) -> SimpleNamespace:
    return SimpleNamespace(cfg=cfg, wake_ready=False)


def test_the_placer_pokes_only_placer_wake_beside_the_state_and_says_a_wake_file_is_ignored(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    state_dir = tmp_path / "placer"
    cfg = PlacerConfig(state_file=str(state_dir / "filter-state"), wake_file=str(tmp_path / "elsewhere"))
    p = _wake_placer(cfg)
    with caplog.at_level(logging.INFO, logger="pal_slurm.placer.service"):
        watch = service.wake_watch(p)  # type: ignore[arg-type]
    assert watch is not None and watch.path == str(state_dir / "placer-wake") and p.wake_ready
    assert (state_dir / "placer-wake").is_file() and not (tmp_path / "elsewhere").exists()
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and warned[0].startswith(f"placer.wake_file = {tmp_path / 'elsewhere'} is ignored: the "
                                                     f"wake-up file is always {state_dir / 'placer-wake'}")
    caplog.clear()
    same = _wake_placer(PlacerConfig(state_file=str(state_dir / "filter-state"),
                                     wake_file=str(state_dir / "placer-wake")))
    with caplog.at_level(logging.WARNING, logger="pal_slurm.placer.service"):
        assert service.wake_watch(same) is not None  # type: ignore[arg-type]
    assert not caplog.records, "the fixed path itself: nothing to warn about"


def test_a_state_directory_others_may_write_publishes_no_wake(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    state_dir = tmp_path / "placer"
    state_dir.mkdir()
    state_dir.chmod(0o775)
    p = _wake_placer(PlacerConfig(state_file=str(state_dir / "filter-state")))
    with caplog.at_level(logging.ERROR, logger="pal_slurm.placer.service"):
        assert service.wake_watch(p) is None  # type: ignore[arg-type]
    assert p.wake_ready is False and not (state_dir / "placer-wake").exists()
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(said) == 1 and said[0].startswith(f"state directory {state_dir} is writable by its group")
    assert "jobs wait for the next cycle" in said[0]
    state_dir.chmod(0o755)
    assert service.wake_watch(p) is not None and p.wake_ready  # type: ignore[arg-type]


def test_a_placer_that_does_not_wake_says_so_in_its_state(tmp_path: Path) -> None:
    from pal_slurm.placer.heartbeat import Heartbeat

    cfg = PlacerConfig(mode="enforce", state_file=str(tmp_path / "filter-state"))
    beat = Heartbeat(cfg, clock=lambda: 1000.0)
    beat.publish()
    assert "\nwake" not in (tmp_path / "filter-state").read_text()
    beat.wake_ready = True
    beat.publish()
    assert "\nwake 1\n" in (tmp_path / "filter-state").read_text()
    beat.publish(alive=False)
    assert "\nwake" not in (tmp_path / "filter-state").read_text(), "a stopping placer is not poked"


EPILOG_CTLD = Path(__file__).resolve().parents[2] / "spank_hooks" / "pal-epilog-slurmctld.sh"


def _epilog(state_dir: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["/bin/sh", str(EPILOG_CTLD)],
                          env={"PAL_FILTER_STATE": str(state_dir / "filter-state"), "SLURM_JOB_ID": "7", **env},
                          capture_output=True, text=True, timeout=10, check=False)


def test_the_slurmctld_epilog_pokes_placer_wake_beside_the_state_and_exits_0_whatever_is_there(tmp_path: Path) -> None:
    ok = tmp_path / "ok"
    ok.mkdir()
    path = ok / "placer-wake"
    path.write_bytes(b"")
    for n in (1, 2):
        out = _epilog(ok)
        assert (out.returncode, out.stdout, out.stderr) == (0, "", "")
        assert path.stat().st_size == n
    missing = tmp_path / "missing"
    missing.mkdir()
    assert _epilog(missing).returncode == 0
    assert not (missing / "placer-wake").exists()
    fifo = tmp_path / "fifo"
    fifo.mkdir()
    os.mkfifo(fifo / "placer-wake")
    assert _epilog(fifo).returncode == 0   # a FIFO without a reader: not opened, so no hang
    link = tmp_path / "link"
    link.mkdir()
    (link / "placer-wake").symlink_to(path)
    assert _epilog(link).returncode == 0
    assert path.stat().st_size == 2
    # the old PAL_WAKE_FILE names no file any more: only the fixed path is written
    victim = tmp_path / "victim"
    victim.write_bytes(b"")
    assert _epilog(ok, PAL_WAKE_FILE=str(victim)).returncode == 0
    assert victim.stat().st_size == 0 and path.stat().st_size == 3
    assert '"${PAL_FILTER_STATE:-/var/lib/pal/placer/filter-state}"' in EPILOG_CTLD.read_text(), \
        "without PAL_FILTER_STATE: the placer's default state file"


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
        self.wake_ready = False

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
    cfg = PlacerConfig(interval_s=60, state_file=str(tmp_path / "filter-state"), wake_poll_s=0.005,
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
