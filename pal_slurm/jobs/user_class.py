"""Which class a job a user declared a class for is placed as (pure).

Why a rule: a user declares a class with `--pal-class` or a `pal:class=X` comment, and the
classes are ordered most sensitive first (`job_classes`, the thresholds of `[jobs]`). A job
of a more sensitive class gets the best GPUs first, so a user who declares class A for every
job would outrank the jobs that need those GPUs. `[jobs] user_class` says what a declaration
may do: `any` (taken as it is), `lower` (the default: taken only when it is no more sensitive
than what the site's rules or the learned class say; a user may say a job needs less, never
more), `off` (ignored: the rules and the learned class decide).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = ["POLICIES", "SELF_DECLARED", "choose", "declared_in_comment"]

POLICIES = ("any", "lower", "off")
#: the filter's tag sources that a user controls (job_submit.lua: the spank option, the comment)
SELF_DECLARED = frozenset({"spank", "comment"})
#: a `pal:class=X` declaration in a job's comment, as job_submit.lua's `class_hint` reads it
_COMMENT_CLASS = re.compile(r"pal:class=([^\s,;|]*)", re.IGNORECASE)


def declared_in_comment(comment: str | None) -> str | None:
    """The class a user declared in the job's comment (`pal:class=b` -> "B"), as the submit filter
    reads it; None without one. The filter writes what it read into its tag only when it holds the
    job: in observe mode (and for a job it lets pass) the comment is the declaration the placer
    still sees (a `--pal-class` SPANK option is not: Slurm shows no job's SPANK environment)."""
    m = _COMMENT_CLASS.search(comment or "")
    value = m.group(1).strip().upper() if m else ""
    return value if 0 < len(value) <= 8 else None


def choose(declared: str, src: str, learned: tuple[str, str], policy: str, order: Sequence[str]) -> tuple[str, str]:
    """(class, source) a job is placed as: `declared` (from `src`) against `learned` ((class, why)
    from the rules, the learned class or the default), under `policy`; `order` is the classes,
    most sensitive first. A declaration refused says so in the source."""
    if src not in SELF_DECLARED or policy == "any":
        return declared, src
    learned_cls, learned_src = learned
    if policy == "lower" and _rank(declared, order) >= _rank(learned_cls, order):
        return declared, src
    why = "ignored" if policy == "off" else "more sensitive than"
    return learned_cls, f"{learned_src}; declared {declared} ({src}) {why}" + (
        f" {learned_cls}" if policy == "lower" else "")


def _rank(cls: str, order: Sequence[str]) -> int:
    """Position in `order` (0: the most sensitive); an unknown class counts as the most sensitive."""
    try:
        return list(order).index(cls)
    except ValueError:
        return 0
