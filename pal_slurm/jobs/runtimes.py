"""Learned runtimes: the one rule that turns past runs into a runtime estimate, and the
lookup the placer (and the replay's prediction) take an estimate from. Pure.

Two kinds of history feed it, keyed differently because they know different things:

- the agent's job profiles know a job's fingerprint (user, job name and command:
  pal_slurm.jobs.fingerprint), the most precise key;
- an `sacct -P` export (`pal jobs import-history`) knows the user and the job name but
  no command, so its runs are keyed by (user, job name).

A job's estimate is its fingerprint's learned runtime when one exists, else its
(user, name)'s from the imported history, else its time limit; never more than the limit.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import Generic, TypeVar

__all__ = ["LEARNED_STATES", "SOURCE_FINGERPRINT", "SOURCE_HISTORY", "SOURCE_LIMIT", "SOURCE_NONE", "Estimate",
           "KeptRuns", "LearnedRuntimes", "RuntimeRule", "learn_runtimes"]

K = TypeVar("K", bound=Hashable)

#: Slurm job states whose elapsed time is a runtime to learn from: COMPLETED is the job's
#: real runtime; TIMEOUT is "at least the limit" and counts as its elapsed time (which is
#: the limit, or a little over it), so jobs that keep hitting their limit keep their limit
LEARNED_STATES = frozenset({"COMPLETED", "TIMEOUT"})

SOURCE_FINGERPRINT = "learned from job profiles"
SOURCE_HISTORY = "learned from sacct history"
SOURCE_LIMIT = "time limit"
SOURCE_NONE = "unknown"

#: how long after its start + learned runtime a running job is still expected to end, not
#: overdue (seconds). Slurm's StartTime is a whole second taken when slurmctld allocates the
#: job, before slurmd launches its script (measured on the replay clusters: 0.1-0.3 s of launch
#: plus the truncation, 0.8-0.9 s in the median, up to about 1.1 s), and sacct's Elapsed, which
#: runtimes are learned from, is whole seconds. Without it a job that runs exactly its learned
#: runtime looks overdue for its last second, and its expected end jumps to its time limit:
#: reservations behind it move by the limit, and what is backfilled then can hold a waiting job
#: for hours. A job that really runs long is overdue this much later, which costs nothing.
LEARNED_END_GRACE_S = 2.0


@dataclass(frozen=True)
class RuntimeRule:
    """How past runs become an estimate: the `quantile` of the newest `history` runs of a key,
    only for keys with at least `min_jobs` of them, only runs of the last `max_age_days`.

    A high quantile because the estimate is used like a time limit (backfilling trusts it
    not to run longer), only tighter: the placer never uses more than the job's limit."""

    min_jobs: int = 3
    history: int = 20
    quantile: float = 0.9
    max_age_days: float = 90.0

    def __post_init__(self) -> None:
        if self.min_jobs < 1 or self.history < 1:
            raise ValueError(f"min_jobs and history must be at least 1, got {self.min_jobs}, {self.history}")
        if not 0.0 <= self.quantile <= 1.0:
            raise ValueError(f"quantile must lie in [0, 1], got {self.quantile}")

    def cutoff(self, now: datetime) -> datetime:
        """The oldest start that still counts (what the stores select from)."""
        return now - timedelta(days=self.max_age_days)


def learn_runtimes(runs: Iterable[tuple[K, datetime, float]], rule: RuntimeRule = RuntimeRule()) -> dict[K, float]:
    """key -> runtime estimate in seconds, from (key, start, runtime seconds) runs, one per job.

    The runs are taken as given (the caller selects them by age and state); ties in start
    keep the input order."""
    by_key: dict[K, list[tuple[datetime, float]]] = {}
    for key, started, seconds in runs:
        by_key.setdefault(key, []).append((started, float(seconds)))
    out: dict[K, float] = {}
    for key, mine in by_key.items():
        value = _estimate(_newest(mine, rule), rule)
        if value is not None:
            out[key] = value
    return out


R = TypeVar("R", bound=tuple)


def _newest(runs: list[R], rule: RuntimeRule) -> list[R]:
    """The newest `rule.history` of (start, ...) runs; ties in start keep the list's order."""
    return sorted(runs, key=lambda r: r[0], reverse=True)[:rule.history]


