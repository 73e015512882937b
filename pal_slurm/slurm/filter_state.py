"""The Lua table file the placer publishes and job_submit.lua reads (format 1).

Why a file and not a socket: job_submit.lua runs inside slurmctld and must never block it;
reading a small local file (sandboxed, cached for 2 s by the filter) is cheap and fails
safe. The file carries the daemon's heartbeat, so a dead daemon stops the filter from
holding jobs within `stale_after` seconds, with nobody having to notice.
Contract: docs/admin-guide.md ("The filter state file", under job_submit.lua). `hold_s` (optional,
the filter's default 90) is how far ahead the filter sets a held job's begin time;
`unheld_classes` (optional) lists job classes the filter leaves to Slurm.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pal_slurm.atomic_write import write_atomically

FORMAT = 1
MODES = ("observe", "enforce")
RULE_KEYS = ("user", "name", "account", "partition", "class", "id")


def lua_string(value: str) -> str:
    """A Lua 5.1 string literal for any text: quotes, backslashes, newlines, control bytes
    and non-ASCII are escaped as decimal byte escapes, so nothing in a user or job name can
    end the string or the table."""
    out = ['"']
    for byte in value.encode("utf-8"):
        ch = chr(byte)
        if ch.isascii() and ch.isprintable() and ch not in '"\\':
            out.append(ch)
        else:
            out.append(f"\\{byte:03d}")
    out.append('"')
    return "".join(out)


@dataclass(frozen=True)
class FilterState:
    mode: str
    heartbeat: int
    stale_after: int
    models: tuple[str, ...] = ()
    rules: tuple[Mapping[str, Any], ...] = field(default_factory=tuple)
    hold_s: int = 90
    #: job classes the filter does not hold: the policy would give them Slurm's own first
    #: fit (their GPUs all lie within the noise), so a hold would only add latency
    unheld_classes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {self.mode!r}")
        if not 1 <= int(self.hold_s) <= 86400:
            raise ValueError(f"hold_s must be 1..86400 seconds, not {self.hold_s!r}")


def render(state: FilterState) -> str:
    lines = ["-- written by pal placer; do not edit (pal-slurm filter state, format 1)", "return {",
             f"  format = {FORMAT},", f"  mode = {lua_string(state.mode)},",
             f"  heartbeat = {int(state.heartbeat)},", f"  stale_after = {int(state.stale_after)},",
             f"  hold_s = {int(state.hold_s)},",
             "  models = { " + ", ".join(lua_string(m) for m in state.models) + " },",
             "  unheld_classes = { " + ", ".join(lua_string(c) for c in state.unheld_classes) + " },", "  rules = {"]
    for rule in state.rules:
        parts = []
        for key in RULE_KEYS:
            value = rule.get(key)
            if value is None or value == "":
                continue
            lua_key = '["class"]' if key == "class" else key
            parts.append(f"{lua_key} = {lua_string(str(value))}")
        lines.append("    { " + ", ".join(parts) + " },")
    lines += ["  },", "}", ""]
    return "\n".join(lines)


def write(path: str | os.PathLike[str], state: FilterState) -> None:
    """Atomically replace the file, mode 0644 (slurmctld reads it while the placer rewrites it).
    Not synced to disk: the next cycle rewrites it, and until then its stale heartbeat makes
    the filter hold nothing."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(target, render(state), encoding="ascii", mode=0o644, durable=False)


def rules_from(entries: Sequence[Mapping[str, Any]]) -> tuple[Mapping[str, Any], ...]:
    """Keep only the keys the filter reads; drop entries without a class."""
    return tuple({k: e.get(k) for k in RULE_KEYS if e.get(k) not in (None, "")} for e in entries if e.get("class"))


def _read_head(path: str | os.PathLike[str]) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as fh:
            return fh.read(65536)
    except OSError:
        return None


def read_models(path: str | os.PathLike[str]) -> tuple[str, ...]:
    """The GPU models a filter state file lists (what a placer restarting without nodes yet
    republishes, so bare model requests keep working); () when unreadable."""
    import re

    text = _read_head(path)
    m = re.search(r"models\s*=\s*\{([^}]*)\}", text or "")
    if not m:
        return ()
    return tuple(re.findall(r'"([A-Za-z0-9_.-]+)"', m.group(1)))


def heartbeat_age(path: str | os.PathLike[str], now: float | None = None) -> float | None:
    """Seconds since the heartbeat in the filter state file; None when unreadable or zero."""
    import re
    import time

    m = re.search(r"heartbeat\s*=\s*(\d+)", _read_head(path) or "")
    if not m or int(m.group(1)) == 0:
        return None
    return (time.time() if now is None else now) - int(m.group(1))
