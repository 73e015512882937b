"""The database off the cycle's path (placer/db_worker.py, placer/refresh.py with a runner): a
slow or black-holed database never makes a cycle wait, the heartbeat stays fresh, holds are
kept, and what waited in memory is written once the database answers again.

The black hole is a real TCP socket that listens and never answers, as a database host behind
a firewall that drops packets looks to the driver: every connection attempt costs the whole
`connect_timeout_s`. The Slurm side is the recording backend (the real-Slurm runs are in
tests/slurm/test_placer_one.py)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from pal_slurm.config import DatabaseConfig, PalConfig, PlacerConfig
from pal_slurm.db.engine import make_engine
from pal_slurm.placer.audit import placements_for
from pal_slurm.placer.db_worker import DbWorker
from pal_slurm.placer.refresh import Refreshed
from pal_slurm.placer.service import build_placer
from pal_slurm.slurm.filter_state import heartbeat_age
from tests.slurm.placer_support import NODES, make_db
from tests.support.recording_slurm import Recorder, held, node


@pytest.fixture
def black_hole() -> Iterator[int]:
    """A port that accepts TCP connections into its backlog and never says a word."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    try:
        yield sock.getsockname()[1]
    finally:
        sock.close()


def test_the_worker_runs_one_task_per_key_and_backs_off_after_a_failure() -> None:
    worker = DbWorker()
    worker.backoff.min_delay_s = 0.3
    ran: list[str] = []
    gate = threading.Event()

    def slow() -> None:
        gate.wait(5)
        ran.append("slow")

    def fail() -> None:
        ran.append("fail")
        raise OSError("database down")

    worker.start()
    assert worker.submit("audit", slow)
    time.sleep(0.05)
    assert not worker.submit("audit", slow), "a key queued or running is not queued twice"
    assert worker.busy("audit")
    assert worker.submit("classes", fail)
    gate.set()
    assert worker.drain(5)
    assert ran == ["slow", "fail"] and worker.last_error and "database down" in worker.last_error
    t0 = time.monotonic()
    worker.submit("classes", lambda: ran.append(f"after {time.monotonic() - t0:.2f}"))
    assert worker.drain(5)
    waited = float(ran[-1].split()[1])
    assert 0.2 <= waited <= 1.0, f"the next task waits out the backoff (0.3 s), waited {waited}"
    assert worker.last_error is None and worker.backoff.failures == 0
    worker.stop()


def test_a_refresh_on_a_runner_returns_at_once_and_lands_later() -> None:
    worker = DbWorker().start()
    release = threading.Event()

    def read(_now: float) -> int:
        release.wait(5)
        return 7

    cache: Refreshed[int] = Refreshed(read, 60.0, initial=0, runner=worker.submit, key="x")
    t0 = time.monotonic()
    assert cache.get() == 0 and not cache.settled
    assert cache.get() == 0, "asked again while the read is in flight: the old value, no second read"
    assert time.monotonic() - t0 < 0.5
    release.set()
    assert worker.drain(5)
    assert cache.get() == 7 and cache.settled
    worker.stop()


def _held_now(job_id: str, gpus: int = 1) -> object:
    now = time.time()
    return replace(held(job_id, gpus=gpus), begin_time=now + 80, submit_time=now - 5)


