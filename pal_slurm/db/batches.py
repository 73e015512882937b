"""Long lists of keys in bounded chunks: an `IN (...)` of every key of a large import would pass
the database's limit on bound parameters (SQLite's is the lowest), so every such query runs once
per chunk."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["CHUNK", "chunks"]

#: keys per query
CHUNK = 500


def chunks(items: Sequence[Any], size: int = CHUNK) -> Iterable[Sequence[Any]]:
    """`items` in consecutive slices of at most `size`."""
    for i in range(0, len(items), size):
        yield items[i : i + size]
