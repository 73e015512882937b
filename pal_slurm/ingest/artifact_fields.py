"""One field of a PAL artifact CSV row: numbers (with the artifact's "not measured" values) and
the start timestamp, each refused with FILE:LINE when it is not what its column holds.

Apart from the row parser (`artifact_csv`) because each rule here is about one field's text and
its quirks in the real files; the parser decides which columns it reads and what they become.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime

from pal_slurm.errors import InputError

__all__ = ["UNKNOWN_TS", "number", "optional_int", "optional_number", "refuse_negative", "start_time"]

# ts == -1 is the artifact's "unknown" sentinel (24 sgemm rows); such runs keep the Unix
# epoch as their start time, which sorts before every real measurement.
UNKNOWN_TS = datetime(1970, 1, 1, tzinfo=UTC)
# 104 bert rows have train_time values like "121.28596447600285Iteration",
# "88.75737034302438Total" or "86.57913603895577[2022-05-18": the start of the next log
# line was scraped into the field. The full-precision number in front is the value.
_LOG_TAIL = re.compile(r"([0-9]+(?:\.[0-9]*)?)[A-Za-z\[]")
_LOG_TAIL_COLUMNS = frozenset({"train_time"})


def number(column: str, raw: str, src: str, line: int) -> float:
    """A finite number; InputError otherwise."""
    try:
        value = float(raw)
    except ValueError:
        raise InputError(f"column {column!r}: {raw!r} is not a number", source=src, line=line) from None
    if not math.isfinite(value):
        raise InputError(f"column {column!r}: {raw!r} is not a finite number", source=src, line=line)
    return value


def optional_number(column: str, raw: str, src: str, line: int) -> float | None:
    """Empty, NaN and the artifact's -1 sentinel mean 'not measured' -> None."""
    text = raw.strip()
    if not text or text.lower() == "nan":
        return None
    if column in _LOG_TAIL_COLUMNS and (m := _LOG_TAIL.match(text)) is not None:
        text = m.group(1)
    value = number(column, text, src, line)
    if value == -1:
        return None
    return value


def optional_int(column: str, raw: str, src: str, line: int) -> int | None:
    """As :func:`optional_number`, and a whole number."""
    value = optional_number(column, raw, src, line)
    if value is None:
        return None
    if not value.is_integer():
        raise InputError(f"column {column!r}: {raw!r} is not an integer", source=src, line=line)
    return int(value)


def refuse_negative(column: str, value: float | None, raw: str, src: str, line: int) -> float | None:
    """`value`, refused when negative (`raw`: the field as written, for the message)."""
    if value is not None and value < 0:
        raise InputError(f"column {column!r}: must not be negative, got {raw.strip()}", source=src, line=line)
    return value


def start_time(raw: str, src: str, line: int) -> datetime:
    """The `ts` column (unix seconds) as an aware UTC time; the artifact's -1 is :data:`UNKNOWN_TS`."""
    text = raw.strip()
    if not text:
        raise InputError("column 'ts': empty", source=src, line=line)
    try:
        ts = float(text)
    except ValueError:
        raise InputError(f"column 'ts': {raw!r} is not a unix timestamp", source=src, line=line) from None
    if ts == -1:
        return UNKNOWN_TS
    if not math.isfinite(ts) or ts < 0:
        raise InputError(f"column 'ts': {raw!r} is not a valid unix timestamp", source=src, line=line)
    try:
        return datetime.fromtimestamp(ts, tz=UTC)
    except (OverflowError, OSError, ValueError):
        raise InputError(f"column 'ts': {raw!r} is out of range", source=src, line=line) from None