def test_cycles_stay_short_and_the_heartbeat_fresh_while_the_database_is_black_holed(
        tmp_path: Path, black_hole: int) -> None:
    url = make_db(tmp_path)
    good = make_engine(url, create=False)
    hole = make_engine(f"postgresql+psycopg://pal:secret@127.0.0.1:{black_hole}/pal", connect_timeout_s=10)
    current = {"engine": good}
    cfg = PalConfig(database=DatabaseConfig(url=url), data_dir=tmp_path,
                    placer=PlacerConfig(mode="enforce", state_file=str(tmp_path / "filter-state"),
                                        classes_refresh_s=1.0))
    p = build_placer(cfg, lambda: current["engine"], background_db=True)
    worker = p.runner.__self__  # type: ignore[union-attr]
    worker.backoff.max_delay_s = 2.0
    backend = Recorder([_held_now("1")], [node(n) for n in NODES])  # type: ignore[list-item]
    p.backend = backend  # type: ignore[assignment]

    first = p.cycle()
    assert first.placed == [] and first.released == [], "the first read of the classes is on its way: held, not released"
    assert worker.drain(10)
    assert p.cycle().placed == ["1"]
    assert worker.drain(10)

    current["engine"] = hole  # from now on every connection hangs for connect_timeout_s
    seconds: list[float] = []
    ages: list[float] = []
    t_end = time.monotonic() + 8
    i = 2
    while time.monotonic() < t_end:
        if i <= len(NODES) * 4:  # a new held job per cycle, as long as a GPU is free for it
            backend._jobs.append(_held_now(str(i)))  # noqa: SLF001
            i += 1
        report = p.cycle()
        seconds.append(report.seconds)
        ages.append(heartbeat_age(p.cfg.state_file) or 0.0)
        assert report.released == [], f"nothing is released while the database is out: {report.line()}"
        time.sleep(0.3)
    assert max(seconds) < 2.0, f"cycles with the database black-holed: {seconds}"
    assert max(ages) < 2.0, f"heartbeat ages: {ages}"
    placed = {c[1] for c in backend.calls if c[0] == "start_now"}
    assert placed == {str(j) for j in range(1, i)}, "every held job is placed with the classes in memory"
    assert worker.errors > 0 or not worker.idle(), "the database work hangs or fails, off the cycle's path"
    applied_before = {r["job_id"] for r in placements_for(good, limit=1000) if r["outcome"] == "applied"}
    assert applied_before == {"1"}, "the decisions made during the outage wait in memory"

    current["engine"] = good  # the database is back: what waited is written
    deadline = time.monotonic() + 30
    while p.audit.waiting and time.monotonic() < deadline:
        p.cycle()
        time.sleep(0.5)
    assert worker.drain(15) and not p.audit.waiting
    assert worker.errors > 0, "connections to the black hole timed out on the database thread"
    assert "secret" not in (p.audit.last_error or "") and "secret" not in (worker.last_error or "")
    written = {r["job_id"] for r in placements_for(good, limit=1000) if r["outcome"] == "applied"}
    assert written == {str(j) for j in range(1, i)}
    worker.stop()


def test_a_placer_that_never_reaches_the_database_releases_its_held_jobs_after_the_first_read_fails(
        tmp_path: Path, black_hole: int) -> None:
    """Fail open, not stuck: with no classes ever read, held jobs go as submitted, once the
    first read has failed (here after connect_timeout_s, 2 s)."""
    hole = make_engine(f"postgresql+psycopg://pal:x@127.0.0.1:{black_hole}/pal", connect_timeout_s=2)
    cfg = PalConfig(database=DatabaseConfig(url="sqlite:///" + str(tmp_path / "unused.db")), data_dir=tmp_path,
                    placer=PlacerConfig(mode="enforce", state_file=str(tmp_path / "filter-state")))
    p = build_placer(cfg, lambda: hole, background_db=True)
    backend = Recorder([_held_now("1")], [node(n) for n in NODES])  # type: ignore[list-item]
    p.backend = backend  # type: ignore[assignment]
    t0 = time.monotonic()
    assert p.cycle().released == [] and time.monotonic() - t0 < 1.0
    deadline = time.monotonic() + 20
    released: list[str] = []
    while not released and time.monotonic() < deadline:
        time.sleep(0.5)
        released = p.cycle().released
    assert released == ["1"]
    assert ("start_now", "1") in backend.calls
    job = backend.jobs()[0]
    assert job.tres_per_node == "gres:gpu:1" and "no GPU classes known yet" in job.admin_comment
