"""A value the placer reads again at most every so many seconds, and keeps while its source is down.

Why one: the placer reads the GPU classes and the job-class rules from the database (and
Slurm's partition tiers, its priority settings and the learned runtimes from elsewhere), each
of which can be unavailable for a while, and it must go on placing with what it read last
(docs/admin-guide.md, "Failure modes": "placing continues with the classes already in memory").
Every refresh runs on the clock the cycle runs on, injected, so that a test or a replay that
moves its clock moves every refresh with it. Given a `runner` (the daemon's database thread,
pal_slurm.placer.db_worker), a due read is queued there and `get` returns the value at once:
the cycle never waits on a slow source; the new value is used from the cycle after it lands.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Generic, TypeVar

from pal_slurm.placer.db_worker import Runner

T = TypeVar("T")


class Refreshed(Generic[T]):
    """`read(now)` again once `refresh_s` have passed since the last read; when a read fails
    with one of `keep_on`, the value read last stays (`initial` before any), `last_error` says
    why in one line, `on_error` is told, and the next read comes after `retry_s` (default
    `refresh_s`). Other exceptions propagate, and so do those of `keep_on` that are also one
    of `raise_on` (a subclass that must stop the caller, such as Slurm being unreachable)."""

    def __init__(self, read: Callable[[float], T], refresh_s: float, *, initial: T,
                 clock: Callable[[], float] = time.time, retry_s: float | None = None,
                 keep_on: tuple[type[Exception], ...] = (Exception,),
                 raise_on: tuple[type[Exception], ...] = (),
                 on_error: Callable[[str], None] | None = None,
                 runner: Runner | None = None, key: str = "refresh") -> None:
        self._read = read
        self._runner = runner
        self._key = key
        self.refresh_s = refresh_s
        self.retry_s = refresh_s if retry_s is None else retry_s
        self._clock = clock
        self._keep_on = keep_on
        self._raise_on = raise_on
        self._on_error = on_error
        self.value = initial
        #: when the value was last read (the clock's time), None before the first good read
        self.loaded_at: float | None = None
        self.last_error: str | None = None
        self._due = float("-inf")

    def get(self, now: float | None = None) -> T:
        """The value, read again first when it is due (`now` defaults to the clock's)."""
        now = self._clock() if now is None else now
        if now < self._due:
            return self.value
        if self._runner is None:
            self._refresh(now, reraise=False)
        else:
            self._due = float("inf")  # until the queued read lands (it sets the next due time)
            if not self._runner(self._key, lambda: self._refresh(self._clock(), reraise=True)):
                self._due = now  # the runner has it already: ask again next time
        return self.value

    @property
    def settled(self) -> bool:
        """Whether a read has ended yet, well or not (False while the first one is in flight)."""
        return self.loaded_at is not None or self.last_error is not None

    def _refresh(self, now: float, *, reraise: bool) -> None:
        try:
            value = self._read(now)
        except self._keep_on as exc:
            if isinstance(exc, self._raise_on):
                self._due = now
                raise
            self.last_error = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
            self._due = now + self.retry_s
            if self._on_error is not None:
                self._on_error(self.last_error)
            if reraise:
                raise
        except BaseException:
            self._due = now
            raise
        else:
            self.value, self.loaded_at, self.last_error = value, now, None
            self._due = now + self.refresh_s
