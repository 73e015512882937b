"""Database writes that wait for the database: a bounded queue and a retry schedule.

The agent must keep sampling when the database is down (restarting, network cut, full
disk). Finished job profiles and GPU flags wait here; when the queue is full the oldest
item is dropped and counted (the count is a metric), so memory stays bounded however
long the outage. Retries back off exponentially (1 s, 2 s, 4 s .. `max_delay_s`) and
start over at the first success. Thread-safe: the sampling loop puts, the writer takes.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["Backoff", "PendingQueue"]

T = TypeVar("T")


class PendingQueue(Generic[T]):
    """At most `maxlen` items; putting into a full queue drops the oldest and counts it."""

    def __init__(self, maxlen: int) -> None:
        if maxlen < 1:
            raise ValueError("maxlen must be >= 1")
        self.maxlen = maxlen
        self._items: deque[T] = deque()
        self._lock = threading.Lock()
        self.dropped = 0

    def put(self, item: T) -> None:
        with self._lock:
            self._items.append(item)
            self._trim()

    def _trim(self) -> None:
        while len(self._items) > self.maxlen:
            self._items.popleft()
            self.dropped += 1

    def take(self, limit: int) -> list[T]:
        """Remove and return up to `limit` oldest items (the writer gives them back on failure)."""
        with self._lock:
            return [self._items.popleft() for _ in range(min(limit, len(self._items)))]

    def give_back(self, items: Sequence[T]) -> None:
        """Put a failed batch back at the front, in order; what no longer fits is dropped (oldest first)."""
        with self._lock:
            self._items.extendleft(reversed(items))
            self._trim()

    def snapshot(self) -> list[T]:
        with self._lock:
            return list(self._items)

    def extend(self, items: Iterable[T]) -> None:
        with self._lock:
            self._items.extend(items)
            self._trim()

    def __len__(self) -> int:
        return len(self._items)


@dataclass
class Backoff:
    """When the next attempt may run: `min_delay_s` doubling up to `max_delay_s` after failures."""

    min_delay_s: float = 1.0
    max_delay_s: float = 300.0
    failures: int = 0
    next_at: float = 0.0

    def ready(self, now: float) -> bool:
        return now >= self.next_at

    def failed(self, now: float) -> float:
        """Record a failure at `now`; returns the delay before the next attempt."""
        self.failures += 1
        delay = min(self.max_delay_s, self.min_delay_s * 2 ** min(self.failures - 1, 30))
        self.next_at = now + delay
        return delay

    def succeeded(self) -> None:
        self.failures = 0
        self.next_at = 0.0
