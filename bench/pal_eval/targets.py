"""The one way a benchmark here says whether it met its targets.

Every bench/*.py that states a target prints one line per target, with the figure compared and
the bound, and exits non-zero when any is missed:

    target met: median cycle 0.826 s < 1 s
    TARGET MISSED: median cycle 1.31 s >= 1 s

`Targets.exit_status()` is 1 when a target was missed, else 0 (`make bench` stops on it);
usage errors and missing inputs keep their own status (2).
"""

from __future__ import annotations

import operator
from collections.abc import Callable

#: the comparison a target asks for, and how a miss reads
_OPS: dict[str, tuple[Callable[[float, float], bool], str]] = {
    "<": (operator.lt, ">="), "<=": (operator.le, ">"), ">": (operator.gt, "<="), ">=": (operator.ge, "<"),
}

MET = "target met:"
MISSED = "TARGET MISSED:"


def _num(value: float, digits: int, bound: float) -> str:
    """`value` with up to `digits` decimals, more where fewer would read as 0 or as the bound."""
    for d in range(digits, 10):
        text = f"{value:.{d}f}"
        if (float(text) != 0 or value == 0) and (float(text) != bound or value == bound):
            break
    return text.rstrip("0").rstrip(".") if "." in text else text


class Targets:
    """The targets one benchmark run checked: met or missed, each printed as it is checked."""

    def __init__(self) -> None:
        self.missed: list[str] = []
        self.met: list[str] = []

    def check(self, what: str, value: float, op: str, bound: float, unit: str = "", *, digits: int = 3) -> bool:
        """`what` `value` `op` `bound` (`unit`): e.g. check("median cycle", 0.83, "<", 1, "s"); the
        figure with up to `digits` decimals, the bound as given."""
        test, miss = _OPS[op]
        ok = bool(test(value, bound))
        sep = " " if unit else ""
        fig = f"{_num(value, digits, bound)}{sep}{unit}"
        lim = f"{bound:g}{sep}{unit}"
        return self.state(ok, f"{what} {fig} {op if ok else miss} {lim}")

    def state(self, ok: bool, text: str) -> bool:
        """A target that is not one number against a bound: `text` says what was found."""
        print(f"{MET if ok else MISSED} {text}", flush=True)
        (self.met if ok else self.missed).append(text)
        return ok

    def exit_status(self) -> int:
        return 1 if self.missed else 0