def _estimate(newest: list[R], rule: RuntimeRule) -> float | None:
    """The rule's quantile of the runtimes (last field) of a key's newest runs; None when too few."""
    if len(newest) < rule.min_jobs:
        return None
    durations = sorted(r[-1] for r in newest)
    return float(durations[min(len(durations) - 1, int(rule.quantile * len(durations)))])


class KeptRuns(Generic[K]):
    """`learn_runtimes` for a reader that adds runs over time: each key keeps only its newest
    `rule.history` runs, and only keys that gained a run or lost one to age are learned again.
    Why: the placer re-reads the imported history every refresh, and a busy site's 90 days are
    hundreds of thousands of rows; re-learning all of them each time cost about 1 s per 100,000
    (SQLite, this project's 2-core machine), on the placer's cycle.

    `learned(cutoff)` equals `learn_runtimes` on every run added so far that started at or
    after `cutoff` (cutoffs only move forward: a run older than one is dropped for good)."""

    def __init__(self, rule: RuntimeRule = RuntimeRule()) -> None:
        self.rule = rule
        self._runs: dict[K, list[tuple[datetime, float]]] = {}
        self._values: dict[K, float] = {}
        self._oldest: dict[K, datetime] = {}
        self._dirty: set[K] = set()

    def add(self, runs: Iterable[tuple[K, datetime, float]]) -> None:
        """Runs (key, start, runtime seconds) in the order `learn_runtimes` would see them."""
        for key, started, seconds in runs:
            self._runs.setdefault(key, []).append((started, float(seconds)))
            self._dirty.add(key)

    def learned(self, cutoff: datetime) -> Mapping[K, float]:
        """key -> runtime estimate, from the runs since `cutoff` (a read-only view)."""
        aged = {k for k, oldest in self._oldest.items() if oldest < cutoff}
        for key in self._dirty | aged:
            newest = [r for r in _newest(self._runs[key], self.rule) if r[0] >= cutoff]
            newest.sort(key=lambda r: r[0])  # stable: runs of the same start stay in the order added
            if newest:
                self._runs[key] = newest
                self._oldest[key] = newest[0][0]
            else:
                self._runs.pop(key, None)
                self._oldest.pop(key, None)
            value = _estimate(newest, self.rule)
            if value is None:
                self._values.pop(key, None)
            else:
                self._values[key] = value
        self._dirty.clear()
        return MappingProxyType(self._values)


@dataclass(frozen=True)
class Estimate:
    """A runtime estimate in seconds and where it came from (one of the SOURCE_* strings)."""

    seconds: float
    source: str


@dataclass(frozen=True)
class LearnedRuntimes:
    """What was learned: by fingerprint (job profiles) and by (user, job name) (sacct history)."""

    by_fingerprint: Mapping[str, float] = field(default_factory=dict)
    by_name: Mapping[tuple[str, str], float] = field(default_factory=dict)

    @classmethod
    def of(cls, learned: LearnedRuntimes | Mapping[str, float] | None) -> LearnedRuntimes:
        """`learned` as LearnedRuntimes (a plain mapping is fingerprint -> seconds)."""
        if learned is None:
            return cls()
        if isinstance(learned, LearnedRuntimes):
            return learned
        return cls(by_fingerprint=learned)

    def __bool__(self) -> bool:
        return bool(self.by_fingerprint) or bool(self.by_name)

    def learned(self, fingerprint: str, user: str, name: str) -> Estimate | None:
        """The learned runtime of a job (fingerprint first, then user + name), or None."""
        mine = self.by_fingerprint.get(fingerprint) if self.by_fingerprint else None
        if mine is not None and mine > 0:
            return Estimate(mine, SOURCE_FINGERPRINT)
        mine = self.by_name.get((user, name)) if self.by_name else None
        if mine is not None and mine > 0:
            return Estimate(mine, SOURCE_HISTORY)
        return None

    def estimate(self, fingerprint: str, user: str, name: str, limit_s: float | None) -> Estimate:
        """The placer's estimate: learned (never more than the limit), else the limit, else 0."""
        found = self.learned(fingerprint, user, name)
        if found is not None:
            if limit_s and found.seconds >= limit_s:
                return Estimate(limit_s, SOURCE_LIMIT)
            return found
        if limit_s:
            return Estimate(limit_s, SOURCE_LIMIT)
        return Estimate(0.0, SOURCE_NONE)
