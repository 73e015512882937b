"""The filter state file the placer publishes and job_submit.lua reads (format 2).

Why a file and not a socket: job_submit.lua runs inside slurmctld and must never block it;
reading a small local file (cached for 2 s by the filter) is cheap and fails safe. The file
carries the daemon's heartbeat, so a dead daemon stops the filter from holding jobs within
`stale_after` seconds, with nobody having to notice.

Why lines of data and not a Lua table: format 1 was a Lua chunk the filter ran in an empty
environment under an instruction hook, and even there a chunk reaches the string library
through the string metatable (a `string.rep` that allocates most of a GiB inside slurmctld, a
backtracking `gsub` that runs for minutes in one C call no hook interrupts). Format 2 is read
with plain string finds, in time linear in its size and within the limits below, whatever it
holds:

    # pal-slurm filter state (format 2); written by pal placer; do not edit
    format 2
    mode enforce
    heartbeat 1765000000
    stale_after 30
    hold_s 600
    wake 1
    model v100
    unheld A
    rule id=3 user=alice name=train%20job class=B

`format 2` is the first line that is not a comment; every value is percent-encoded (each byte
outside `[A-Za-z0-9._-]` as %XX), so no user or job name can end a field or a line; unknown
keys are skipped by the filter. `wake 1` tells the filter to poke the wake-up file, whose path
it computes itself (pal_slurm.placer.wake.default_path), so the file cannot point slurmctld at
another one. Contract: docs/admin-guide.md ("The filter state file", under job_submit.lua).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote_to_bytes

from pal_slurm.atomic_write import write_atomically

log = logging.getLogger(__name__)

FORMAT = 2
HEADER = f"# pal-slurm filter state (format {FORMAT}); written by pal placer; do not edit"
MODES = ("observe", "enforce")
#: the rule fields the filter reads, in the order they are written (the id first: it names the rule)
RULE_KEYS = ("id", "user", "name", "account", "partition", "class")

# The filter's limits (job_submit.lua, pal.STATE_MAX_*; tests/slurm_adapter/test_lua_filter.py checks they
# agree): the writer stays within them, so the filter never refuses a file the placer wrote.
MAX_BYTES = 4 * 1024 * 1024
#: bytes in one line, without its line end
MAX_LINE = 8192
#: lines in all (the writer's settings, models, unheld classes and rules at their caps stay
#: within it, so the writer counts no lines)
MAX_LINES = 20000
MAX_RULES = 10000
#: `model` lines, and `unheld` lines
MAX_MODELS = 1000

_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")
#: a plain integer as the filter reads one (at most 15 characters: exact in a Lua number)
_INTEGER = re.compile(r"(?=.{1,15}$)-?[0-9]+")


def encode(value: str) -> str:
    """A value as the filter decodes it: UTF-8, each byte outside `[A-Za-z0-9._-]` as %XX."""
    return "".join(chr(b) if b in _SAFE else f"%{b:02X}" for b in value.encode("utf-8"))


def decode(value: str) -> str:
    """The text of an encoded value (what `encode` wrote; bytes that are not UTF-8 replaced)."""
    return unquote_to_bytes(value).decode("utf-8", errors="replace")


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
    #: whether the filter pokes the placer's wake-up file (pal_slurm.placer.wake) when it
    #: holds a job, so the placer places it at once; the path is fixed, never written here
    wake: bool = False

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {self.mode!r}")
        if not 1 <= int(self.hold_s) <= 86400:
            raise ValueError(f"hold_s must be 1..86400 seconds, not {self.hold_s!r}")


def render(state: FilterState) -> str:
    """The file's text; lines beyond the filter's limits are left out (see `write`)."""
    return _render(state)[0]


def _render(state: FilterState) -> tuple[str, int]:
    """(text, how many model, unheld or rule lines were left out to stay within the limits).

    Rules come most specific first and the filter takes the first that matches, so when some
    must go, the last go: a job they would have matched gets a broader rule or none."""
    lines = [HEADER, f"format {FORMAT}", f"mode {state.mode}", f"heartbeat {int(state.heartbeat)}",
             f"stale_after {int(state.stale_after)}", f"hold_s {int(state.hold_s)}",
             *(["wake 1"] if state.wake else [])]
    size = sum(len(line) + 1 for line in lines)
    left_out = 0
    groups = (("model", [encode(m) for m in state.models if m], MAX_MODELS),
              ("unheld", [encode(c) for c in state.unheld_classes if c], MAX_MODELS),
              ("rule", [_rule_fields(r) for r in state.rules], MAX_RULES))
    for key, values, cap in groups:
        taken = 0
        for value in values:
            line = f"{key} {value}"
            if taken >= cap or len(line) > MAX_LINE or size + len(line) + 1 > MAX_BYTES:
                left_out += 1
                continue
            lines.append(line)
            size += len(line) + 1
            taken += 1
    return "\n".join(lines) + "\n", left_out


def _rule_fields(rule: Mapping[str, Any]) -> str:
    return " ".join(f"{key}={encode(str(rule[key]))}" for key in RULE_KEYS if rule.get(key) not in (None, ""))


#: the count of lines left out that was last logged (a cycle rewrites the file every few seconds)
_left_out_logged = 0


def write(path: str | os.PathLike[str], state: FilterState) -> None:
    """Atomically replace the file, mode 0640 (slurmctld reads it while the placer rewrites it).

    Readable by the owner and the group only: slurmctld reads it as SlurmUser, which is the
    placer's own user in the recommended setup. A placer running as root gives the file the
    directory's group (best effort), so a `root:slurm 0750` state directory lets SlurmUser
    read it. Not synced to disk: the next cycle rewrites it, and until then its stale
    heartbeat makes the filter hold nothing."""
    global _left_out_logged
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    text, left_out = _render(state)
    if left_out != _left_out_logged:
        if left_out:
            log.warning("%d model, class or rule line(s) left out of the filter state %s: the filter reads at most "
                        "%d rules, %d models, %d-byte lines and %d bytes", left_out, target, MAX_RULES, MAX_MODELS,
                        MAX_LINE, MAX_BYTES)
        _left_out_logged = left_out
    write_atomically(target, text, encoding="ascii", mode=0o640, durable=False, group=_directory_group(target.parent))


def _directory_group(directory: Path) -> int | None:
    """The group a root placer gives the file: the directory's (None when not root or unknown)."""
    if os.geteuid() != 0:
        return None
    try:
        return os.stat(directory).st_gid
    except OSError:
        return None


