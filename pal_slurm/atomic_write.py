"""Replacing a file so that a reader sees the old content or the new one, never a part of either.

Why one helper: slurmctld's submit filter reads the placer's state file while the placer
rewrites it every cycle, the node agent's state must survive a crash in the middle of a save,
and `pal report --html` replaces a page someone may have open. Each needs the same steps in the
same order: a temporary file in the target's directory (a rename is atomic only within one file
system, created 0600 and never opened by name again), its mode set on the open descriptor, written
in full, renamed over the target, and removed when anything fails.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def write_atomically(path: str | os.PathLike[str], text: str, *, encoding: str = "utf-8",
                     mode: int | None = None, durable: bool = True, group: int | None = None) -> None:
    """Write `text` to `path` through a temporary file beside it and a rename.

    `mode`: the file's permission bits; None gives what a plain `open()` gives (0666 less the
    umask). `durable`: fsync before the rename, so that a crash leaves the old file or the new
    one, never an empty one; a file rewritten every few seconds may skip it. `group`: the
    file's group, set before the rename when it differs, best effort (a group this process may
    not give is left as created: the caller's reader then may not read it, nothing worse). The
    directory must exist. Any error (an OSError) is raised as it is, for the caller to word, and
    the temporary file is gone by then.

    The temporary file is created by mkstemp: O_CREAT|O_EXCL|O_NOFOLLOW, mode 0600, so a name
    planted before it (a link, a FIFO) makes it pick another, never open that."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding=encoding, newline="\n") as fh:
            # owner, group and mode set on the open descriptor, not on the path: in a directory
            # others can write, the path could be swapped for a link to another file before a
            # chown or chmod by name
            if group is not None and os.fstat(fh.fileno()).st_gid != group:
                with contextlib.suppress(OSError):
                    os.fchown(fh.fileno(), -1, group)
            os.fchmod(fh.fileno(), 0o666 & ~current_umask() if mode is None else mode)
            fh.write(text)
            if durable:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def current_umask() -> int:
    """The process's umask, read without changing it (os.umask can only set it, and setting it
    back races with other threads); 022 when /proc does not say."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022
