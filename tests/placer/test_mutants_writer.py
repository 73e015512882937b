"""The placer's writes (pal_slurm/placer/writer.py) on the branches the rest of the suite leaves
open (each found by `make mutation`): the mode check's refusals, the error paths of a placement
and of its read-back, giving a placed job its request back, holding a job again, and what a
release writes into the job's comment and the audit.

Over the recording Slurm of tests/support/recording_slurm.py (22.05 and 24.11 answers) with the
faults of tests/support/faults.py; `check_job` holds every job to the one rule: held by pal, or with
its user's whole request, or with the placement's whole one.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from pal_slurm.errors import SlurmError
from pal_slurm.placer.audit import AuditSink
from pal_slurm.placer.tag import HELD, PLACED, RELEASED_UNCHANGED, Tag
from pal_slurm.placer.writer import KEEP_HELD_S, Writer, carries_intent, clear_keys, drain, user_fields
from tests.support.faults import Fault, Faults, check_job
from tests.support.recording_slurm import NODES, Slurm, USER, V2205, V2411, applied_record, writer_rig
from tests.support.recording_slurm import NOW, Recorder, held, node

INTENT = "gres:gpu:v100_g0:1,gres:gpu:v100_g1:1"


def _writer(slurm: object, *faults: Fault, mode: str = "enforce", audit: AuditSink | None = None) -> Writer:
    return Writer(Faults(slurm, *faults), audit or AuditSink(None), policy="pal-guard", mode=mode,  # type: ignore[arg-type]
                  clock=lambda: NOW)


def _held_tag(**kw: object) -> str:
    return Tag(head=HELD, job_class="A", src="spank", was=(("tres_per_node", "gres:gpu:2"),), intent=INTENT,
               nodes="n1", **kw).render()  # type: ignore[arg-type]


def _placed_tag(**kw: object) -> str:
    return Tag(head=PLACED, job_class="A", was=(("tres_per_node", "gres:gpu:2"),), intent=INTENT, nodes="n1",
               **kw).render()  # type: ignore[arg-type]


# --------------------------------------------------------------------------- the mode check


def test_observe_mode_refuses_every_steering_write_naming_the_job_and_the_write() -> None:
    """Holding or placing a job is enforce mode's only; the refusal comes before Slurm sees anything."""
    job = held("7")
    rec = Recorder([job], [node("n1")])
    w = Writer(rec, AuditSink(None), policy="p", mode="observe", clock=lambda: NOW)  # type: ignore[arg-type]
    with pytest.raises(RuntimeError) as hold:
        w.set_begin("7", NOW + 90)
    assert str(hold.value) == "job 7: a hold is written only in enforce mode, not observe"
    with pytest.raises(RuntimeError) as again:
        w.hold_again(job, "pal:held class=A", NOW + 90)
    assert str(again.value) == "job 7: a hold is written only in enforce mode, not observe"
    w2, _slurm, job2, update, placed = writer_rig(V2205)
    w2.mode = "observe"
    with pytest.raises(RuntimeError) as place:
        w2.apply(job2, update, placed)
    assert str(place.value) == "job 1: a placement is written only in enforce mode, not observe"
    with pytest.raises(RuntimeError) as both:
        w2.verify([(job2, update, applied_record(job2), placed), (replace(job2, job_id="2"), update, applied_record(job2), placed)])
    assert str(both.value) == "job 1, 2: a placement is written only in enforce mode, not observe"
    with pytest.raises(RuntimeError) as none:
        w2.verify([])
    assert str(none.value) == "job -: a placement is written only in enforce mode, not observe"
    assert rec.calls == [] and _slurm.calls == []


# --------------------------------------------------------------------------- apply's error paths


@pytest.mark.parametrize("user", [USER, {"tres_per_job": "gres:gpu:2"}])
def test_a_refused_set_with_an_unreadable_job_is_repaired_not_released_without_gpus(user) -> None:  # type: ignore[no-untyped-def]
    """22.05: the clear went through, the set was refused, so were the put-back and the
    read-back. The job is taken as emptied: its request is put back before any release, never
    released empty (`--gres=gpu:2` and `--gpus=2`)."""
    job = held("1", tres_per_node=user.get("tres_per_node", ""), tres_per_job=user.get("tres_per_job", ""))
    w, slurm, job, update, placed = writer_rig(V2205, Fault("set", times=2), Fault("read"), job=job)
    assert w.apply(job, update, placed) is False
    got = slurm.job("1")
    assert check_job(got, user, NOW) == "user"
    assert Tag.parse(got.admin_comment).note.startswith("placement failed: scontrol set: refused by the test")


