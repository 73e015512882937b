"""A placer that fails, hangs or dies at any step of a placement never lets a job start with a GPU
request other than its user's or the placer's whole intended one, and never leaves it held.

Over the recording backend with Slurm's own answers to GPU-request updates, by version (what
design notes 3 and 3b record from the real clusters): 22.05 empties a job's request on a
clear, merges a direct set into the request it has, and refuses an untyped request once the
job carried per-slot types; 24.11 keeps the request on a clear alone and replaces it on a
direct set. tests/support/faults.py fails the N-th call of one kind (fail, hang, kill); after a kill
a fresh placer on the same Slurm picks up, as a restarted daemon or the fail-safe would.
The same faults on the real cluster: tests/slurm/test_placer_crash.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from pal_slurm.errors import SlurmUnavailable
from pal_slurm.placer.audit import AuditSink
from pal_slurm.placer.cycle import Placer
from pal_slurm.placer.tag import HELD, PLACED, Tag
from pal_slurm.placer.writer import Writer
from pal_slurm.slurm.model import SlurmJob
from tests.support.faults import Fault, Faults, Killed, check_job
from tests.support.recording_slurm import (
    NODES,
    NOW,
    USER,
    V2205,
    V2411,
    Slurm,
    applied_record,
    held,
    node,
    placer,
    writer_rig,
)


def rig(tmp_path: Path, version: tuple[int, int], *faults: Fault,
        jobs: Sequence[SlurmJob] | None = None) -> tuple[Placer, Slurm, Faults]:
    p, _ = placer(tmp_path, [], NODES)
    slurm = Slurm(list(jobs) if jobs is not None else [held("1", gpus=2)], NODES, version)
    wrapped = Faults(slurm, *faults)
    p.backend = wrapped  # type: ignore[assignment]
    return p, slurm, wrapped


def fresh(tmp_path: Path, slurm: Slurm) -> Placer:
    """A new placer process on the same Slurm (what systemd restarts after a kill)."""
    p, _ = placer(tmp_path, [], NODES)
    p.backend = slurm
    return p


def state(slurm: Slurm, job_id: str = "1", submitted: dict[str, str] = USER) -> str:
    return check_job(slurm.job(job_id), submitted, NOW)


def settle(tmp_path: Path, slurm: Slurm, job_id: str = "1") -> str:
    """Run fresh cycles until the job is released; it must end placed or as submitted."""
    for _ in range(3):
        fresh(tmp_path, slurm).cycle()
        got = state(slurm, job_id)
        if got != "held":
            return got
    raise AssertionError(f"job {job_id} left held: {slurm.job(job_id)}")


# -- the set after the clear ---------------------------------------------------------------------
@pytest.mark.parametrize("version", [V2205, V2411])
@pytest.mark.parametrize("how", ["fail", "hang"])
def test_a_set_that_fails_or_hangs_after_the_clear_puts_the_request_back_first(tmp_path: Path, version, how) -> None:
    """The chaos run's case: scontrol times out on the set. The request comes back before the
    error is raised; the next cycle places the job."""
    p, slurm, faults = rig(tmp_path, version, Fault("set", how=how))
    if how == "hang":
        with pytest.raises(SlurmUnavailable):
            p.cycle()
        assert state(slurm) == "held"
        assert slurm.job("1").tres_per_node == "gres:gpu:2", "put back before the error was raised"
    else:
        report = p.cycle()
        assert report.failed == ["1"] and state(slurm) == "user"
        return
    assert settle(tmp_path, slurm) == "intent"


@pytest.mark.parametrize("version", [V2205, V2411])
@pytest.mark.parametrize("step,applied", [("tag", False), ("tag", True), ("clear", False), ("clear", True),
                                          ("set", False), ("set", True), ("release", False), ("release", True)])
def test_a_placer_killed_at_any_step_leaves_a_job_the_next_placer_finishes(tmp_path: Path, version, step,
                                                                           applied) -> None:
    """Killed before or after each write of a placement (SIGKILL, OOM, the watchdog): the job
    is held with its tag, or released whole; a restarted placer places it, and it is never
    released with an empty or partial request."""
    if step == "clear" and version == V2411:
        pytest.skip("24.11 retypes in one update: there is no clear to die at")
    p, slurm, _faults = rig(tmp_path, version, Fault(step, how="kill", applied=applied))
    with pytest.raises(Killed):
        p.cycle()
    after_kill = state(slurm)
    assert after_kill in ("held", "intent")
    if after_kill == "intent":  # released, killed before the final tag: the tag is put right
        assert step == "release" and applied
        fresh(tmp_path, slurm).cycle()
        assert Tag.parse(slurm.job("1").admin_comment).head == PLACED
        assert state(slurm) == "intent"
        return
    assert settle(tmp_path, slurm) == "intent"


@pytest.mark.parametrize("version", [V2205, V2411])
def test_killed_after_the_clear_the_fail_safe_gives_the_request_back_before_releasing(tmp_path: Path,
                                                                                      version) -> None:
    """Killed between the clear and the set, then `release-stale` (or SIGTERM's release_all)
    rather than a new cycle: the job gets its user's request back before it is released."""
    p, slurm, _f = rig(tmp_path, version, Fault("set", how="kill"))
    with pytest.raises(Killed):
        p.cycle()
    if version == V2205:
        assert slurm.job("1").tres_per_node == "", "22.05: a clear alone empties the request"
    assert fresh(tmp_path, slurm).release_all("placer heartbeat stale; released by the fail-safe") == ["1"]
    assert state(slurm) == "user"
    assert Tag.parse(slurm.job("1").admin_comment).note == "placer heartbeat stale; released by the fail-safe"


# -- the release and the put-back ----------------------------------------------------------------
@pytest.mark.parametrize("version", [V2205, V2411])
def test_a_refused_release_leaves_the_job_held_with_the_whole_placement(tmp_path: Path, version) -> None:
    """StartTime=now refused after the retype: no restore of an untyped request that 22.05
    would refuse (the old path released the job with no GPUs); the job stays held, whole,
    and the next cycle releases it."""
    p, slurm, _f = rig(tmp_path, version, Fault("release"))
    report = p.cycle()
    assert report.failed == ["1"] and not report.placed
    assert state(slurm) == "held"
    tag = Tag.parse(slurm.job("1").admin_comment)
    assert tag.head == HELD and slurm.job("1").tres_per_node == tag.intent
    assert fresh(tmp_path, slurm).cycle().placed == ["1"], "planned again from the user's request"
    assert state(slurm) == "intent" and Tag.parse(slurm.job("1").admin_comment).head == PLACED


def test_a_refused_set_and_a_refused_put_back_keep_the_job_held_until_repaired(tmp_path: Path) -> None:
    """22.05, every set of this cycle refused: the placement, the put-back and the repair. The
    job is not released (it would start with no GPUs); its hold is moved on when it ends soon,
    and the next cycle, with Slurm answering again, gives it a whole request."""
    p, slurm, _f = rig(tmp_path, V2205, Fault("set", times=10), jobs=[held("1", gpus=2, begin_in=30)])
    report = p.cycle()
    assert "1" in report.failed and not report.released
    job = slurm.job("1")
    assert job.tres_per_node == "" and state(slurm) == "held"
    assert job.begin_time is not None and job.begin_time >= NOW + 100, "its hold moved on"
    assert not any(c[0] in ("start_now", "release") for c in slurm.of("1"))
    assert settle(tmp_path, slurm) in ("user", "intent")


def test_on_2205_a_job_that_carried_types_is_released_with_the_placement_not_without_gpus(tmp_path: Path) -> None:
    """A placed-and-held job (release refused) that the fail-safe releases: it carries the
    placer's whole per-slot request, which it is released with and tagged placed; the old path
    put back the user's untyped request, which 22.05 refuses, and released it with none."""
    p, slurm, _f = rig(tmp_path, V2205, Fault("release"))
    p.cycle()
    assert fresh(tmp_path, slurm).release_all("placer stopped") == ["1"]
    assert state(slurm) == "intent"
    assert Tag.parse(slurm.job("1").admin_comment).head == PLACED


@pytest.mark.parametrize("version", [V2205, V2411])
def test_every_path_gives_an_emptied_held_job_its_request_back_before_the_release(tmp_path: Path, version) -> None:
    """A held job whose GPU field is empty and whose tag records the request (a crash mid-change):
    the cycle (observe mode, overdue), SIGTERM / release-stale each put the request back first."""
    tag = Tag(head=HELD, job_class="A", src="default", was=(("tres_per_node", "gres:gpu:2"),),
              intent="gres:gpu:v100_g0:1,gres:gpu:v100_g1:1", nodes="n1").render()
    empty = held("1", gpus=2, tres_per_node="", admin_comment=tag)
    for run in ("observe", "overdue", "release_all"):
        p, slurm, _f = rig(tmp_path, version, jobs=[replace(empty, submit_time=NOW - 99_999)
                                                     if run == "overdue" else empty])
        if run == "observe":
            p = Placer(p.backend, p.cfg.model_copy(update={"mode": "observe"}), p.factors, AuditSink(None),
                       classes=p.classes, clock=p.clock)
            p.cycle()
        elif run == "overdue":
            p.cfg = p.cfg.model_copy(update={"max_hold_s": 600})
            p.cycle()
        else:
            p.release_all("placer stopped")
        assert state(slurm) in ("user", "intent"), run
        assert slurm.job("1").tres_per_node, run


@pytest.mark.parametrize("version", [V2205, V2411])
def test_a_hold_that_ran_out_mid_change_is_held_again_and_repaired(tmp_path: Path, version) -> None:
    tag = Tag(head=HELD, job_class="A", was=(("tres_per_node", "gres:gpu:2"),),
              intent="gres:gpu:v100_g0:1,gres:gpu:v100_g1:1", nodes="n1").render()
    lapsed = held("1", gpus=2, tres_per_node="", admin_comment=tag, begin_in=-5, state_reason="Resources")
    p, slurm, _f = rig(tmp_path, version, jobs=[lapsed])
    p.cycle()
    assert ("set_begin", "1", str(int(NOW + 120))) in slurm.calls, "held again before the repair"
    assert state(slurm) in ("user", "intent")


def test_a_hold_that_ran_out_after_the_set_is_tagged_placed() -> None:
    tag = Tag(head=HELD, job_class="A", was=(("tres_per_node", "gres:gpu:2"),),
              intent="gres:gpu:v100_g0:1,gres:gpu:v100_g1:1", nodes="n1").render()
    lapsed = held("1", gpus=2, tres_per_node="gres:gpu:v100_g0:1,gres:gpu:v100_g1:1", required_nodes="n1",
                  admin_comment=tag, begin_in=-5, state_reason="Resources")
    slurm = Slurm([lapsed], NODES, V2205)
    from pal_slurm.placer import failopen
    failopen.note_lapsed(Writer(slurm, AuditSink(None), policy="p", mode="enforce", clock=lambda: NOW),  # type: ignore[arg-type]
                         [lapsed], NOW)
    got = Tag.parse(slurm.job("1").admin_comment)
    assert got.head == PLACED and got.was == (("tres_per_node", "gres:gpu:2"),) and got.intent


# -- one update where it replaces ------------------------------------------------------------------
def test_2411_retypes_in_one_update_and_2205_clears_first(tmp_path: Path) -> None:
    for version, want in ((V2411, ["tag", "set", "release", "tag"]), (V2205, ["tag", "clear", "set", "release", "tag"])):
        p, _slurm, faults = rig(tmp_path, version)
        assert p.cycle().placed == ["1"]
        assert [k for k, _how in faults.log if k not in ("read",)] == want, version


# -- the writer's own error branches ---------------------------------------------------------------
def test_apply_records_the_request_first_and_keeps_the_sites_comment() -> None:
    w, slurm, job, update, placed = writer_rig(V2205)
    assert w.apply(job, update, placed)
    first = slurm.calls[0]
    assert first[2] == "AdminComment" and first[3] == (
        "pal:held class=A src=spank was=tres_per_node:gres:gpu:2 set=gres:gpu:v100_g0:1,gres:gpu:v100_g1:1 on=n1"
        " | ticket 42")
    assert w.verify([(job, update, applied_record(job), placed)]) == (["1"], [])
    tag = Tag.parse(slurm.job("1").admin_comment)
    assert tag.head == PLACED and tag.site == "ticket 42" and tag.was == (("tres_per_node", "gres:gpu:2"),)


def test_apply_when_the_tag_cannot_be_written_changes_nothing_and_releases_as_submitted() -> None:
    w, slurm, job, update, placed = writer_rig(V2205, Fault("tag"))
    assert not w.apply(job, update, placed)
    assert not any(c[2] in ("TresPerNode", "NodeList") for c in slurm.calls if c[0] == "update")
    assert check_job(slurm.job("1"), USER, NOW) == "user"


def test_apply_refuses_a_tag_too_long_for_the_request_and_the_placement() -> None:
    w, slurm, job, update, placed = writer_rig(V2205)
    long_nodes = replace(update, node_list=",".join(f"node-with-a-very-long-name-{i:04d}" for i in range(40)))
    assert not w.apply(job, long_nodes, placed)
    assert check_job(slurm.job("1"), USER, NOW) == "user"
    assert "placement not written" in slurm.job("1").admin_comment


def test_apply_raises_slurm_unreachable_with_the_request_put_back() -> None:
    w, slurm, job, update, placed = writer_rig(V2205, Fault("set", how="hang", applied=False))
    with pytest.raises(SlurmUnavailable):
        w.apply(job, update, placed)
    assert slurm.job("1").tres_per_node == "gres:gpu:2" and check_job(slurm.job("1"), USER, NOW) == "held"


def test_verify_leaves_jobs_held_when_they_cannot_be_read_back() -> None:
    w, slurm, job, update, placed = writer_rig(V2205, Fault("read"))
    assert w.apply(job, update, placed)
    assert w.verify([(job, update, applied_record(job), placed)]) == ([], ["1"])
    assert check_job(slurm.job("1"), USER, NOW) == "held"
    assert not any(c[0] in ("start_now", "release") for c in slurm.calls)


def test_verify_releases_a_job_slurm_did_not_retype_as_its_user_submitted_it() -> None:
    w, slurm, job, update, placed = writer_rig(V2411)
    assert w.apply(job, update, placed)
    slurm._change("1", tres_per_node="gres:gpu:v100_g3:1")  # Slurm shows something else
    assert w.verify([(job, update, applied_record(job), placed)]) == ([], ["1"])
    assert check_job(slurm.job("1"), USER, NOW) == "user"


def test_verify_leaves_a_job_whose_release_fails_held_and_whole() -> None:
    w, slurm, job, update, placed = writer_rig(V2205, Fault("release"))
    assert w.apply(job, update, placed)
    assert w.verify([(job, update, applied_record(job), placed)]) == ([], ["1"])
    assert check_job(slurm.job("1"), USER, NOW) == "held"
    assert slurm.job("1").tres_per_node == update.tres_per_node


# -- observe mode forgets jobs that left -----------------------------------------------------------
def test_observe_mode_forgets_jobs_that_left_the_queue(tmp_path: Path) -> None:
    fresh_job = replace(held("5"), admin_comment="", state_reason="Resources")
    p, rec = placer(tmp_path, [fresh_job], [node("n1")])
    p = Placer(rec, p.cfg.model_copy(update={"mode": "observe"}), p.factors, AuditSink(None), classes=p.classes,
               clock=p.clock)
    assert p.cycle().observed == ["5"] and p.observed == {"5"}
    rec._jobs = []
    p.cycle()
    assert p.observed == set()


# -- a rescue Slurm refuses ------------------------------------------------------------------------
def test_a_stranded_placement_slurm_will_not_retype_is_not_released_without_gpus(tmp_path: Path) -> None:
    """22.05, a placed job stuck at priority 0 (BadConstraints): the user's request back is
    refused, and every set fails for a while. The old rescue released it "request unchanged
    (Slurm refused both)" with whatever the failed writes left; now it stays at priority 0 until
    a set goes through, and is then released whole."""
    from tests.support.recording_slurm import placed_job
    stuck = placed_job("5", state_reason="BadConstraints", priority=0)
    p, slurm, _f = rig(tmp_path, V2205, Fault("set", times=10), jobs=[stuck])
    slurm.typed.add("5")
    user = {"tres_per_node": "gres:gpu:2"}
    report = p.cycle()
    assert "5" in report.failed and "5" not in report.restored
    assert not any(c[0] == "release" for c in slurm.of("5"))
    job = slurm.job("5")
    assert job.priority == 0, "still unable to start"
    fresh(tmp_path, slurm).cycle()
    got = slurm.job("5")
    assert got.priority != 0 and check_job(got, user, NOW) in ("user", "intent")
    assert Tag.parse(got.admin_comment).head == "pal: released restored"
