"""The agent's only database user: drains pending writes and refreshes what it exports.

Runs in its own thread, so a database that hangs for the connect timeout never delays a
sample or the systemd watchdog. Each step does what is due (write a batch, reload the
node's facts), and on any failure puts the batch back, counts the error and waits out
the backoff; the sampling loop never notices. The same `step` runs inline for `--once`
and in tests, with an injected clock.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from pal_slurm.agent.metrics import AgentHealth
from pal_slurm.agent.pending import Backoff, PendingQueue
from pal_slurm.agent.job_profile_store import NodeFacts, WriteItem, load_node_facts, write_items
from pal_slurm.config import mask_url
from pal_slurm.db.engine import describe_error, make_engine, session_scope
from pal_slurm.errors import PalError

__all__ = ["DbWorker"]

log = logging.getLogger(__name__)

BATCH = 200


class DbWorker:
    def __init__(self, url: str | None, queue: PendingQueue[WriteItem], health: AgentHealth, *,
                 uuids: Callable[[], Sequence[str]], on_facts: Callable[[NodeFacts], None],
                 backoff: Backoff | None = None, facts_refresh_s: float = 600.0, connect_timeout_s: int = 5,
                 clock: Callable[[], float] = time.monotonic, wall_clock: Callable[[], float] = time.time) -> None:
        self.url = url
        self.queue = queue
        self.health = health
        self.backoff = backoff or Backoff()
        self._uuids = uuids
        self._on_facts = on_facts
        self._facts_refresh_s = facts_refresh_s
        self._facts_due = 0.0
        self._connect_timeout_s = connect_timeout_s
        self._clock = clock
        self._wall = wall_clock
        self._engine: Engine | None = None
        self._schema_ok = False
        self._failing = False

    def _get_engine(self) -> Engine:
        if self._engine is None:
            assert self.url is not None
            self._engine = make_engine(self.url, connect_timeout_s=self._connect_timeout_s)
        if not self._schema_ok:
            from pal_slurm.db.migrate import require_current

            require_current(self._engine)
            self._schema_ok = True
        return self._engine

    def due(self, now: float | None = None) -> bool:
        now = self._clock() if now is None else now
        if self.url is None or not self.backoff.ready(now):
            return False
        return len(self.queue) > 0 or now >= self._facts_due

    def step(self, now: float | None = None) -> bool:
        """Do what is due; True if the database answered (or nothing was due)."""
        now = self._clock() if now is None else now
        if not self.due(now):
            return True
        batch: list[WriteItem] = []
        try:
            engine = self._get_engine()
            batch = self.queue.take(BATCH)
            if batch:
                with session_scope(engine) as session:
                    write_items(session, batch)
                self.health.db_writes += 1
                self.health.last_write_ok = self._wall()
                batch = []
            if now >= self._facts_due:
                with session_scope(engine) as session:
                    facts = load_node_facts(session, list(self._uuids()))
                self._on_facts(facts)
                self.health.facts_loaded = self._wall()
                self._facts_due = now + self._facts_refresh_s
        except (PalError, SQLAlchemyError, OSError) as exc:
            if batch:
                self.queue.give_back(batch)
            self.health.db_errors += 1
            delay = self.backoff.failed(now)
            text = (f"database error on {mask_url(self.url or '')}: {describe_error(exc)}"
                    if isinstance(exc, SQLAlchemyError) else str(exc))
            log.warning("%s; %d writes pending, retrying in %.0f s", text, len(self.queue), delay)
            self._failing = True
            self._schema_ok = False
            return False
        finally:
            self.health.pending_writes = len(self.queue)
            self.health.dropped_writes = self.queue.dropped
        if self._failing:
            log.warning("database reachable again; %d writes pending", len(self.queue))
            self._failing = False
        self.backoff.succeeded()
        return True

    def drain(self, deadline_s: float = 10.0) -> bool:
        """Write everything pending now (shutdown, --once); False if the database refused."""
        end = self._clock() + deadline_s
        while len(self.queue) and self._clock() < end:
            self.backoff.next_at = 0.0
            if not self.step():
                return False
        return len(self.queue) == 0

    def run(self, stop: threading.Event) -> None:
        """Thread body: step whenever something is due, else poll twice a second."""
        while not stop.is_set():
            try:
                self.step()
            except Exception:  # a bug here must not end the thread silently while sampling goes on
                log.exception("database worker step failed")
                self.backoff.failed(self._clock())
            if not self.due():
                stop.wait(0.5)

    def close(self) -> None:
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None