def test_a_placement_whose_tag_slurm_refuses_is_released_saying_why() -> None:
    w, slurm, job, update, placed = writer_rig(V2205, Fault("tag"))
    assert w.apply(job, update, placed) is False
    tag = Tag.parse(slurm.job("1").admin_comment)
    assert tag.head == RELEASED_UNCHANGED and tag.note == "placement failed: scontrol tag: refused by the test"


def test_a_re_placed_job_keeps_the_request_its_user_made_in_its_tag() -> None:
    """A job held again after a placement carries the per-slot request and, in its tag, its
    user's: the new placement records the user's request again, not the per-slot one."""
    again = held("1", gpus=2, tres_per_node="gres:gpu:v100_g2:1,gres:gpu:v100_g3:1", required_nodes="n2",
                 admin_comment=Tag(head=HELD, job_class="A", src="replan", was=(("tres_per_node", "gres:gpu:2"),)
                                   ).render())
    _w, _s, _j, update, placed = writer_rig(V2411)
    slurm = Slurm([again], NODES, V2411)
    assert _writer(slurm).apply(again, update, placed)
    tag = Tag.parse(slurm.job("1").admin_comment)
    assert tag.was == (("tres_per_node", "gres:gpu:2"),) and tag.src == "replan"


@pytest.mark.parametrize("version", [V2205, V2411])
def test_a_gpus_per_job_request_whose_set_hung_keeps_a_whole_request_while_held(version) -> None:  # type: ignore[no-untyped-def]
    """`--gpus=2`: its TresPerJob cleared, the per-slot set applied but unanswered. The put-back
    never leaves the job without GPUs: 22.05 refuses the untyped request back, so the job keeps
    the placement, node list included; held with its tag, the next step finishes it."""
    from pal_slurm.errors import SlurmUnavailable

    job = held("1", tres_per_node="", tres_per_job="gres:gpu:2")
    w, slurm, job, update, placed = writer_rig(version, Fault("set", how="hang", applied=True), job=job)
    with pytest.raises(SlurmUnavailable):
        w.apply(job, update, placed)
    got = slurm.job("1")
    assert check_job(got, {"tres_per_job": "gres:gpu:2"}, NOW) == "held"
    if version == V2205:
        assert (got.tres_per_node, got.required_nodes) == (INTENT, "n1")


# --------------------------------------------------------------------------- verify


def test_verify_fails_every_job_it_cannot_read_back_and_audits_why() -> None:
    audit = AuditSink(None)
    jobs = [held("1", gpus=2), held("2", gpus=2)]
    slurm = Slurm(jobs, NODES, V2205)
    w = _writer(slurm, Fault("read"), audit=audit)
    _w, _s, j1, update, placed = writer_rig(V2205)
    applied = [(j, replace(update, job_id=j.job_id), applied_record(j), placed) for j in jobs]
    assert w.verify(applied) == ([], ["1", "2"])
    assert [(r.job_id, r.outcome, r.reason) for r in audit.pending] == [
        ("1", "failed", "r; not read back, left held"), ("2", "failed", "r; not read back, left held")]


def test_verify_counts_a_job_that_started_or_left_as_placed_and_goes_on() -> None:
    audit = AuditSink(None)
    started = replace(held("1", gpus=2), state="RUNNING", state_reason="None")
    slurm = Slurm([started, held("3", gpus=2)], NODES, V2205)
    w = _writer(slurm, audit=audit)
    _w, _s, _j, update, placed = writer_rig(V2205)
    gone = held("2", gpus=2)
    applied = [(j, replace(update, job_id=j.job_id), applied_record(j), placed) for j in (started, gone)]
    assert w.verify(applied) == (["1", "2"], [])
    stamp = datetime.fromtimestamp(NOW, UTC)
    assert [(r.job_id, r.outcome, r.applied_at) for r in audit.pending] == [("1", "applied", stamp),
                                                                             ("2", "applied", stamp)]