def rules_from(entries: Sequence[Mapping[str, Any]]) -> tuple[Mapping[str, Any], ...]:
    """Keep only the keys the filter reads; drop entries without a class."""
    return tuple({k: e.get(k) for k in RULE_KEYS if e.get(k) not in (None, "")} for e in entries if e.get("class"))


def _read(path: str | os.PathLike[str]) -> str | None:
    """The file's text as the filter reads it: line ends as they are (a lone CR ends no line),
    and None for a file the filter refuses for its size (it then holds nothing: no heartbeat)."""
    try:
        with open(path, encoding="ascii", errors="replace", newline="") as fh:
            text = fh.read(MAX_BYTES + 1)
    except OSError:
        return None
    return None if len(text) > MAX_BYTES else text


def _pairs(text: str) -> Iterator[tuple[str, str]]:
    """The `key value` lines after `format 2`, as the filter splits them; none when the
    file is of another format (a state file of an older placer)."""
    format_seen = False
    for raw in text.split("\n"):
        line = raw[:-1] if raw.endswith("\r") else raw
        if not line or line.startswith("#"):
            continue
        key, _, value = line.partition(" ")
        if not format_seen:
            if (key, value) != ("format", str(FORMAT)):
                return
            format_seen = True
            continue
        yield key, value


def read_models(path: str | os.PathLike[str]) -> tuple[str, ...]:
    """The GPU models a filter state file lists (what a placer restarting without nodes yet
    republishes, so bare model requests keep working); () when unreadable."""
    text = _read(path)
    if text is None:
        return ()
    return tuple(m for key, value in _pairs(text) if key == "model" and (m := decode(value)))


def heartbeat_age(path: str | os.PathLike[str], now: float | None = None) -> float | None:
    """Seconds since the heartbeat in the filter state file; None when unreadable or zero."""
    import time

    text = _read(path)
    if text is None:
        return None
    beat = 0
    for key, value in _pairs(text):
        if key == "heartbeat":
            beat = int(value) if _INTEGER.fullmatch(value) else 0
    if beat == 0:
        return None
    return (time.time() if now is None else now) - beat


def published_mode(path: str | os.PathLike[str]) -> str | None:
    """The mode a filter state file publishes, as the filter reads it (anything but enforce is
    observe; None when unreadable or of another format): what a test waits for before it submits."""
    text = _read(path)
    if text is None:
        return None
    found = None
    for key, value in _pairs(text):
        if key == "mode":
            found = "enforce" if decode(value) == "enforce" else "observe"
    return found
