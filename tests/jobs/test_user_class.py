"""A class a user declares (--pal-class, a pal:class= comment) against what the site's rules or
the learned class say, under `[jobs] user_class` (pal_slurm.jobs.user_class, and the placer
that applies it: pal_slurm.placer.problem.ProblemBuilder.class_of)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from pal_slurm.config import JobsConfig
from pal_slurm.jobs.user_class import choose
from tests.support.recording_slurm import CLASSES, held, node, placer

ORDER = ("A", "B", "C", "D")  # most sensitive first


@pytest.mark.parametrize(("declared", "learned", "policy", "want"), [
    ("A", "D", "lower", "D"),   # asks for more than the rules say: refused
    ("D", "A", "lower", "D"),   # asks for less: taken
    ("B", "B", "lower", "B"),   # the same: taken
    ("A", "D", "any", "A"),     # the admin allows anything
    ("D", "A", "off", "A"),     # declarations ignored
])
def test_a_declared_class_is_taken_only_as_the_policy_allows(declared: str, learned: str, policy: str,
                                                             want: str) -> None:
    cls, src = choose(declared, "spank", (learned, "rule 3"), policy, ORDER)
    assert cls == want
    assert (src == "spank") == (cls == declared and (policy != "off" or declared == learned) and
                                (policy == "any" or declared == want))


def test_a_class_the_filter_gave_from_a_rule_is_not_a_declaration() -> None:
    assert choose("A", "rule", ("D", "default"), "off", ORDER) == ("A", "rule")


def test_the_default_policy_is_lower() -> None:
    assert JobsConfig().user_class == "lower"
    with pytest.raises(ValueError):
        JobsConfig(user_class="everything")  # type: ignore[arg-type]


def test_the_placer_places_a_self_declared_class_a_job_as_its_rules_say(tmp_path: Path) -> None:
    """Declared class A with --pal-class, the site's rules say D: placed as D, the audit says why."""
    job = replace(held("1"), admin_comment="pal:held class=A src=spank")
    p, _b = placer(tmp_path, [job], [node("n1")])
    p.problem.resolve_class = lambda j: ("D", "rule 1")
    assert p.problem.class_of(job) == ("D", "rule 1; declared A (spank) more sensitive than D")
    p.problem.user_class = "any"
    assert p.problem.class_of(job) == ("A", "spank")
    lower = replace(job, admin_comment="pal:held class=D src=comment")
    p.problem.resolve_class = lambda j: ("A", "default")
    p.problem.user_class = "lower"
    assert p.problem.class_of(lower) == ("D", "comment")
    assert CLASSES == ORDER


def test_a_held_jobs_class_is_worked_out_again_only_when_the_rules_change(tmp_path: Path) -> None:
    """The problem builder keeps each held job's class while its record and the rule table stay
    (a reload that reads an equal table counts as the same); a changed table changes the class
    in the very next cycle."""
    from pal_slurm.placer.factors import Factors

    job = replace(held("1"), admin_comment="pal:held class=B src=default")
    p, _b = placer(tmp_path, [job], [node("n1")])
    asked: list[str] = []
    table = {"class": "B"}

    def resolve(j):  # type: ignore[no-untyped-def]
        asked.append(j.job_id)
        return table["class"], "rule 1"

    p.problem.resolve_class = resolve
    p.problem.rules_snapshot = lambda: dict(table)  # a new, equal object every time, as a reload gives
    p.problem.user_class = "lower"
    factors = Factors(by_slot={}, version=1, loaded_at=0)
    built = p.problem.build([job], [job], [node("n1")], factors, 0.0)
    assert built.planned.held["1"].job_class == "B" and asked == []  # the filter's default class B: not asked
    job_a = replace(job, admin_comment="pal:held class=A src=spank")  # declared A: the rules are asked
    for _ in range(3):
        built = p.problem.build([job_a], [job_a], [node("n1")], factors, 0.0)
    assert asked == ["1"] and built.planned.held["1"].job_class == "B"  # asked once for three cycles
    table["class"] = "C"
    built = p.problem.build([job_a], [job_a], [node("n1")], factors, 0.0)
    assert asked == ["1", "1"] and built.planned.held["1"].job_class == "C"  # the rules changed: asked again


def test_a_job_the_filter_did_not_tag_keeps_the_class_its_comment_declares(tmp_path: Path) -> None:
    """Observe mode: the filter holds nothing and tags nothing, so the placer (its ledger, whose
    run times passive speed learns per class) reads a `pal:class=X` comment itself, under the same
    policy; a tag, where there is one, is what the filter read."""
    from pal_slurm.jobs.user_class import declared_in_comment

    assert [declared_in_comment(c) for c in ("pal:class=b", "x PAL:CLASS=d; y", "pal:class=", "", None,
                                             "pal:class=waytoolongname")] == ["B", "D", None, None, None, None]
    untagged = replace(held("1"), admin_comment="", comment="nightly pal:class=d")
    p, _b = placer(tmp_path, [untagged], [node("n1")])
    p.problem.resolve_class = lambda j: ("B", "rule 2")
    assert p.problem.class_of(untagged) == ("D", "comment")
    assert p.problem.class_of(replace(untagged, comment="pal:class=a")) == ("B", "rule 2; declared A (comment) "
                                                                             "more sensitive than B")
    assert p.problem.class_of(replace(untagged, comment="pal:class=nope")) == ("B", "rule 2")
    assert p.problem.class_of(replace(untagged, comment="")) == ("B", "rule 2")
    tagged = replace(untagged, admin_comment="pal:held class=C src=rule:1")
    assert p.problem.class_of(tagged) == ("C", "rule:1")
