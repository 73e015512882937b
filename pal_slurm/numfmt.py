"""THE way a report number becomes text, shared by every renderer (terminal, HTML, demo, actions),
and the way a data string becomes a plot label."""

from __future__ import annotations

import math
from typing import Any

#: Digits every report shows for PerfVar and slowdown factors.
DIGITS = 3


def fmt_num(value: Any, digits: int = DIGITS, none: str = "-") -> str:
    """A number as text, rounded once, from the stored value.

    Every renderer calls this, so 1.12047 reads 1.120 everywhere; rounding an already
    rounded value (1.12047 -> 1.1205 -> 1.121) is what made the terminal and the HTML
    disagree. JSON carries the stored value itself. A value no measurement can have
    (non-finite, or a million and more) is shown in a few characters, never 300 digits.
    """
    if value is None:
        return none
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return str(value)
    if not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if abs(value) >= 1e6:
        return f"{value:.{digits}g}"
    return f"{value:.{digits}f}"


def mpl_text(s: Any, limit: int = 40) -> str:
    """A data string (a model, benchmark, trace or policy name) made safe for a matplotlib label:
    no mathtext (a `$` would be parsed, and a stray one raises), printable, bounded length."""
    text = "".join(ch if ch.isprintable() else "?" for ch in str(s))
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return text.replace("$", r"\$")
