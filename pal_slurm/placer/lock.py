"""One placer at a time: a lock held for the daemon's life, which the fail-safe respects.

Why: two placers (one on each of a pair of HA controllers, or one started by hand beside the
service) would retype the same held jobs at once, each clearing what the other set, and
`release-stale` acting beside a live daemon releases jobs in the middle of their retype.
So the daemon holds two locks while it places:

- a `flock` on a file on the controller (`placer.lock_file`, default `placer.lock` beside
  the state file): the kernel drops it when the process dies, even on `kill -9`, so a crash
  never leaves a stale lock to clean up;
- where the database is a server (PostgreSQL, MariaDB/MySQL), an advisory lock on a
  connection of its own (pal_slurm.db.advisory_lock): it spans hosts, so a placer on a
  backup controller waits while the primary's runs. The server drops it when that
  connection ends.

A placer that cannot take them stands by: it publishes nothing and changes no job, and tries
again every few seconds. `release-stale` takes the file lock before it acts, so it never
releases beside a live placer on the same host, and leaves the jobs alone where the
database says a placer on another host holds the lock.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import socket
import time
from typing import Any
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

__all__ = ["LOCK_NAME", "FileLock", "OnePlacer", "default_lock_path"]

#: the lock file's name beside the filter state file, unless placer.lock_file names another
LOCK_NAME = "placer.lock"


def default_lock_path(state_file: str) -> str:
    """`placer.lock` in the state file's directory (/var/lib/pal/placer by default: the
    placer's alone, so no other user can put a file or a link there first)."""
    return str(Path(state_file).expanduser().parent / LOCK_NAME)


@dataclass
class FileLock:
    """An exclusive, non-blocking `flock` on `path`, with the holder's pid and host written in
    the file for the message another process shows. The lock is the open descriptor, not the
    file's content: the kernel releases it when the process ends, however it ends."""

    path: str
    _fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> bool:
        """True when this process now holds the lock (or already did); False when another
        process holds it. OSError for a path that cannot be opened (a missing directory,
        no permission, a symbolic link: O_NOFOLLOW)."""
        if self._fd is not None:
            return True
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                return False
            raise
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
        except OSError as exc:  # the lock is held all the same; only the message is lost
            log.debug("lock file %s: holder not written (%s)", self.path, exc)
        self._fd = fd
        return True

    def holder(self, wait_s: float = 0.5) -> str:
        """Who holds the lock, as its holder wrote it ("pid N on host"); "" when unknown.

        A holder writes its name just after it takes the lock, so a placer started at the same
        moment can find the file still empty: an empty file is read again for up to `wait_s`."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                with open(self.path, encoding="utf-8", errors="replace") as fh:
                    text = fh.read(200).strip()
            except OSError:
                return ""
            if text or time.monotonic() >= deadline:
                return text
            time.sleep(0.02)

    def release(self) -> None:
        if self._fd is None:
            return
        try:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        finally:
            os.close(self._fd)
            self._fd = None


class OnePlacer:
    """The daemon's two locks together: the file lock, taken at once at start, and the
    database's advisory lock (where the database is a server), asked for on the database
    thread so that a slow database never delays the first heartbeat.

    `state` says where this placer stands: "placing" (it holds what it can), "standby" (another
    placer holds a lock: `why` says which). The database lock is checked again every
    `check_s`; a database that does not answer leaves the placer placing on the file lock
    alone (said in the log), and one that answers that another session holds the lock stands
    this placer down."""

    def __init__(self, file_lock: FileLock, db_lock: Any = None, runner: Any = None, check_s: float = 30.0,
                 clock: Any = None) -> None:
        self.file = file_lock
        self.db = db_lock
        self.runner = runner
        self.check_s = check_s
        self._clock = clock or time.monotonic
        self._next_check = float("-inf")
        #: None: not asked yet or no answer; True: held here; False: held by another session
        self.db_held: bool | None = None if db_lock is not None else True
        self.why = ""
        #: the lock file could not be opened: going on without it (said in the log)
        self.unlocked = False

    @property
    def placing(self) -> bool:
        return (self.file.held or self.unlocked) and self.db_held is not False

    def take(self, wait_db_s: float = 5.0) -> bool:
        """Take the file lock, then ask for the database's (waiting up to `wait_db_s` for the
        answer); True when this placer may place."""
        try:
            got = self.file.acquire()
        except OSError as exc:
            # a lock file that cannot be opened must not keep jobs from being placed or
            # released (fail open); the state file beside it is most likely unwritable too
            if not self.unlocked:
                log.error("lock file %s cannot be opened (%s); going on without it: nothing keeps a second "
                          "placer out on this host", self.file.path, exc.strerror or exc)
            self.unlocked = True
            got = True
        if not got:
            self.why = f"another placer holds {self.file.path} ({self.file.holder() or 'holder unknown'})"
            return False
        if self.db_held is not False:
            self.why = ""
        if self.db is None:
            return True
        if self.runner is None:  # no database thread (the fail-safe): ask here, once
            try:
                self._ask_db()
            except Exception:  # noqa: BLE001 - said in the log; the file lock decides alone
                pass
            return self.placing
        self.check(force=True)
        end = time.monotonic() + wait_db_s
        while self.db_held is None and time.monotonic() < end:
            time.sleep(0.05)
        if self.db_held is None:
            log.warning("database lock %r not confirmed within %.0f s; placing on the file lock %s alone until "
                        "the database answers", getattr(self.db, "name", "?"), wait_db_s, self.file.path)
        return self.placing

    def check(self, *, force: bool = False) -> None:
        """Ask the database again (on the database thread) when `check_s` have passed."""
        if self.db is None or self.runner is None:
            return
        now = self._clock()
        if not force and now < self._next_check:
            return
        self._next_check = now + self.check_s
        self.runner("placer-lock", self._ask_db)

    def _ask_db(self) -> None:
        try:
            got = self.db.acquire()
        except Exception as exc:  # noqa: BLE001 - a database that cannot be asked leaves the file lock in charge
            if self.db_held is not False:
                self.db_held = None
            log.warning("database lock not checked: %s", str(exc).splitlines()[0][:200] if str(exc) else exc)
            raise
        if got:
            if self.db_held is not True:
                log.info("database lock %r held: this placer places", self.db.name)
            self.db_held = True
            self.why = ""
        else:
            holder = self.db.holder()
            self.why = f"another placer holds the database lock {self.db.name!r}" + (f" ({holder})" if holder else "")
            if self.db_held is not False:
                log.error("%s: standing by", self.why)
            self.db_held = False

    def release(self) -> None:
        if self.db is not None:
            try:
                self.db.release()
            except Exception as exc:  # noqa: BLE001 - the server drops it with the connection anyway
                log.debug("database lock not released: %s", exc)
        self.file.release()