def test_verify_goes_on_past_a_refused_release_and_audits_it() -> None:
    audit = AuditSink(None)
    jobs = [held("1", gpus=2), held("2", gpus=2)]
    slurm = Slurm(jobs, NODES, V2205)
    w = _writer(slurm, Fault("release"), audit=audit)
    _w, _s, _j, update, placed = writer_rig(V2205)
    for j in jobs:
        slurm._change(j.job_id, tres_per_node=INTENT, required_nodes="n1", admin_comment=_held_tag())
    applied = [(j, replace(update, job_id=j.job_id), applied_record(j), placed) for j in jobs]
    assert w.verify(applied) == (["2"], ["1"])
    assert [(r.job_id, r.outcome, r.reason, r.applied_at) for r in audit.pending] == [
        ("1", "failed", "r; release failed: scontrol release: refused by the test", None),
        ("2", "applied", "r", datetime.fromtimestamp(NOW, UTC))]


def test_a_job_slurm_did_not_retype_is_released_once_and_audited_once() -> None:
    audit = AuditSink(None)
    w, slurm, job, update, placed = writer_rig(V2411)
    assert w.apply(job, update, placed)
    slurm._change("1", tres_per_node="gres:gpu:v100_g3:1")
    w.audit = audit
    assert w.verify([(job, update, applied_record(job), placed)]) == ([], ["1"])
    assert [(r.outcome, r.reason) for r in audit.pending] == [
        ("failed", "r; Slurm did not take it, released as submitted")]
    assert Tag.parse(slurm.job("1").admin_comment).note == "Slurm did not take the placement"


# --------------------------------------------------------------------------- make_whole, keep_held


def test_a_job_that_is_whole_or_untagged_is_left_as_it_is() -> None:
    slurm = Slurm([held("1", gpus=2, admin_comment=_held_tag()), held("2", admin_comment="site note")], NODES, V2205)
    w = _writer(slurm)
    for jid in ("1", "2"):
        job = slurm.job(jid)
        assert w.make_whole(job) is job
    assert slurm.calls == []


def test_on_2205_a_job_refusing_its_users_request_is_made_whole_with_the_placement_on_its_nodes() -> None:
    emptied = held("1", gpus=2, tres_per_node="", admin_comment=_held_tag())
    slurm = Slurm([emptied], NODES, V2205)
    slurm.typed.add("1")
    w = _writer(slurm)
    got = w.make_whole(emptied)
    assert got is not None and (got.tres_per_node, got.required_nodes) == (INTENT, "n1")


@pytest.mark.parametrize(("begin_in", "moved"), [(100.0, False), (50.0, True), (None, True)])
def test_a_job_kept_held_has_its_begin_time_moved_only_when_it_ends_within_a_minute(begin_in, moved) -> None:  # type: ignore[no-untyped-def]
    """keep_held: a begin time more than half of KEEP_HELD_S (120 s) ahead is left; one ending
    sooner (or none) is moved to now + 120 s."""
    job = held("1", gpus=2, tres_per_node="", admin_comment=_held_tag(), begin_in=begin_in)
    slurm = Slurm([job], NODES, V2205)
    _writer(slurm).keep_held(job, "test")
    assert (("set_begin", "1", str(int(NOW + 120))) in slurm.calls) is moved


def test_a_job_held_with_priority_0_is_never_given_a_begin_time_by_keep_held() -> None:
    job = held("1", gpus=2, tres_per_node="", admin_comment=_held_tag(), begin_in=None, priority=0)
    slurm = Slurm([job], NODES, V2205)
    _writer(slurm).keep_held(job, "test")
    assert slurm.calls == []


# --------------------------------------------------------------------------- release_unchanged


