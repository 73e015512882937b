"""One placer at a time (placer/lock.py, db/advisory_lock.py): the file lock a second process
cannot take and a killed one cannot leave behind, the database's advisory lock on PostgreSQL
and MariaDB, and the fail-safe that releases nothing beside a live placer."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pal_slurm.db.advisory_lock import AdvisoryLock
from pal_slurm.db.engine import make_engine
from pal_slurm.placer.lock import FileLock, OnePlacer, default_lock_path
from pal_slurm.placer.service import release_stale
from tests.support.recording_slurm import held, node, placer

HOLD = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
os.write(fd, b"pid %d on elsewhere" % os.getpid())
print("locked", flush=True)
time.sleep(60)
"""


def test_a_second_file_lock_is_refused_and_names_the_holder(tmp_path: Path) -> None:
    path = str(tmp_path / "placer.lock")
    first, second = FileLock(path), FileLock(path)
    assert first.acquire() and first.held
    assert not second.acquire() and not second.held
    assert second.holder() == f"pid {os.getpid()} on {os.uname().nodename}"
    first.release()
    assert second.acquire()
    second.release()


def test_a_holder_that_has_not_written_its_name_yet_is_waited_for_briefly(tmp_path: Path) -> None:
    """Two placers started together: the second can read the lock file between the first's
    flock and its write. holder() reads an empty file again, so the standby still names the
    holder; a file that stays empty gives "" once the wait is over."""
    import threading

    path = tmp_path / "placer.lock"
    path.write_text("")
    writer = threading.Timer(0.1, lambda: path.write_text("pid 4242 on ctl1\n"))
    writer.start()
    try:
        assert FileLock(str(path)).holder() == "pid 4242 on ctl1"
    finally:
        writer.join()
    path.write_text("")
    started = time.monotonic()
    assert FileLock(str(path)).holder(wait_s=0.1) == ""
    assert time.monotonic() - started >= 0.1


def test_a_killed_holder_leaves_no_lock_behind(tmp_path: Path) -> None:
    path = str(tmp_path / "placer.lock")
    proc = subprocess.Popen([sys.executable, "-c", HOLD, path], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
        lock = FileLock(path)
        assert not lock.acquire()
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        assert lock.acquire(), "the kernel dropped the lock with the process"
        lock.release()
    finally:
        proc.kill()


def test_a_link_in_place_of_the_lock_file_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("")
    link = tmp_path / "placer.lock"
    link.symlink_to(target)
    with pytest.raises(OSError):
        FileLock(str(link)).acquire()


def test_the_default_lock_sits_beside_the_state_file() -> None:
    assert default_lock_path("/var/lib/pal/placer/filter-state") == "/var/lib/pal/placer/placer.lock"


def test_the_advisory_lock_is_one_sessions_at_a_time(db_url: str) -> None:
    first_engine, second_engine = make_engine(db_url), make_engine(db_url)
    first, second = AdvisoryLock(first_engine), AdvisoryLock(second_engine)
    if not first.applies:  # SQLite: a file on one host; the file lock covers it
        assert first.acquire() and second.acquire()
        return
    try:
        assert first.acquire() and first.held
        assert not second.acquire() and not second.held
        assert second.holder().startswith("database session ")
        assert first.acquire() and first.alive(), "asking again on a live connection keeps it"
        first.release()
        assert second.acquire()
        second.release()
        assert first.acquire()
        first_engine.dispose()  # the holder's connection ends (a crash, a lost link) ...
        first._conn.invalidate()  # noqa: SLF001 - ... the server drops the lock with it
        # once its backend has read the closed socket: under load that takes a moment, and the
        # placer asks again every cycle, so the test asks again too, for a bounded while
        deadline = time.monotonic() + 10
        while not second.acquire() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert second.held, "the server never dropped a lost connection's lock"
        assert not first.alive() and not first.held, "a lost connection is a lost lock"
    finally:
        second.release()
        first.release()
        first_engine.dispose()
        second_engine.dispose()


def test_one_placer_stands_by_on_a_held_lock_and_says_who_holds_it(tmp_path: Path) -> None:
    path = str(tmp_path / "placer.lock")
    other = FileLock(path)
    assert other.acquire()
    one = OnePlacer(FileLock(path))
    assert not one.take() and not one.placing
    assert path in one.why and str(os.getpid()) in one.why
    other.release()
    assert one.take() and one.placing and one.why == ""
    one.release()


class Refusing:
    """A database lock another session holds."""

    name = "pal-slurm-placer"

    def acquire(self) -> bool:
        return False

    def holder(self) -> str:
        return "database session 77"

    def release(self) -> None:
        pass


class Unreachable(Refusing):
    def acquire(self) -> bool:
        raise OSError("connection timed out")


def test_the_fail_safe_releases_nothing_beside_a_live_placer(tmp_path: Path) -> None:
    p, backend = placer(tmp_path, [held("1")], [node("n1")])
    lock_path = str(tmp_path / "placer.lock")
    live = FileLock(lock_path)
    assert live.acquire()
    out = release_stale(p, one=OnePlacer(FileLock(lock_path)))  # no heartbeat at all: stale
    assert out["stale"] and out["released"] == [] and lock_path in out["locked_by"]
    assert backend.calls == [], "nothing written beside the live placer"

    out = release_stale(p, one=OnePlacer(FileLock(str(tmp_path / "other.lock")), Refusing()))
    assert out["released"] == [] and "database session 77" in out["locked_by"], \
        "a placer on another host holds the database lock"
    assert backend.calls == []

    live.release()
    out = release_stale(p, one=OnePlacer(FileLock(lock_path), Unreachable()))
    assert out["released"] == ["1"], "a database that does not answer leaves the file lock in charge"
    assert FileLock(lock_path).acquire(), "the fail-safe let go of the lock when done"


def test_the_database_saying_another_holds_the_lock_stands_a_placer_down(tmp_path: Path) -> None:
    ran: list[str] = []

    def inline(key: str, task: object) -> bool:
        ran.append(key)
        try:
            task()  # type: ignore[operator]
        except Exception:  # noqa: BLE001 - the runner's business
            pass
        return True

    class Flip(Refusing):
        answers = [True, True, False]

        def acquire(self) -> bool:
            return self.answers.pop(0)

    clock = [0.0]
    one = OnePlacer(FileLock(str(tmp_path / "placer.lock")), Flip(), runner=inline, check_s=30, clock=lambda: clock[0])
    assert one.take(wait_db_s=0.1) and one.placing
    one.check()
    assert one.placing and ran == ["placer-lock"], "checked again only after check_s"
    clock[0] = 31
    one.check()
    assert one.placing
    clock[0] = 62
    one.check()
    assert not one.placing and "database session 77" in one.why
    one.release()


def test_a_lock_file_that_cannot_be_opened_does_not_stop_the_placer(tmp_path: Path,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    """Fail open: a lock_file in a missing directory is said in the log, and placing goes on."""
    one = OnePlacer(FileLock(str(tmp_path / "missing" / "placer.lock")))
    assert one.take() and one.placing
    assert "cannot be opened" in caplog.text
    one.release()
