"""The job-class rules as the placer reads them: from the database, at most every
`classes_refresh_s`, kept while the database is down (placement goes on with what it knew).

Why a cache: every held job is asked for its class each cycle, and the rule table changes
only when it is read again; the submit filter gets the rules it applies itself from here too
(published by placer/heartbeat.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pal_slurm.placer.refresh import Refreshed

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from pal_slurm.jobs.rules import ClassRuleTable
    from pal_slurm.placer.db_worker import Runner

__all__ = ["ClassRules"]

log = logging.getLogger(__name__)


class ClassRules:
    """The job-class rules, reloaded from the database at most every `refresh_s`; the last
    table is kept while the database is down (placement goes on with what it knew), and a
    failed reload is tried again within 10 s, as the classes are (placer/factors.py)."""

    def __init__(self, engine: Callable[[], Engine], refresh_s: float, default_class: str,
                 clock: Callable[[], float] = time.time, runner: Runner | None = None) -> None:
        self._engine = engine
        self._default = default_class
        self._cache: Refreshed[ClassRuleTable | None] = Refreshed(
            self._load, refresh_s, initial=None, clock=clock, retry_s=min(refresh_s, 10.0),
            on_error=lambda error: log.warning("class rules not reloaded: %s", error), runner=runner,
            key="class-rules")
        self._resolved_by: ClassRuleTable | None = None
        self._resolved: dict[tuple[str, str, str, str, str], tuple[str, str]] = {}

    def _load(self, _now: float) -> ClassRuleTable:
        from pal_slurm.db.engine import session_scope
        from pal_slurm.db.class_rules_store import load_class_rules

        with session_scope(self._engine()) as session:
            return load_class_rules(session)

    def table(self) -> ClassRuleTable | None:
        return self._cache.get()

    def resolve(self, job: Any) -> tuple[str, str]:
        """(class, why) for a job; the configured default class when no table was ever read.
        Kept per table and job identity (user, name, command, account, partition): every
        held job is asked for each cycle, and a table changes only when it is read again."""
        from pal_slurm.jobs.rules import resolve_class

        table = self.table()
        if table is None:
            return self._default, "default"
        if table is not self._resolved_by:
            if table != self._resolved_by:  # read again, and changed (a reload is a new, often equal, table)
                self._resolved = {}
            self._resolved_by = table
        key = (job.user, job.name, job.command, job.account, job.partition)
        got = self._resolved.get(key)
        if got is None:
            if len(self._resolved) >= 100_000:
                self._resolved.clear()
            got = self._resolved[key] = resolve_class(table, *key, default=self._default)
        return got

    def filter_rules(self) -> list[Any]:
        """The rules the submit filter applies itself (published in its state file)."""
        from pal_slurm.jobs.rules import filter_rules

        table = self.table()
        return [] if table is None else filter_rules(table)
