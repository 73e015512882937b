"""The placer's database work, done by one background thread so that no cycle waits on it.

Why: a cycle holds jobs whose begin times run out and a heartbeat the submit filter and the
fail-safe watch. When the database is slow or unreachable, every connection attempt costs up
to `connect_timeout_s`; done inline, a few of them per cycle made cycles of 30-40 s, so the
heartbeat went stale while the daemon lived and holds ran out mid-placement. Here every read
(the classes, the class rules, the learned runtimes, the advisory lock) and every write (the
audit records, the accounting records, the job identities) is a task queued to one thread:
the cycle uses the last good values (pal_slurm.placer.refresh.Refreshed with a `runner`), and
writes wait in their bounded in-memory queues until the database answers again.

Tasks are keyed: a task whose key is already queued or running is not queued twice (one
audit flush, one classes read at a time), so an outage never piles work up. After a task
fails with a database error the thread waits, doubling from 1 s up to 15 s, before the next
one (as the agent's DbWorker does on the GPU nodes).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from pal_slurm.agent.pending import Backoff

log = logging.getLogger(__name__)

__all__ = ["DbWorker", "Runner"]

#: how a component hands its database work to the worker: (key, task) -> queued?
Runner = Callable[[str, Callable[[], None]], bool]


class DbWorker:
    """One daemon thread running keyed tasks in order, with backoff after failures."""

    def __init__(self, backoff: Backoff | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.backoff = backoff or Backoff(min_delay_s=1.0, max_delay_s=15.0)
        self._clock = clock
        self._tasks: OrderedDict[str, Callable[[], None]] = OrderedDict()
        self._running: str | None = None
        self._cond = threading.Condition()
        self._stop = False
        self._thread: threading.Thread | None = None
        #: the last task error in one line (None after a task succeeds), for logs and status
        self.last_error: str | None = None
        self.errors = 0

    def start(self) -> DbWorker:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="pal-placer-db", daemon=True)
            self._thread.start()
        return self

    def submit(self, key: str, task: Callable[[], None]) -> bool:
        """Queue `task` under `key`; False (nothing queued) when that key is queued or running."""
        with self._cond:
            if key in self._tasks or key == self._running:
                return False
            self._tasks[key] = task
            self._cond.notify()
            return True

    def busy(self, key: str) -> bool:
        """Whether a task with this key is queued or running."""
        with self._cond:
            return key in self._tasks or key == self._running

    def idle(self) -> bool:
        with self._cond:
            return not self._tasks and self._running is None

    def drain(self, deadline_s: float) -> bool:
        """Wait up to `deadline_s` for every queued task to finish (on stop); True when all did."""
        end = time.monotonic() + deadline_s
        with self._cond:
            while self._tasks or self._running is not None:
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.1))
            return True

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._stop and not self._tasks:
                    self._cond.wait()
                if self._stop:
                    return
                wait = self.backoff.next_at - self._clock()
                if wait > 0:
                    self._cond.wait(wait)
                    continue
                key, task = self._take()
            self._run_marked(key, task)

    def _take(self) -> tuple[str, Callable[[], None]]:
        """The oldest queued task, marked running (the caller holds the lock)."""
        key, task = self._tasks.popitem(last=False)
        self._running = key
        return key, task

    def _run_marked(self, key: str, task: Callable[[], None]) -> None:
        try:
            self._run(key, task)
        finally:
            with self._cond:
                self._running = None
                self._cond.notify_all()

    def _run(self, key: str, task: Callable[[], None]) -> None:
        try:
            task()
        except Exception as exc:  # noqa: BLE001 - a task's failure must never end the thread
            self.errors += 1
            self.last_error = f"{key}: {type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
            delay = self.backoff.failed(self._clock())
            log.warning("database work %s failed (%s); next database work in %.0f s", key, self.last_error, delay)
        else:
            if self.backoff.failures:
                log.info("database answering again (%s)", key)
            self.last_error = None
            self.backoff.succeeded()
