"""The number types of every `pal` option: finite, bounded, refused with the option's name.

Why one home: click's FLOAT takes `nan` and `inf`, and its ranges let `nan` through (every
comparison with nan is false). A nan round length made `pal simulate` run two million rounds, a
nan locality penalty spun forever, an inf one printed a table of dashes with exit 0, and a
billion-GPU size ran the machine out of memory. Every float and integer option therefore takes
one of these types: a finite number inside stated bounds, or a usage error (exit 2) naming the
option, before the command starts. Durations (`--since 7d`) are bounded here too.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import click

#: sizes no site reaches; beyond them a run only exhausts memory
MAX_NODES = 100_000
MAX_GPUS_PER_NODE = 64
MAX_JOBS = 1_000_000
#: seeds as numpy and the simulators take them
MAX_SEED = 2**32 - 1
#: classification versions, rule ids, job ids: database integers
MAX_ID = 2**31 - 1
#: the oldest `--since` age: a century (beyond it datetime arithmetic overflows anyway)
MAX_AGE_DAYS = 36_500


class Real(click.FloatRange):
    """A finite float in [low, high] (either end open when asked): nan and inf are refused by
    name, whatever the bounds say; `inf_ok`: +inf too, for an option where it means "off"."""

    name = "number"

    def __init__(self, low: float, high: float, *, low_open: bool = False, high_open: bool = False,
                 inf_ok: bool = False) -> None:
        super().__init__(min=low, max=high, min_open=low_open, max_open=high_open)
        self.inf_ok = inf_ok

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = value if isinstance(value, float) else click.FLOAT.convert(value, param, ctx)
        if self.inf_ok and number == math.inf:
            return number
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return super().convert(number, param, ctx)


class Whole(click.IntRange):
    """An integer in [low, high]; a whole number written as 4.0 or 1e3 is refused (a typo)."""

    name = "integer"

    def __init__(self, low: int, high: int) -> None:
        super().__init__(min=low, max=high)


def seed() -> Whole:
    """A random seed: 0 .. 2**32-1."""
    return Whole(0, MAX_SEED)


def ident() -> Whole:
    """A database id or version number: 1 .. 2**31-1."""
    return Whole(1, MAX_ID)


_AGE = re.compile(r"(\d+)([dhms])")
_UNIT_SECONDS = {"d": 86_400, "h": 3_600, "m": 60, "s": 1}


class Since(click.ParamType):
    """`7d`, `12h`, `30m`, `90s` ago or an ISO date/time (UTC when it has no zone), at most
    MAX_AGE_DAYS back. The text itself is kept (reports show it); `cutoff` turns it into a time."""

    name = "when"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        text = str(value).strip()
        m = _AGE.fullmatch(text)
        if m:
            seconds = int(m.group(1)) * _UNIT_SECONDS[m.group(2)]
            if seconds > MAX_AGE_DAYS * 86_400:
                self.fail(f"{value!r} is more than {MAX_AGE_DAYS:,} days ago", param, ctx)
            return text
        try:
            datetime.fromisoformat(text)
        except ValueError:
            self.fail(f"{value!r} is not an age (7d, 12h, 30m, 90s) or an ISO date/time", param, ctx)
        return text


def cutoff(text: str | None, now: datetime) -> datetime | None:
    """The time a `Since` text names (None: no limit)."""
    if text is None:
        return None
    m = _AGE.fullmatch(text.strip())
    if m:
        return now - timedelta(seconds=int(m.group(1)) * _UNIT_SECONDS[m.group(2)])
    when = datetime.fromisoformat(text.strip())
    return when if when.tzinfo else when.replace(tzinfo=UTC)
