"""The runtime-history use case: an `sacct -P` export read whole, then stored in one transaction.

`pal jobs import-history` and the replay (through that command) call it; it opens what it needs
and returns plain data. The format and the learning rule are docs/agent.md, "Learned runtimes".
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import Engine

from pal_slurm.db.engine import session_scope
from pal_slurm.db.history_store import HistoryImport, check_source, import_history
from pal_slurm.db.migrate import require_current
from pal_slurm.errors import InputError
from pal_slurm.jobs.sacct_history import HistoryFile, read_history

__all__ = ["import_history_file", "read_history_file"]

log = logging.getLogger(__name__)


def read_history_file(path: Path, source: str) -> HistoryFile:
    """One `sacct -P` export parsed whole (pal_slurm.jobs.sacct_history: FILE:LINE on the first
    bad row), and the `source` label checked: before any database is opened, so a bad file or
    label is named as such whatever state the database is in."""
    check_source(source)
    try:
        text = Path(path).read_text(encoding="utf-8-sig")  # -sig: a BOM from spreadsheet tools
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read the export: {exc}", source=str(path)) from exc
    return read_history(text.splitlines(keepends=True), source=str(path))


def import_history_file(engine: Engine | Callable[[], Engine], path: Path, source: str) -> HistoryImport:
    """Import one `sacct -P` export into the runtime history under `source` (its cluster): read
    whole first (`read_history_file`; nothing written on an error), then one transaction.
    `engine` may be a callable, opened only once the file has been read."""
    history = read_history_file(path, source)
    engine = engine() if callable(engine) else engine
    require_current(engine)
    with session_scope(engine) as session:
        result = import_history(session, history, source)
    log.info("%s: %d jobs, %d added, %d already present", path, result.jobs, result.added, result.already_present)
    return result
