"""From admin rules and learned classes to a job's class: the submit filter's rules and the daemon's lookup.

Two consumers, one source of truth:

* `filter_rules` gives the `rules` list of the filter state file (docs/admin-guide.md,
  "The filter state file"): dicts with `class`, `id` and the optional exact-match keys
  `user`, `name`, `account`, `partition` (absent = any). job_submit.lua takes the first
  match. Admin rules come first, the most specific first (more match fields set), then
  the oldest; their id is `rule-<id>`. Then the learned classes, as exact
  `{user, name}` rules with id `learned-<fingerprint>`, only for a user + job name whose
  learned fingerprints all agree on one class (the filter cannot see the command, so
  a name whose scripts disagree gets no rule and stays `auto`).
* `resolve_class` answers the placement daemon for one job, in the same order but more
  precisely: admin rule, else the class learned for the job's exact fingerprint, else
  the agreed class of its user + name, else the default (unknown jobs are treated as the
  most sensitive class, as PAL does).

`ClassRuleTable` is the preloaded form (one query per table, `pal_slurm.db.class_rules_store`)
so that the daemon can resolve a whole queue without a query per job. This module is pure: it
answers from a table its caller loaded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pal_slurm.jobs.fingerprint import fingerprint

__all__ = ["AdminRule", "ClassRuleTable", "LearnedName", "filter_rules", "resolve_class"]

MATCH_FIELDS = ("user", "name", "account", "partition")


@dataclass(frozen=True, slots=True)
class AdminRule:
    id: int
    user: str | None
    name: str | None
    account: str | None
    partition: str | None
    job_class: str
    note: str = ""

    @property
    def rule_id(self) -> str:
        return f"rule-{self.id}"

    @property
    def specificity(self) -> int:
        return sum(getattr(self, f) is not None for f in MATCH_FIELDS)

    def matches(self, user: str | None, name: str | None, account: str | None, partition: str | None) -> bool:
        wanted = (self.user, self.name, self.account, self.partition)
        return all(w is None or w == got for w, got in zip(wanted, (user, name, account, partition)))


@dataclass(frozen=True, slots=True)
class LearnedName:
    """The learned classes of one user + job name: exported only when they agree."""

    user: str
    name: str
    classes: tuple[tuple[str, str], ...]  # (fingerprint, class), sorted by fingerprint

    @property
    def agreed(self) -> str | None:
        found = {c for _fp, c in self.classes}
        return found.pop() if len(found) == 1 else None

    @property
    def rule_id(self) -> str:
        return f"learned-{self.classes[0][0]}"


@dataclass(frozen=True)
class ClassRuleTable:
    admin: tuple[AdminRule, ...]  # in export order
    by_fingerprint: dict[str, str]
    by_name: dict[tuple[str, str], LearnedName]

    @classmethod
    def build(cls, admin: Sequence[AdminRule], learned: Sequence[tuple[str, str, str, str]]) -> ClassRuleTable:
        """`learned`: (fingerprint, user, name, class) rows of job_sensitivity."""
        ordered = tuple(sorted(admin, key=lambda r: (-r.specificity, r.id)))
        by_fp = {fp: job_class for fp, _u, _n, job_class in learned}
        groups: dict[tuple[str, str], list[tuple[str, str]]] = {}
        for fp, user, name, job_class in learned:
            groups.setdefault((user, name), []).append((fp, job_class))
        by_name = {key: LearnedName(key[0], key[1], tuple(sorted(v))) for key, v in groups.items()}
        return cls(ordered, by_fp, by_name)


def filter_rules(table: ClassRuleTable) -> list[dict[str, Any]]:
    """The `rules` of the filter state file, in match order (see the module docstring)."""
    out: list[dict[str, Any]] = []
    for rule in table.admin:
        entry: dict[str, Any] = {f: getattr(rule, f) for f in MATCH_FIELDS if getattr(rule, f) is not None}
        entry["class"] = rule.job_class
        entry["id"] = rule.rule_id
        out.append(entry)
    for key in sorted(table.by_name):
        learned = table.by_name[key]
        if learned.agreed is not None:
            out.append({"user": learned.user, "name": learned.name, "class": learned.agreed, "id": learned.rule_id})
    return out


def resolve_class(table: ClassRuleTable, user: str | None, name: str | None, command: str | None,
                  account: str | None = None, partition: str | None = None, *,
                  default: str = "A") -> tuple[str, str]:
    """(class, source) for one job; source is `rule:rule-<id>`, `learned:<fingerprint>`,
    `learned-name:<fingerprint>` (the agreed class of user + name) or `default`."""
    for rule in table.admin:
        if rule.matches(user, name, account, partition):
            return rule.job_class, f"rule:{rule.rule_id}"
    fp = fingerprint(user, name, command)
    if fp in table.by_fingerprint:
        return table.by_fingerprint[fp], f"learned:{fp}"
    learned = table.by_name.get((user or "", name or ""))
    if learned is not None and learned.agreed is not None:
        return learned.agreed, f"learned-name:{learned.classes[0][0]}"
    return default, "default"

