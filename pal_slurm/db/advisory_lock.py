"""A database-wide lock held on a connection of its own (database adapter).

Why: the placer's file lock (pal_slurm.placer.lock) keeps one placer per controller, but HA
controllers are two hosts that share one database. PostgreSQL's session advisory locks and
MariaDB/MySQL's `GET_LOCK` are held by a connection and dropped by the server when that
connection ends, so a placer that dies, or loses its link to the database, never leaves a
lock behind. SQLite is a file on one host: the file lock already covers it, and there is no
lock to take here.
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import Engine, text
from sqlalchemy.exc import SQLAlchemyError

from pal_slurm.db.engine import describe_error
from pal_slurm.errors import DatabaseError

log = logging.getLogger(__name__)

__all__ = ["AdvisoryLock", "LOCK_KEY", "LOCK_NAME"]

#: MariaDB/MySQL lock name (GET_LOCK) and PostgreSQL advisory key ("pal-plac" as a bigint)
LOCK_NAME = "pal-slurm-placer"
LOCK_KEY = int.from_bytes(b"pal-plac", "big")


class AdvisoryLock:
    """Take, check and drop the lock named `name` on a connection kept open for it."""

    def __init__(self, engine: Engine, name: str = LOCK_NAME) -> None:
        self.engine = engine
        self.name = name
        self.key = LOCK_KEY if name == LOCK_NAME else int.from_bytes(name.encode()[:8].ljust(8, b"\0"), "big") >> 1
        self._conn: Any = None
        self._held_on: Any = None  # the driver's connection the lock was taken on

    def _dbapi(self) -> Any:
        try:
            return self._conn.connection.dbapi_connection
        except Exception:  # noqa: BLE001 - an invalidated connection has none
            return None

    @property
    def applies(self) -> bool:
        """Whether the database has such locks (PostgreSQL, MariaDB, MySQL; not SQLite)."""
        return self.engine.dialect.name in ("postgresql", "mysql", "mariadb")

    @property
    def held(self) -> bool:
        return self._conn is not None

    def acquire(self) -> bool:
        """True when this process holds the lock now (taken, or already held on a live
        connection); False when another session holds it. DatabaseError when the database
        cannot be asked (the caller decides what that means)."""
        if not self.applies:
            return True
        if self._conn is not None and self.alive():
            return True
        try:
            conn = self.engine.connect()
            try:
                got = conn.execute(self._take()).scalar()
                conn.commit()
            except BaseException:
                conn.close()
                raise
        except SQLAlchemyError as exc:
            raise DatabaseError(f"advisory lock {self.name!r} not taken: {describe_error(exc)}") from exc
        if got in (1, True):
            self._conn = conn
            self._held_on = self._dbapi()
            return True
        conn.close()
        return False

    def alive(self) -> bool:
        """Whether the connection that holds the lock still answers; a lost connection means a
        lost lock (the server dropped it), and it is forgotten here."""
        if self._conn is None:
            return False
        if self._conn.invalidated or self._conn.closed or self._dbapi() is not self._held_on:
            # SQLAlchemy would reconnect an invalidated connection on the next statement: a new
            # session, which does not hold the lock
            log.warning("advisory lock %r lost with its connection", self.name)
            self._drop()
            return False
        try:
            self._conn.execute(text("SELECT 1")).scalar()
            self._conn.commit()
            return True
        except SQLAlchemyError as exc:
            log.warning("advisory lock %r lost with its connection: %s", self.name, describe_error(exc))
            self._drop()
            return False

    def holder(self) -> str:
        """Which session holds the lock, where the database says (a connection id); "" else."""
        if not self.applies:
            return ""
        try:
            with self.engine.connect() as conn:
                if self.engine.dialect.name == "postgresql":
                    row = conn.execute(text(
                        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted "
                        "AND (classid::bigint << 32 | objid::bigint) = :key"), {"key": self.key}).first()
                else:
                    row = conn.execute(text("SELECT IS_USED_LOCK(:name)"), {"name": self.name}).first()
        except SQLAlchemyError:
            return ""
        return f"database session {row[0]}" if row and row[0] is not None else ""

    def release(self) -> None:
        if self._conn is None:
            return
        try:
            if self.engine.dialect.name == "postgresql":
                self._conn.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": self.key})
            else:
                self._conn.execute(text("SELECT RELEASE_LOCK(:name)"), {"name": self.name})
            self._conn.commit()
        except SQLAlchemyError as exc:  # closing the connection drops it anyway
            log.debug("advisory lock %r: unlock failed (%s); closing its connection", self.name, describe_error(exc))
        self._drop()

    def _take(self) -> Any:
        if self.engine.dialect.name == "postgresql":
            return text("SELECT pg_try_advisory_lock(:key)").bindparams(key=self.key)
        return text("SELECT GET_LOCK(:name, 0)").bindparams(name=self.name)

    def _drop(self) -> None:
        conn, self._conn, self._held_on = self._conn, None, None
        try:
            conn.close()
        except SQLAlchemyError:
            pass
        except Exception:  # noqa: BLE001 - a dead connection may fail in the driver's own way
            pass