def test_a_release_keeps_the_sites_comment_and_audits_policy_class_reason_and_time() -> None:
    audit = AuditSink(None)
    job = held("1", gpus=2, admin_comment="pal:held class=B src=rule | ticket 42")
    slurm = Slurm([job], NODES, V2205)
    assert _writer(slurm, audit=audit).release_unchanged(job, "no GPUs steerable")
    tag = Tag.parse(slurm.job("1").admin_comment)
    assert (tag.head, tag.note, tag.site) == (RELEASED_UNCHANGED, "no GPUs steerable", "ticket 42")
    (rec,) = audit.pending
    assert (rec.outcome, rec.policy, rec.job_class, rec.reason, rec.decided_at) == (
        "released-unchanged", "pal-guard", "B", "no GPUs steerable", datetime.fromtimestamp(NOW, UTC))


def test_on_2205_a_job_released_with_the_placement_is_tagged_placed_with_all_it_needs() -> None:
    placed_job = held("1", gpus=2, tres_per_node=INTENT, required_nodes="n1", admin_comment=_held_tag(site="t 9"))
    slurm = Slurm([placed_job], NODES, V2205)
    slurm.typed.add("1")
    assert _writer(slurm).release_unchanged(placed_job, "placer stopped")
    tag = Tag.parse(slurm.job("1").admin_comment)
    assert tag == Tag(head=PLACED, job_class="A", was=(("tres_per_node", "gres:gpu:2"),), intent=INTENT, nodes="n1",
                      note="released with the placement: placer stopped", site="t 9")


def test_a_release_that_cannot_be_made_or_is_refused_says_the_job_was_not_released() -> None:
    emptied = held("1", gpus=2, tres_per_node="", admin_comment=_held_tag())
    slurm = Slurm([emptied], NODES, V2205)
    assert _writer(slurm, Fault("set", times=10)).release_unchanged(emptied, "x") is False
    whole = held("2", gpus=2)
    slurm = Slurm([whole], NODES, V2205)
    assert _writer(slurm, Fault("release")).release_unchanged(whole, "x") is False


# --------------------------------------------------------------------------- put_back


def test_put_back_gives_a_placed_job_its_users_request_and_node_list() -> None:
    job = held("1", gpus=2, tres_per_node=INTENT, required_nodes="n1", admin_comment=_placed_tag())
    slurm = Slurm([job], NODES, V2411)
    assert _writer(slurm).put_back(job) is True
    got = slurm.job("1")
    assert (got.tres_per_node, got.required_nodes) == ("gres:gpu:2", "")


def test_put_back_of_a_job_with_its_users_request_but_pinned_restores_only_the_node_list() -> None:
    job = held("1", gpus=2, required_nodes="n1", admin_comment=_placed_tag())
    slurm = Slurm([job], NODES, V2411)
    assert _writer(slurm).put_back(job) is True
    assert slurm.calls == [("update", "1", "NodeList", "")]


def test_put_back_says_true_though_the_node_list_could_not_be_restored() -> None:
    job = held("1", gpus=2, required_nodes="n1", admin_comment=_placed_tag())
    slurm = Slurm([job], NODES, V2411)
    assert _writer(slurm, Fault("update")).put_back(job) is True


def test_put_back_of_an_untagged_job_writes_nothing_and_says_false() -> None:
    job = held("1", gpus=2, admin_comment="pal:held class=A src=spank")
    slurm = Slurm([job], NODES, V2411)
    assert _writer(slurm).put_back(job) is False and slurm.calls == []


def test_put_back_is_false_when_slurm_refuses_or_does_not_show_the_request() -> None:
    job = held("1", gpus=2, tres_per_node=INTENT, required_nodes="n1", admin_comment=_placed_tag())
    slurm = Slurm([job], NODES, V2205)
    slurm.typed.add("1")
    assert _writer(slurm).put_back(job) is False
    assert slurm.job("1").tres_per_node == INTENT, "the per-slot request set back at once"
    slurm = Slurm([job], NODES, V2411)
    assert _writer(slurm, Fault("read")).put_back(job) is False


# --------------------------------------------------------------------------- hold_again


def test_a_re_plan_slurm_refuses_puts_the_old_comment_back_and_says_false() -> None:
    job = held("1", gpus=2, tres_per_node=INTENT, required_nodes="n1", admin_comment=_placed_tag())
    slurm = Slurm([job], NODES, V2411)
    assert _writer(slurm, Fault("begin")).hold_again(job, "pal:held class=A src=replan", NOW + 90) is False
    assert slurm.job("1").admin_comment == job.admin_comment


