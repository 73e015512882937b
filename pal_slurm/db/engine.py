"""Engine creation and the one place database errors become DatabaseError.

SQLite is the embedded default (a file in the data dir); PostgreSQL (psycopg 3) and
MariaDB/MySQL (PyMySQL) are the shared production servers.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from pal_slurm.config import mask_url
from pal_slurm.errors import DatabaseError

if TYPE_CHECKING:
    from pal_slurm.config import PalConfig

log = logging.getLogger(__name__)

_DRIVER_HINT = {
    "postgresql": "install the [postgres] extra (psycopg 3) and use postgresql+psycopg://",
    "mysql": "install the [mysql] extra (PyMySQL) and use mysql+pymysql://",
    "mariadb": "install the [mysql] extra (PyMySQL) and use mariadb+pymysql://",
}


def _create_private(path: Path) -> None:
    """Create a new SQLite file 0640 (job commands, users and placements are in it; the umask
    of whoever ran `pal db upgrade` first would make it world-readable), never through a link.
    An existing file keeps its mode."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o640)
    except FileExistsError:
        return
    try:
        os.fchmod(fd, 0o640)  # whatever the umask
    finally:
        os.close(fd)


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA busy_timeout=10000")
    cur.close()


def make_engine(url: str, *, echo: bool = False, connect_timeout_s: int = 10, create: bool = True) -> Engine:
    """An Engine for `url`; never logs the password.

    create=True (`pal db upgrade`, the demo, tests) creates a SQLite file's directory.
    create=False (every other command, and the daemons) refuses a SQLite file that does not
    exist, so a mistyped URL is an error naming the path, not a new empty database."""
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise DatabaseError(f"invalid database URL {mask_url(url)!r}: {exc}") from exc
    backend = parsed.get_backend_name()
    connect_args: dict[str, Any] = {}
    kwargs: dict[str, Any] = {"echo": echo, "future": True}
    if backend == "sqlite":
        db = parsed.database
        if db and db != ":memory:" and not db.startswith("file:"):
            path = Path(db).expanduser()
            if not create and not path.exists():
                raise DatabaseError(f"no database at {path} ({mask_url(url)}): check the URL ([database] url, --db, "
                                    "PAL_DB_URL); to create it, run `pal db upgrade`")
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                if create:
                    _create_private(path)
            except OSError as exc:
                raise DatabaseError(f"cannot create the directory for {db}: {exc.strerror}") from exc
        connect_args["timeout"] = connect_timeout_s
    elif backend == "postgresql":
        connect_args["connect_timeout"] = connect_timeout_s
        kwargs["pool_pre_ping"] = True
    elif backend in ("mysql", "mariadb"):
        connect_args["connect_timeout"] = connect_timeout_s
        connect_args.setdefault("charset", "utf8mb4")
        kwargs["pool_pre_ping"] = True
        kwargs["pool_recycle"] = 3600
    try:
        engine = create_engine(parsed, connect_args=connect_args, **kwargs)
    except (NoSuchModuleError, ModuleNotFoundError, ImportError) as exc:
        hint = _DRIVER_HINT.get(backend, "check the driver name in the URL")
        raise DatabaseError(f"no database driver for {mask_url(url)}: {hint}") from exc
    if backend == "sqlite":
        event.listen(engine, "connect", _sqlite_pragmas)
    log.debug("database engine for %s", mask_url(url))
    return engine


def open_engine(cfg: PalConfig, *, create: bool = True) -> Engine:
    """The configured database; create=False refuses a SQLite file that does not exist."""
    return make_engine(cfg.db_url, echo=cfg.database.echo, connect_timeout_s=cfg.database.connect_timeout_s,
                       create=create)


def describe_error(exc: SQLAlchemyError) -> str:
    """One line from a driver error, without the SQL statement or parameters."""
    orig = getattr(exc, "orig", None)
    text = str(orig if orig is not None else exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


@contextmanager
def session_scope(engine: Engine) -> Iterator[Session]:
    """One transaction: commit on success, roll back on any error (imports are all or nothing)."""
    factory = sessionmaker(engine, expire_on_commit=False)
    session = factory()
    try:
        yield session
        session.commit()
    except SQLAlchemyError as exc:
        session.rollback()
        raise DatabaseError(f"database error on {mask_url(str(engine.url))}: {describe_error(exc)}") from exc
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()
