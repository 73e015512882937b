"""Waking the placer at once: a poke file beside the filter state.

Why a plain file that grows by one byte per poke, and not a FIFO or a socket: the submit
filter runs inside slurmctld, in Lua 5.1 with only `io`, and must never block it. Opening a
FIFO for writing with `io.open` blocks until a reader opens it (a dead placer would stall
every submission), and plain Lua has no sockets. Appending one byte to a regular file on a
local disk cannot block and cannot fail the submission (a missing file or directory only
makes `io.open` return nil). The placer looks at the file's size and change time every
`poll_s` (a `stat` every 20 ms by default: about 50 system calls a second, nothing next to
one squeue) and runs a cycle when they moved. The size grows with every poke, so two pokes
within one tick of the file system's coarse clock are still seen.

Who pokes (docs/admin-guide.md, "Waking the placer"): job_submit.lua when it holds a job and
the filter state says `wake 1` (so only a placer that publishes a heartbeat is poked), and
`spank_hooks/pal-epilog-slurmctld.sh` (EpilogSlurmctld, on the controller, where the placer
runs) when a job ends. Both find the file at one fixed place, `placer-wake` beside the filter
state file: a path the state file named could point slurmctld at any file. The timed cycle
stays as it was: a lost poke costs at most one interval, and with the placer dead nothing
waits on the file (the holds end by themselves, as before).

Why the directory matters: Lua 5.1's `io.open` can neither refuse a symbolic link (O_NOFOLLOW)
nor open without blocking (O_NONBLOCK), so what keeps slurmctld from appending to another file,
or from hanging on a FIFO, is that nobody but the placer's user (or root) may create or replace
an entry in the state directory. The placer checks that at start (`state_dir_problem`) and tells
the filter to poke only when it holds.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["WAKE_NAME", "WakeWatch", "default_path", "ensure", "poke", "state_dir_problem", "woken_start"]

log = logging.getLogger(__name__)

#: the poke file's name beside the filter state file (job_submit.lua's pal.WAKE_NAME)
WAKE_NAME = "placer-wake"
#: the placer empties the file once it is this large (a dead placer leaves it growing by a
#: byte per held job or job end; a running one keeps it small)
TRUNCATE_AT = 65536


def default_path(state_file: str | os.PathLike[str]) -> str:
    """The poke file for a placer whose filter state file is `state_file`: the one path the
    filter (pal.wake_path) and the EpilogSlurmctld hook compute for it too."""
    return str(Path(state_file).with_name(WAKE_NAME))


def state_dir_problem(directory: str | os.PathLike[str], euid: int | None = None) -> str | None:
    """What makes `directory` unfit to hold the file slurmctld pokes, or None when it is fit.

    Fit: a real directory (not a symbolic link), owned by the placer's effective user (`euid`,
    default this process's) or root, and writable by neither its group nor others. Anyone else
    who may write there could put a link to another file or a FIFO in the poke file's place,
    and slurmctld's `io.open` would follow the one and block on the other."""
    uid = os.geteuid() if euid is None else euid
    try:
        st = os.lstat(directory)
    except OSError as exc:
        return f"state directory {directory} cannot be examined ({exc.strerror or exc})"
    if stat.S_ISLNK(st.st_mode):
        return f"state directory {directory} is a symbolic link (name the real directory)"
    if not stat.S_ISDIR(st.st_mode):
        return f"state directory {directory} is not a directory"
    if st.st_uid not in (uid, 0):
        return (f"state directory {directory} is owned by uid {st.st_uid}, not by the placer's user (uid {uid}) "
                "or root")
    writers = [who for who, bit in (("its group", stat.S_IWGRP), ("others", stat.S_IWOTH)) if st.st_mode & bit]
    if writers:
        return (f"state directory {directory} is writable by {' and '.join(writers)} "
                f"(mode {stat.S_IMODE(st.st_mode):04o}; only the placer's user may write there)")
    return None


