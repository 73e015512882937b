"""Pal's marks on a job (pal_slurm/placer/holds.py), on the cases the rest of the suite leaves
open (each found by `make mutation`): what an untagged or sparse tag says, and how long a job
released to Slurm's own first fit keeps the placer waiting."""

from __future__ import annotations

from pal_slurm.placer import holds
from pal_slurm.placer.tag import PLACED, Tag
from tests.support.steering import NOW, job


def test_a_job_without_a_tag_or_a_source_is_of_the_default_class_and_source() -> None:
    assert holds.held_class(job("1", admin_comment="")) == ("auto", "default")
    assert holds.held_class(job("1", admin_comment="pal:held class=B")) == ("B", "default")
    assert holds.held_class(job("1", admin_comment="pal:held class=B src=rule")) == ("B", "rule")


def test_a_job_never_placed_has_no_placement_time() -> None:
    assert holds.placed_at(job("1", admin_comment="")) is None
    assert holds.placed_at(job("1", admin_comment=Tag(head=PLACED, job_class="A").render())) is None
    assert holds.placed_at(job("1", admin_comment=Tag(head=PLACED, job_class="A", at=5).render())) == 5.0


def test_the_original_request_is_a_gpu_field_with_a_value_never_the_node_list() -> None:
    def with_was(*was: tuple[str, str]):  # type: ignore[no-untyped-def]
        return job("1", admin_comment=Tag(head=PLACED, job_class="A", was=was).render())

    assert holds.original_request(with_was(("tres_per_job", "gres:gpu:2"), ("required_nodes", "n1"))) == \
        ("tres_per_job", "gres:gpu:2")
    assert holds.original_request(with_was(("required_nodes", "n1"))) is None
    assert holds.original_request(with_was(("tres_per_node", ""))) is None


def test_a_job_left_to_slurm_holds_the_placer_back_for_the_grace_and_no_longer() -> None:
    """Pending with its released hold's reason (BeginTime), none at all, or Slurm's "None":
    Slurm has not looked yet. The grace (10 s) counts inclusively."""
    for reason in ("BeginTime", "None", ""):
        pending = job("1", state_reason=reason)
        left = {"1": NOW - holds.LEFT_TO_SLURM_GRACE_S}
        assert holds.slurm_still_placing(left, [pending], NOW) == ["1"], reason
        assert left == {"1": NOW - holds.LEFT_TO_SLURM_GRACE_S}
    left = {"1": NOW - holds.LEFT_TO_SLURM_GRACE_S - 1}
    assert holds.slurm_still_placing(left, [job("1", state_reason="None")], NOW) == [] and left == {}
    left = {"1": NOW}
    assert holds.slurm_still_placing(left, [job("1", state_reason="Resources")], NOW) == [] and left == {}