# --------------------------------------------------------------------------- small rules


def test_a_backend_whose_version_cannot_be_read_is_cleared_before_it_is_set() -> None:
    class Unknown(Slurm):
        def version(self) -> tuple[int, int]:
            raise SlurmError("scontrol version: no answer")

    slurm = Unknown([held("1", gpus=2)], NODES, V2411)
    _writer(slurm).change("1", ["TresPerNode"], [("TresPerNode", INTENT), ("NodeList", "n1")])
    assert slurm.calls[0] == ("update", "1", "TresPerNode", "")


def test_the_fields_to_empty_are_those_the_job_has_and_those_about_to_be_set() -> None:
    per_node = held("1", gpus=2)
    per_job = held("2", tres_per_node="", tres_per_job="gres:gpu:2")
    assert clear_keys(per_node, [("TresPerJob", "gres:gpu:2")]) == ["TresPerNode", "TresPerJob"]
    assert clear_keys(per_job, [("TresPerNode", INTENT)]) == ["TresPerNode", "TresPerJob"]
    assert clear_keys(per_node, [("TresPerNode", INTENT), ("NodeList", "n1")]) == ["TresPerNode"]


def test_the_users_request_as_an_update_sets_only_what_the_user_asked_for_and_the_node_list() -> None:
    tag = Tag(head=PLACED, was=(("tres_per_node", "gres:gpu:2"), ("required_nodes", "n[1-2]")))
    assert user_fields(tag) == [("TresPerNode", "gres:gpu:2"), ("NodeList", "n[1-2]")]
    assert user_fields(Tag(head=PLACED, was=(("tres_per_job", "gres:gpu:2"),))) == [
        ("TresPerJob", "gres:gpu:2"), ("NodeList", "")]


def test_a_job_with_a_per_job_request_besides_the_placement_does_not_carry_it_whole() -> None:
    tag = Tag.parse(_held_tag())
    assert carries_intent(held("1", tres_per_node=INTENT), tag)
    assert not carries_intent(held("1", tres_per_node=INTENT, tres_per_job="gres:gpu:2"), tag)


def test_a_read_of_a_job_slurm_no_longer_has_is_none() -> None:
    assert _writer(Slurm([], NODES, V2411)).read("9") is None


def test_drain_asks_slurm_to_drain_that_node_with_that_reason() -> None:
    calls = []

    class Backend:
        def drain_node(self, name: str, reason: str) -> None:
            calls.append((name, reason))

    drain(Backend(), "n3", "pal: slow GPU")  # type: ignore[arg-type]
    assert calls == [("n3", "pal: slow GPU")]


@pytest.mark.parametrize("version", [V2205, V2411])
def test_a_placed_gpus_per_job_request_keeps_its_per_node_gres(version) -> None:  # type: ignore[no-untyped-def]
    job = held("1", tres_per_node="gres:mps:10", tres_per_job="gres:gpu:2")
    w, slurm, job, update, placed = writer_rig(version, job=job)
    assert w.apply(job, update, placed)
    assert "gres:mps:10" in slurm.job("1").tres_per_node.split(",")


# --------------------------------------------------------------------------- the clock of a hold


def test_a_hold_is_counted_on_the_writers_clock_not_slurms() -> None:
    """Slurm takes a begin time as `now+N`: N must come from the clock the placer decided on, which
    may differ from Slurm's (here 100 s ahead), for the held and the kept-held job alike."""
    ahead = NOW + 100
    job, broken = held("7"), held("8", begin_in=None, tres_per_node="")
    rec = Recorder([job, broken], [node("n1")])
    w = Writer(rec, AuditSink(None), policy="p", mode="enforce", clock=lambda: ahead)  # type: ignore[arg-type]
    w.set_begin("7", ahead + 90)
    assert rec.jobs(["7"])[0].begin_time == NOW + 90
    w.keep_held(broken, "the request was lost")
    assert rec.jobs(["8"])[0].begin_time == NOW + KEEP_HELD_S
