"""Reading a trace's rows, shared by its parsers (`traces.read_philly`, `sacct_trace.read_sacct`):
records and line numbers from the text, the checks of a number or a GPU count that name the
column, and how a bad row is reported (raised, or left out and listed). Pure: text lines in.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Iterator
from pathlib import Path

from pal_slurm.errors import InputError


class RowCollector:
    """Raise on a bad row, or record it when `skip_invalid` is set."""

    def __init__(self, source: str, skip_invalid: bool) -> None:
        self.source = source
        self.skip_invalid = skip_invalid
        self.skipped: list[tuple[int, str]] = []

    def invalid(self, line: int, reason: str) -> None:
        if not self.skip_invalid:
            raise InputError(reason, source=self.source, line=line)
        self.skipped.append((line, reason))

    def skip(self, line: int, reason: str) -> None:
        """A well-formed row that is not a job for the simulator (never an error)."""
        self.skipped.append((line, reason))


class RowError(Exception):
    """One row is invalid; the message is the reason (the parser hands it to `RowCollector.invalid`)."""


def trace_name(source: str) -> str:
    return Path(source).stem or source


def number(value: str, column: str) -> float:
    try:
        x = float(value)
    except ValueError:
        raise RowError(f"{column} {value!r} is not a number") from None
    if not math.isfinite(x):
        raise RowError(f"{column} {value!r} is not a finite number")
    return x


def gpu_count(value: str, column: str) -> int:
    x = number(value, column)
    if not x.is_integer():
        raise RowError(f"{column} {value!r} is not a whole number")
    if x < 1:
        raise RowError(f"{column} must be at least 1, got {value}")
    return int(x)


def check_cluster(num_gpus: int, max_gpus: int | None) -> None:
    if max_gpus is not None and num_gpus > max_gpus:
        raise RowError(f"job needs {num_gpus} GPUs, more than the cluster's {max_gpus}")


def read_rows(lines: Iterable[str], delimiter: str, *, quoted: bool = True) -> Iterator[tuple[int, list[str]]]:
    """(line number, fields) for each non-blank record; line numbers are physical lines.
    `quoted` False reads quote characters as text (sacct -P never quotes)."""
    reader = csv.reader(lines, delimiter=delimiter, quoting=csv.QUOTE_MINIMAL if quoted else csv.QUOTE_NONE)
    for fields in reader:
        if not fields or all(not f.strip() for f in fields):
            continue
        yield reader.line_num, [f.strip() for f in fields]