def ensure(path: str | os.PathLike[str]) -> bool:
    """Create the poke file as an empty regular file if it is missing (mode 0664 less the
    umask; an existing file keeps its owner and mode, which the admin sets so slurmctld's
    SlurmUser may write it). False, with an error logged, when the path is anything but a
    regular file: the filter would block on a FIFO, so the placer then does not tell it to
    poke (no `wake 1`)."""
    p = Path(path)
    try:
        st = p.lstat()
    except FileNotFoundError:
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o664)
            os.close(fd)
            return True
        except FileExistsError:
            return ensure(path)
        except OSError as exc:
            log.error("wake-up file %s not created (%s): jobs wait for the next cycle", p, exc)
            return False
    except OSError as exc:
        log.error("wake-up file %s not readable (%s): jobs wait for the next cycle", p, exc)
        return False
    if not stat.S_ISREG(st.st_mode):
        log.error("wake-up file %s is not a regular file: not published (the filter must never open a "
                  "FIFO or device); jobs wait for the next cycle", p)
        return False
    return True


def poke(path: str | os.PathLike[str]) -> bool:
    """Append one byte to the poke file; never blocks, never raises. True when written.
    (What the filter and the EpilogSlurmctld hook do, for Python callers and tests.)"""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        return os.write(fd, b"1") == 1
    except OSError:
        return False
    finally:
        os.close(fd)


@dataclass
class WakeWatch:
    """Waits for the next cycle: the interval's end, a poke, or a stop."""

    path: str
    poll_s: float = 0.02

    def __post_init__(self) -> None:
        self._seen = self._look()
        self._truncate_if_large(self._seen)

    def _look(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def _truncate_if_large(self, seen: tuple[int, int, int] | None) -> None:
        """Empty the file once it is large; only ever a regular file, opened without
        following a link and without blocking on a FIFO (os.truncate by name would follow
        a link put there and empty whatever file it names)."""
        if seen is None or seen[1] < TRUNCATE_AT:
            return
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError as exc:
            log.warning("wake-up file %s not emptied (%s)", self.path, exc)
        else:
            try:
                if stat.S_ISREG(os.fstat(fd).st_mode):
                    os.ftruncate(fd, 0)
                else:
                    log.warning("wake-up file %s not emptied: not a regular file", self.path)
            except OSError as exc:
                log.warning("wake-up file %s not emptied (%s)", self.path, exc)
            finally:
                os.close(fd)
        self._seen = self._look()

    def poked(self) -> bool:
        """Whether the file changed since the last look (and remember this look)."""
        now = self._look()
        if now == self._seen:
            return False
        self._seen = now
        self._truncate_if_large(now)
        return now is not None

    def wait(self, timeout: float, stop: threading.Event, *, not_before: float = 0.0) -> bool:
        """Sleep up to `timeout` s in `poll_s` steps; True once the file was poked and the
        monotonic clock has reached `not_before` (see `woken_start`), False when the time ran
        out or `stop` was set. A poke before `not_before` is kept, not lost: it wakes the
        placer at `not_before`."""
        deadline = time.monotonic() + max(timeout, 0.0)
        poked = False
        while not stop.is_set():
            poked = self.poked() or poked
            now = time.monotonic()
            if poked and now >= not_before:
                return True
            left = deadline - now
            if left <= 0:
                return False
            stop.wait(min(self.poll_s, left))
        return False


def woken_start(started: float, ended: float, min_gap_s: float) -> float:
    """The earliest a cycle woken by a poke may start, after a cycle that ran from `started`
    to `ended` (monotonic seconds): `min_gap_s` after that cycle's start, and no sooner
    than the placer has been idle as long as that cycle took.

    Why: each cycle reads the queue; a burst of submissions pokes the file hundreds of times
    a second, and without a gap the placer would read the queue back to back, as fast as
    squeue and slurmctld answer (on a queue of 50,000 jobs each read is a second of
    slurmctld's time). With it the placer answers the first poke at once and the rest of
    the burst in the next cycle, and spends at most half its time in cycles; the timed
    cycle (interval_s) is not affected."""
    return max(started + min_gap_s, ended + (ended - started))
