"""placer/tag.py: the one admin-comment tag. The user's request is never cut, the site's own comment
is kept beside it, fields go in their truncation order, and every tag written so far still parses
(the filter's, and the placer's earlier `was FIELD VALUE` at the end)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pal_slurm.placer import holds, slurm_updates
from pal_slurm.placer.tag import HELD, MAX_LEN, PLACED, RELEASED_RESTORED, RELEASED_UNCHANGED, Tag, TagTooLong, \
    site_comment
from tests.support.recording_slurm import held

LONG = [f"gpu-rack{r:02d}-node{n:02d}.cluster" for r in range(4) for n in range(4)]  # 16 names, 26 characters


def big_placement(gpus_per_node: int = 8, nodes: list[str] = LONG) -> Tag:
    """A 128-GPU, 16-node placement (8 per node) with long node names, as the cycle tags it."""
    intent = ",".join(f"gres:gpu:h100_g{m}:1" for m in range(gpus_per_node))
    return Tag(head=PLACED, job_class="A", src="spank", was=(("tres_per_node", "gres:gpu:8"),), intent=intent,
               nodes=",".join(nodes), gpus=";".join(f"{n}:" + ",".join(map(str, range(gpus_per_node))) for n in nodes),
               sf=",".join("1.034" for _ in range(gpus_per_node * len(nodes))), policy="pal-guard", version=12,
               at=1796000000, site="ticket INC-4711: reserved for the climate group")


def test_a_128_gpu_16_node_placement_keeps_the_users_request_and_the_placement() -> None:
    tag = big_placement()
    full = tag._text()
    assert len(full) > MAX_LEN  # 2,294 characters in full
    text = tag.render()
    assert len(text) <= MAX_LEN
    back = Tag.parse(text)
    assert back is not None
    assert back.was == tag.was and back.intent == tag.intent and back.nodes == tag.nodes
    assert back.job_class == "A" and back.head == PLACED
    # the least needed go first: the slowdowns, then the GPU list; the rest fits
    assert back.sf == "" and back.gpus == ""
    assert back.policy == "pal-guard" and back.version == 12 and back.at == 1796000000
    assert back.site == tag.site


@pytest.mark.parametrize("nodes", [11, 12])
def test_the_old_cut_lost_the_request_at_88_gpus_the_tag_does_not(nodes: int) -> None:
    """11 (88 GPUs) or 12 (96) 8-GPU nodes with 13-character names: the earlier one-line
    comment (949 and 1,027 characters) was cut at 900 and lost its `was` record at the end;
    the typed tag keeps it."""
    names = [f"gpunode-{i:05d}" for i in range(nodes)]
    tag = big_placement(8, names)
    old = (f"pal: placed class=A gpus={tag.gpus} sf={tag.sf} policy=pal-guard v12 at=1796000000 "
           f"was tres_per_node gres:gpu:8")
    assert len(old) > 900 and holds.original_request(held("1", admin_comment=old[:900])) is None
    back = Tag.parse(tag.render())
    assert back is not None and back.was == (("tres_per_node", "gres:gpu:8"),) and back.intent == tag.intent
    assert holds.original_request(held("1", admin_comment=tag.render())) == ("tres_per_node", "gres:gpu:8")


def test_fields_are_dropped_in_order_and_the_site_comment_is_cut_last() -> None:
    tag = Tag(head=RELEASED_UNCHANGED, job_class="B", was=(("tres_per_job", "gres/gpu:2"),), note="n" * 300,
              site="s" * 800, policy="pal", version=3, at=5)
    text = tag.render()
    back = Tag.parse(text)
    assert len(text) <= MAX_LEN and back is not None
    assert back.policy == "" and back.version is None, "policy and version go before the note and the site"
    assert back.note.startswith("n" * 20) and back.note.endswith("...") and len(back.note) < 300
    assert back.site == "s" * 800, "the site's comment is kept whole while cutting the note is enough"
    assert back.was == tag.was and back.job_class == "B"
    longer = Tag.parse(replace(tag, site="s" * 950).render())
    assert longer is not None and longer.note == "" and longer.site.endswith("...") and longer.site.startswith("s" * 800)
    assert longer.was == tag.was and longer.job_class == "B" and longer.at == 5


def test_a_tag_that_cannot_hold_the_request_and_the_placement_is_refused() -> None:
    tag = Tag(head=HELD, was=(("tres_per_node", "gres:gpu:8"),), intent="gres:gpu:h100_g0:1",
              nodes=",".join(f"n{i:04d}-with-a-long-long-name" for i in range(60)))
    with pytest.raises(TagTooLong, match="more than 900"):
        tag.render()


@pytest.mark.parametrize("text,want", [
    # the submit filter's (spank_hooks/job_submit.lua, pal.held_comment), with and without a site comment
    ("pal:held class=A src=spank", Tag(head=HELD, job_class="A", src="spank")),
    ("pal:held class=auto src=default | ticket 42", Tag(head=HELD, job_class="auto", src="default", site="ticket 42")),
    ("pal:held class=B src=rule:rule-3", Tag(head=HELD, job_class="B", src="rule:rule-3")),
    # earlier placer releases: `was FIELD VALUE` at the end
    ("pal: placed class=A gpus=n1:0,1 sf=1.0,1.1 policy=pal v3 at=123 was tres_per_node gres:gpu:2",
     Tag(head=PLACED, job_class="A", gpus="n1:0,1", sf="1.0,1.1", policy="pal", version=3, at=123,
         was=(("tres_per_node", "gres:gpu:2"),))),
    ("pal: released restored: priority 0; placer stopped; its request restored was tres_per_job gres/gpu:2",
     Tag(head=RELEASED_RESTORED, note="priority 0; placer stopped; its request restored",
         was=(("tres_per_job", "gres/gpu:2"),))),
    ("pal: released unchanged: placer is in observe mode",
     Tag(head=RELEASED_UNCHANGED, note="placer is in observe mode")),
])
def test_every_tag_written_so_far_parses(text: str, want: Tag) -> None:
    assert Tag.parse(text) == want


def test_comments_that_are_not_ours() -> None:
    for text in ("", "ticket 42", "pal:heldover", "pal: placedx", "PAL:held class=A"):
        assert Tag.parse(text) is None
        assert site_comment(text) == text


def test_render_parse_round_trip_keeps_every_field_and_a_site_comment_with_separators() -> None:
    tag = Tag(head=PLACED, job_class="C", src="comment",
              was=(("tres_per_node", "gres:gpu:1,gres:shard:2"), ("required_nodes", "n3")),
              intent="gres:gpu:v100_g2:1,gres:shard:2", nodes="n3", gpus="n3:2", sf="0.950", policy="pal-guard",
              version=4, at=1796000001, note="why: it | had to", site="ops: keep | do not touch")
    back = Tag.parse(tag.render())
    assert back == tag.__class__(**{**tag.__dict__, "note": "why: it / had to"})
    assert back.user_request() == {"tres_per_node": "gres:gpu:1,gres:shard:2", "tres_per_job": "",
                                   "required_nodes": "n3"}


def test_the_cycles_summary_is_a_tag() -> None:
    from tests.support.steering import place
    _v, _planned, ups = place([held("1")])
    tag = slurm_updates.summary(ups["1"], "A", "pal-match", 3, [0.9], 1796000000)
    assert tag.head == PLACED and tag.intent == ups["1"].tres_per_node and tag.nodes == ups["1"].node_list
    assert tag.render().startswith("pal: placed class=A set=")
