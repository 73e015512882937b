"""Database side of the runtime history: imported sacct jobs to rows, and the rows the
learning rule reads (pal_slurm.jobs.runtimes does the learning; this module only queries)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from pal_slurm.config import PalConfig
from pal_slurm.db.models import JobHistory
from pal_slurm.db.sensitivity_store import learned_runtimes
from pal_slurm.errors import InputError
from pal_slurm.jobs.runtimes import LEARNED_STATES, KeptRuns, LearnedRuntimes, RuntimeRule, learn_runtimes
from pal_slurm.jobs.sacct_history import HistoryFile

__all__ = ["HistoryImport", "HistoryReader", "check_source", "delete_history", "import_history", "learned_from_history", "learned_runtimes_all",
           "runtime_rule"]

_MAX_SOURCE, _MAX_USER, _MAX_NAME = 128, 128, 255
_MAX_NODE_LIST = 1024
_BATCH = 500


@dataclass(frozen=True)
class HistoryImport:
    """What one import did."""

    source: str
    jobs: int  # finished GPU jobs in the file
    added: int
    already_present: int
    by_state: dict[str, int] = field(default_factory=dict)  # state -> jobs added
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> rows
    steps: int = 0
    bad: tuple[tuple[int, str], ...] = ()  # (line, problem) of the rows that could not be read


def runtime_rule(cfg: PalConfig) -> RuntimeRule:
    """The learning rule of the configuration ([jobs] runtime_min_jobs and history)."""
    return RuntimeRule(min_jobs=cfg.jobs.runtime_min_jobs, history=cfg.jobs.history)


def check_source(source: str) -> str:
    """The source label as given; InputError when it is empty, padded or too long."""
    if not source or source != source.strip() or len(source) > _MAX_SOURCE or "\n" in source:
        raise InputError(f"--cluster {source!r}: must be one line of 1-{_MAX_SOURCE} characters without "
                         "surrounding spaces")
    return source


def import_history(session: Session, history: HistoryFile, source: str,
                   now: datetime | None = None) -> HistoryImport:
    """Add the file's jobs under `source`; a job already stored (same source, job id and start)
    is left as it is, so importing an export again, or an overlapping one, adds nothing twice."""
    source = check_source(source)
    when = now or datetime.now(UTC)
    known: set[tuple[str, datetime]] = set()
    ids = sorted({j.job_id for j in history.jobs})
    for i in range(0, len(ids), _BATCH):
        known.update(session.execute(select(JobHistory.slurm_job_id, JobHistory.started_at).where(
            JobHistory.source == source, JobHistory.slurm_job_id.in_(ids[i:i + _BATCH]))).all())
    added = 0
    by_state: dict[str, int] = {}
    for j in history.jobs:
        if (j.job_id, j.started_at) in known:
            continue
        known.add((j.job_id, j.started_at))
        session.add(JobHistory(source=source, slurm_job_id=j.job_id, user=j.user[:_MAX_USER], name=j.name[:_MAX_NAME],
                               started_at=j.started_at, elapsed_s=j.elapsed_s, state=j.state, gpus=j.gpus,
                               nodes=j.nodes, node_list=j.node_list if 0 < len(j.node_list) <= _MAX_NODE_LIST else None, imported_at=when))
        added += 1
        by_state[j.state] = by_state.get(j.state, 0) + 1
    session.flush()
    return HistoryImport(source=source, jobs=len(history.jobs), added=added, already_present=len(history.jobs) - added,
                         by_state=dict(sorted(by_state.items())), skipped=history.skipped_by_reason(),
                         steps=history.steps, bad=history.bad)


def delete_history(session: Session, source: str | None = None, *, prefix: str | None = None) -> int:
    """Remove every row imported under `source`, or under any source starting with `prefix`;
    how many there were."""
    if (source is None) == (prefix is None):
        raise ValueError("delete_history: give exactly one of source and prefix")
    where = JobHistory.source == source if source is not None else JobHistory.source.startswith(prefix,
                                                                                                 autoescape=True)
    result = session.execute(delete(JobHistory).where(where))
    session.flush()
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


def learned_from_history(session: Session, rule: RuntimeRule = RuntimeRule(),
                         now: datetime | None = None) -> dict[tuple[str, str], float]:
    """(user, job name) -> learned runtime in seconds, from the COMPLETED and TIMEOUT jobs of
    the last `rule.max_age_days` (every source together: the same user and name on two
    clusters is the same work)."""
    cutoff = rule.cutoff(now or datetime.now(UTC))
    rows = session.execute(select(JobHistory.user, JobHistory.name, JobHistory.started_at, JobHistory.elapsed_s)
                           .where(JobHistory.state.in_(sorted(LEARNED_STATES)), JobHistory.started_at >= cutoff)
                           .order_by(JobHistory.id)).all()
    return learn_runtimes((((user, name), started, elapsed) for user, name, started, elapsed in rows), rule)


class HistoryReader:
    """`learned_from_history`, read incrementally: each read takes only the rows imported since
    the last one (ids above the highest read) into a KeptRuns, so the placer's refresh costs
    what was imported, not the whole 90 days. Everything is read again when the rows up to that
    id are no longer the ones counted last time: some were removed (a replay or an operator may;
    the importer never does), or a concurrent import committed one under an id already passed;
    and at least every `full_every_s`, whatever happened."""

    def __init__(self, rule: RuntimeRule = RuntimeRule(), *, full_every_s: float = 3600.0) -> None:
        self.rule = rule
        self.full_every_s = full_every_s
        self._kept: KeptRuns[tuple[str, str]] = KeptRuns(rule)
        self._last_id = 0
        self._rows = 0  # rows (every state) with id <= _last_id, as counted at the last read
        self._full_at: datetime | None = None

    def _count_to_last(self, session: Session) -> int:
        return int(session.execute(select(func.count(JobHistory.id)).where(JobHistory.id <= self._last_id))
                   .scalar() or 0)

    def read(self, session: Session, now: datetime | None = None) -> Mapping[tuple[str, str], float]:
        """(user, job name) -> learned runtime in seconds, as `learned_from_history` gives it."""
        now = now or datetime.now(UTC)
        if (self._full_at is None or (now - self._full_at).total_seconds() >= self.full_every_s
                or self._count_to_last(session) != self._rows):
            self._kept, self._last_id, self._full_at = KeptRuns(self.rule), 0, now
        cutoff = self.rule.cutoff(now)
        new = session.execute(select(JobHistory.id, JobHistory.user, JobHistory.name, JobHistory.started_at,
                                     JobHistory.elapsed_s)
                              .where(JobHistory.id > self._last_id, JobHistory.state.in_(sorted(LEARNED_STATES)),
                                     JobHistory.started_at >= cutoff)
                              .order_by(JobHistory.id)).all()
        self._kept.add(((user, name), started, elapsed) for _id, user, name, started, elapsed in new)
        if new:
            self._last_id = int(new[-1][0])
        self._rows = self._count_to_last(session)
        return self._kept.learned(cutoff)


def learned_runtimes_all(session: Session, rule: RuntimeRule = RuntimeRule(),
                         now: datetime | None = None, reader: HistoryReader | None = None) -> LearnedRuntimes:
    """Everything the placer estimates from: by fingerprint (job profiles) and by user + name
    (the imported sacct history, through `reader` when one is kept between calls), on the same rule."""
    return LearnedRuntimes(
        by_fingerprint=learned_runtimes(session, min_jobs=rule.min_jobs, history=rule.history,
                                        quantile=rule.quantile, max_age_days=rule.max_age_days, now=now),
        by_name=reader.read(session, now) if reader is not None else learned_from_history(session, rule, now))
