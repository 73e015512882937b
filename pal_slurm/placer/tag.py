"""The one admin-comment tag pal-slurm puts on a job: a typed record, rendered and parsed here only.

Why one typed tag: the tag is the only place a job carries what the placer is doing to it.
A placer that dies between two `scontrol update` calls, a fail-safe run, a restarted placer
and `pal placer release-stale` all learn from it what the user asked for and what the placer
meant to set, so each of them can finish or undo a change half done. Built in one place, it
is written and read one way; the user's request in it is never cut.

Format (one line; the filter's `pal:held class=X src=Y | <site comment>` is a valid tag):

    <head> class=A src=spank was=tres_per_node:gres:gpu:2 set=gres:gpu:v100_g0:1 on=n1 ...: <note> | <site>

- `head` says what state the job is in: `pal:held` (held by pal: the filter's tag; with
  `set=`/`on=` the placer is changing its request), `pal: placed`, `pal: released unchanged`,
  `pal: released restored`.
- `was=FIELD:VALUE` (one per GPU field the user's job had, and its node list): the user's
  request, recorded before the placer first changes the job.
- `set=`/`on=`: the per-slot request and node list the placer sets (its intent).
- after `: ` a free-text note (why a job was released), after ` | ` the site's own admin comment,
  kept as it was before pal-slurm tagged the job.

Longer than `MAX_LEN`, fields are dropped in `TRUNCATION` order (least needed first); the
head, class, the user's request and the intent are never dropped: a tag that cannot hold them
is refused (`TagTooLong`), and the placer then leaves the job as its user submitted it.
Tags written by earlier releases (`... was tres_per_node gres:gpu:2` at the end) still parse.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from functools import lru_cache

from pal_slurm.slurm.model import GpuRequestField

HELD = "pal:held"
PLACED = "pal: placed"
RELEASED_UNCHANGED = "pal: released unchanged"
RELEASED_RESTORED = "pal: released restored"
#: longest first, so `pal: released unchanged` is not read as a shorter head
HEADS = (RELEASED_UNCHANGED, RELEASED_RESTORED, PLACED, HELD)

#: the bound the placer keeps an admin comment within: one line `squeue -O admin_comment` and
#: `scontrol show job` show whole, far inside what slurmctld and slurmdbd store
MAX_LEN = 900
#: the job fields a user's request is recorded from (Slurm's update key for each)
REQUEST_KEYS = {**{f.value: f.scontrol_key for f in GpuRequestField}, "required_nodes": "NodeList"}
#: optional fields, dropped in this order until the tag fits (`note` and `site` are cut, not
#: dropped, before the fields after them go)
TRUNCATION = ("sf", "gpus", "policy", "version", "note", "site", "src", "at")

_SITE_SEP = " | "
_NOTE_SEP = ": "
_LEGACY_WAS = re.compile(r"(?:^|\s)was (?P<field>tres_per_(?:node|job)) (?P<value>\S*)\s*$")
_VERSION = re.compile(r"v(\d+)")
_ELLIPSIS = "..."


class TagTooLong(ValueError):
    """The parts of a tag that may not be dropped do not fit in MAX_LEN."""


@dataclass(frozen=True)
class Tag:
    """What pal-slurm knows about one job, as its admin comment carries it."""

    head: str
    job_class: str = ""
    src: str = ""
    #: the user's request: (job field, value) for each of REQUEST_KEYS the job had, in that order
    was: tuple[tuple[str, str], ...] = ()
    #: the placer's intent: the per-slot TresPerNode it sets, and the NodeList
    intent: str = ""
    nodes: str = ""
    gpus: str = ""
    sf: str = ""
    policy: str = ""
    version: int | None = None
    at: int | None = None
    note: str = ""
    site: str = ""
    extra: tuple[str, ...] = field(default=(), compare=False)

    # -- what the tag says ------------------------------------------------------------------
    @property
    def held(self) -> bool:
        return self.head == HELD

    @property
    def placed(self) -> bool:
        return self.head == PLACED

    @property
    def placing(self) -> bool:
        """Held with an intent: the placer is changing (or has changed) the job's request."""
        return self.held and bool(self.intent)

    def user_request(self) -> dict[str, str] | None:
        """The user's request (job field -> value, every REQUEST_KEYS field, "" where the job
        had none); None when it was never recorded (the placer has not changed the job)."""
        if not self.was:
            return None
        got = dict(self.was)
        return {f: got.get(f, "") for f in REQUEST_KEYS}

    # -- text -------------------------------------------------------------------------------
    def render(self, limit: int = MAX_LEN) -> str:
        """The admin comment; fields dropped in TRUNCATION order while it is longer than
        `limit`. TagTooLong when even the head, class, request and intent do not fit."""
        tag = self
        for name in TRUNCATION:
            text = tag._text()
            if len(text) <= limit:
                return text
            if name in ("note", "site"):
                keep = len(getattr(tag, name)) - (len(text) - limit) - len(_ELLIPSIS)
                value = getattr(tag, name)[:keep] + _ELLIPSIS if keep > 0 else ""
                tag = replace(tag, **{name: value})
                if len(tag._text()) <= limit:
                    return tag._text()
            tag = replace(tag, **{name: None if name in ("version", "at") else ""})
        text = tag._text()
        if len(text) > limit:
            raise TagTooLong(f"the tag needs {len(text)} characters for the user's request and the placement, "
                             f"more than {limit}")
        return text

    def _text(self) -> str:
        parts = [self.head]
        if self.job_class:
            parts.append(f"class={self.job_class}")
        if self.src:
            parts.append(f"src={self.src}")
        parts += [f"was={f}:{v}" for f, v in self.was]
        for key, value in (("set", self.intent), ("on", self.nodes), ("gpus", self.gpus), ("sf", self.sf),
                           ("policy", self.policy)):
            if value:
                parts.append(f"{key}={value}")
        if self.version is not None:
            parts.append(f"v{self.version}")
        if self.at is not None:
            parts.append(f"at={self.at}")
        text = " ".join(parts)
        if self.note:
            text += _NOTE_SEP + _clean(self.note)
        if self.site:
            text += _SITE_SEP + self.site
        return text

    @classmethod
    def parse(cls, text: str | None) -> Tag | None:
        """The tag in an admin comment, None when the comment is not pal-slurm's. (A Tag is
        immutable and a comment parses the same every time: each cycle asks for every held
        job's tag several times, so the parsed tags are kept.)"""
        return _parse_tag(text or "") if cls is Tag else cls._parse(text or "")

    @classmethod
    def _parse(cls, text: str) -> Tag | None:
        head = next((h for h in HEADS if text.startswith(h) and text[len(h):len(h) + 1] in ("", " ", ":")), None)
        if head is None:
            return None
        body, _sep, site = text[len(head):].partition(_SITE_SEP)
        if body.startswith(":"):
            fields_text, note = "", body[1:].strip()
        else:
            fields_text, _sep, note = body.partition(_NOTE_SEP)
        values: dict[str, str] = {}
        was: list[tuple[str, str]] = []
        extra: list[str] = []
        version: int | None = None
        tokens = fields_text.split()
        i = 0
        while i < len(tokens):
            tok = tokens[i]
            if tok == "was" and i + 1 < len(tokens) and tokens[i + 1] in REQUEST_KEYS:  # an earlier release's
                was.append((tokens[i + 1], tokens[i + 2] if i + 2 < len(tokens) else ""))
                i += 3
                continue
            key, eq, value = tok.partition("=")
            if eq and key == "was":
                fld, _c, val = value.partition(":")
                if fld in REQUEST_KEYS:
                    was.append((fld, val))
            elif eq and key in ("class", "src", "set", "on", "gpus", "sf", "policy", "at"):
                values.setdefault(key, value)
            elif (m := _VERSION.fullmatch(tok)) and version is None:
                version = int(m.group(1))
            else:
                extra.append(tok)
            i += 1
        if not was and (m := _LEGACY_WAS.search(note)):
            was.append((m.group("field"), m.group("value")))
            note = note[:m.start()].rstrip()
        at = values.get("at", "")
        return cls(head=head, job_class=values.get("class", ""), src=values.get("src", ""), was=tuple(was),
                   intent=values.get("set", ""), nodes=values.get("on", ""), gpus=values.get("gpus", ""),
                   sf=values.get("sf", ""), policy=values.get("policy", ""), version=version,
                   at=int(at) if at.isdigit() else None, note=note, site=site, extra=tuple(extra))


@lru_cache(maxsize=16384)  # held jobs share a few tags; a placed job's is its own (up to 900 characters)
def _parse_tag(text: str) -> Tag | None:
    return Tag._parse(text)


def site_comment(text: str | None) -> str:
    """The site's own admin comment in `text`: beside a pal-slurm tag, or the whole comment
    when it carries none (a job pal-slurm never tagged)."""
    tag = Tag.parse(text)
    return (text or "") if tag is None else tag.site


def _clean(note: str) -> str:
    """A note on one line, without the separator of the site's comment."""
    return " ".join(note.replace("|", "/").split())


__all__ = ["HEADS", "HELD", "MAX_LEN", "PLACED", "RELEASED_RESTORED", "RELEASED_UNCHANGED", "REQUEST_KEYS",
           "TRUNCATION", "Tag", "TagTooLong", "site_comment"]
