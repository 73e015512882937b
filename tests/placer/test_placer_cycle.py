"""The placer's cycle over a recording backend: shapes kept, Slurm's order kept,
nobody stranded, waiting for better GPUs bounded and audited, re-plans restore first.

What Slurm itself does with these commands is shown on the real test cluster
(tests/slurm/test_placer_shapes.py); here each rule of the daemon is pinned down exactly.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import pytest

from pal_slurm.placer.tag import Tag
from pal_slurm.errors import SlurmError
from pal_slurm.jobs.runtimes import LEARNED_END_GRACE_S
from pal_slurm.placement.policies import policy_names
from pal_slurm.placer import cluster_view, shapes, slurm_updates
from pal_slurm.slurm.model import SlurmJob
from pal_slurm.slurm.tres import parse_tres
from tests.support.recording_slurm import NOW, Recorder, held, node, placed_job, placer


def placed_slots(rec: Recorder, job_id: str) -> tuple[str, list[str]]:
    """(NodeList, per-slot types) the placer set for a job."""
    sets = [c for c in rec.of(job_id) if c[0] == "update" and c[2] == "TresPerNode" and c[3]]
    nodes = [c for c in rec.of(job_id) if c[0] == "update" and c[2] == "NodeList"]
    types = [i.type or "" for i in parse_tres(sets[-1][3]).gpu_items]
    return nodes[-1][3], types


def fragmented() -> list:
    """A fragmented layout on 3 nodes x 4 GPUs: n1 has 2 free (minors 2, 3), n2 and n3 one each (minor 0,
    the fastest GPU for every class in these factors, so a splitting policy would take them)."""
    return [node("n1", used=(0, 1)), node("n2", used=(1, 2, 3)), node("n3", used=(1, 2, 3))]


SHAPES = {
    "gres": {"tres_per_node": "gres:gpu:2"},
    "gpus-per-node": {"tres_per_node": "gres:gpu:2", "max_nodes": 1},
    "gpus-N1": {"tres_per_node": "", "tres_per_job": "gres:gpu:2", "max_nodes": 1},
}


@pytest.mark.parametrize("policy", sorted(policy_names()))
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_two_gpu_jobs_on_the_fragmented_layout_get_one_node_each(tmp_path: Path, policy: str, shape: str) -> None:
    jobs = [held("1", **SHAPES[shape]), held("2", **SHAPES[shape], submit_time=NOW - 4)]  # type: ignore[arg-type]
    p, rec = placer(tmp_path, jobs, fragmented(), policy=policy)
    report = p.cycle()
    assert report.placed == ["1"] and "2" in report.waiting and not report.failed
    assert placed_slots(rec, "1") == ("n1", ["v100_g2", "v100_g3"])
    assert not [c for c in rec.of("2") if c[0] == "update" and c[2] in ("TresPerNode", "NodeList")]


def test_repeated_gres_entries_mean_what_slurm_means(tmp_path: Path) -> None:
    """`--gres=gpu:1,gpu:1` runs with ONE GPU under plain Slurm (the last entry of a type wins)."""
    p, rec = placer(tmp_path, [held("1", tres_per_node="gres:gpu:1,gres:gpu:1")], [node("n1")])
    assert p.cycle().placed == ["1"]
    assert len(placed_slots(rec, "1")[1]) == 1
    p, rec = placer(tmp_path, [held("2", tres_per_node="gres:gpu:2,gres:gpu:1")], [node("n1")])
    p.cycle()
    assert len(placed_slots(rec, "2")[1]) == 1
    p, rec = placer(tmp_path, [held("3", tres_per_node="gres:gpu:1,gres:gpu:3")], [node("n1")])
    p.cycle()
    assert len(placed_slots(rec, "3")[1]) == 3


def test_an_update_of_another_shape_is_never_sent(tmp_path: Path) -> None:
    """slurm_updates.check_update reads the update back: a two-node NodeList for a one-node job, a wrong
    count, or per-node slots that differ are refused before anything reaches Slurm."""
    job = held("1", tres_per_node="gres:gpu:2")
    view = cluster_view.build_view([node("n1"), node("n2")], [job], {}, ("A",))
    shape = shapes.request_shape(job, 4)
    assert not isinstance(shape, str)
    good = slurm_updates.update_for(job, shape, [0, 1], view)
    assert slurm_updates.check_update(shape, good) is None
    split = slurm_updates.update_for(job, shape, [0, 4], view)  # one GPU on each node
    assert slurm_updates.check_update(shape, split) == "2 node(s) in NodeList, the request allows 1..1"
    three = replace(good, tres_per_node="gres:gpu:v100_g0:1,gres:gpu:v100_g1:1,gres:gpu:v100_g2:1")
    assert "3 GPU(s) per node" in (slurm_updates.check_update(shape, three) or "")
    gpus = shapes.request_shape(replace(job, tres_per_node="", tres_per_job="gres:gpu:2", max_nodes=1), 4)
    assert not isinstance(gpus, str) and gpus.user_nodes == (1, 1)
    assert "node(s) in NodeList" in (slurm_updates.check_update(gpus, split) or "")


def test_the_placer_releases_unchanged_what_would_change_shape(tmp_path: Path, monkeypatch) -> None:
    """Defence in depth: even if the plan rendered a wrong update, nothing reshapes the job."""
    p, rec = placer(tmp_path, [held("1", tres_per_node="gres:gpu:2")], [node("n1"), node("n2")])
    real = slurm_updates.update_for
    monkeypatch.setattr(slurm_updates, "update_for", lambda job, shape, gpus, view: replace(
        real(job, shape, gpus, view), node_list="n1,n2"))
    report = p.cycle()
    assert report.released == ["1"] and not report.placed
    assert not [c for c in rec.of("1") if c[0] == "update" and c[2] == "NodeList"]
    comment = [c for c in rec.of("1") if c[0] == "update" and c[2] == "AdminComment"][-1][3]
    assert comment.startswith("pal: released unchanged: placement would change the job's shape")


# --------------------------------------------------------------------------- Slurm's order


def test_held_jobs_are_served_in_slurms_order(tmp_path: Path) -> None:
    """Three free GPUs, six held jobs of different priority (as --nice gives them) and one in a
    PriorityTier=10 partition: the tier job and the two highest priorities are placed, and the
    best GPU goes to the first of them (an earlier placer placed the three lowest, in submit order)."""
    nodes = [node(f"n{i}", used=(1, 2, 3)) for i in (1, 2, 3)]  # minor 0 free on each
    nodes[0] = node("n1", used=(0, 2, 3))  # n1: minor 1 free (slower than minor 0)
    jobs = [held(str(i), priority=prio, submit_time=NOW - 60 + i) for i, prio in
            enumerate([1000 - 500, 1000 - 400, 1000 - 300, 1000 - 200, 1000 - 100, 1000], start=1)]
    jobs.append(held("7", priority=100, partition="hi", submit_time=NOW - 1))
    p, rec = placer(tmp_path, jobs, [replace(n, partitions=("gpu", "hi")) for n in nodes])
    rec.tiers = {"gpu": 1, "hi": 10}
    report = p.cycle()
    assert sorted(report.placed) == ["5", "6", "7"]
    assert placed_slots(rec, "7")[1] == ["v100_g0"], "the first in Slurm's order gets a best GPU"


def test_fifo_order_is_still_available(tmp_path: Path) -> None:
    nodes = [node("n1", used=(1, 2, 3))]
    jobs = [held("1", priority=10, submit_time=NOW - 9), held("2", priority=99999, submit_time=NOW - 1)]
    p, _rec = placer(tmp_path, jobs, nodes, order="fifo")
    assert p.cycle().placed == ["1"]
    p, _rec = placer(tmp_path, jobs, nodes)
    assert p.cycle().placed == ["2"]


def test_a_higher_ranked_job_that_cannot_fit_is_not_overtaken_onto_its_node(tmp_path: Path) -> None:
    """PM-First's class sort must not let a lower-ranked class-A job take the only node with room
    for a higher-ranked class-D job (they would all fit split, but a one-node job cannot split)."""
    nodes = [node("n1", used=(2, 3)), node("n2", used=(1, 2, 3))]  # n1: 2 free, n2: 1 free
    top = held("1", priority=900, tres_per_node="gres:gpu:2", admin_comment="pal:held class=D src=rule")
    low = held("2", priority=100, admin_comment="pal:held class=A src=rule")
    p, rec = placer(tmp_path, [low, top], nodes, policy="pal")
    assert sorted(p.cycle().placed) == ["1", "2"]
    assert placed_slots(rec, "1")[0] == "n1" and placed_slots(rec, "2")[0] == "n2"


# --------------------------------------------------------------------------- nobody stranded


class Slurm2205(Recorder):
    """Refuses an untyped GPU request for a job that carried per-slot types, as Slurm 22.05 does
    (its typed entries stay with count 0 after a clear; shown on the real cluster)."""

    def update_job(self, job_id, fields):  # type: ignore[no-untyped-def]
        for key, value in fields:
            if key in ("TresPerNode", "TresPerJob") and value and not any(i.type for i in parse_tres(value).gpu_items):
                self.calls.append(("refused", job_id, key, value))
                raise SlurmError("Invalid GRES specification (with and without type identification)")
        super().update_job(job_id, fields)


@pytest.mark.parametrize("case,kw", [
    ("BadConstraints", {"state_reason": "BadConstraints", "priority": 0}),
    ("priority 0", {"priority": 0, "state_reason": "None"}),
    ("drained node", {}),
    ("missing slot type", {"tres_per_node": "gres:gpu:v100_g7:1,gres:gpu:v100_g1:1"}),
])
def test_a_stranded_placement_gets_the_users_request_back_and_is_released(tmp_path: Path, case: str, kw) -> None:
    nodes = [node("n1", used=()), node("n2")]
    if case == "drained node":
        nodes[0] = replace(nodes[0], flags=frozenset({"DRAIN"}))
    p, rec = placer(tmp_path, [placed_job("5", **kw)], nodes)
    report = p.cycle()
    assert report.restored == ["5"]
    calls = rec.of("5")
    assert ("update", "5", "TresPerNode", "gres:gpu:2") in calls and ("update", "5", "NodeList", "") in calls
    if kw.get("priority") == 0:
        assert ("release", "5") in calls
    comment = [c for c in calls if c[0] == "update" and c[2] == "AdminComment"][-1][3]
    assert comment.startswith("pal: released restored") and Tag.parse(comment).was == (("tres_per_node", "gres:gpu:2"),)
    # and the same on SIGTERM / release-stale, without a cycle
    p, rec = placer(tmp_path, [placed_job("6", **kw)], nodes)
    assert p.release_all("placer stopped") == ["6"]
    assert ("update", "6", "TresPerNode", "gres:gpu:2") in rec.of("6")


def test_where_slurm_refuses_the_users_request_the_same_shape_is_set_on_slots_that_exist(tmp_path: Path) -> None:
    nodes = [node("n1", used=()), node("n2", used=(0,))]
    nodes[0] = replace(nodes[0], flags=frozenset({"DRAIN"}))
    p, _ = placer(tmp_path, [], nodes)
    rec = Slurm2205([placed_job("5")], nodes)
    p.backend = rec
    report = p.cycle()
    assert report.restored == ["5"]
    calls = rec.of("5")
    assert ("refused", "5", "TresPerNode", "gres:gpu:2") in calls
    # the typed request put back at once (a clear alone would leave it no GPUs), then re-typed:
    # two free slots on the first allowed node that has them (n1 is drained: n2, minors 1, 2)
    sets = [c[3] for c in calls if c[0] == "update" and c[2] == "TresPerNode" and c[3]]
    assert sets[0] == "gres:gpu:v100_g0:1,gres:gpu:v100_g1:1"
    assert sets[-1] == "gres:gpu:v100_g1:1,gres:gpu:v100_g2:1"
    assert [c[3] for c in calls if c[0] == "update" and c[2] == "NodeList"][-1] == "n2"
    job = rec.jobs()[0]
    assert job.required_nodes == "n2" and len(parse_tres(job.tres_per_node).gpu_items) == 2


def test_someone_elses_hold_is_not_ours_to_release(tmp_path: Path) -> None:
    p, rec = placer(tmp_path, [placed_job("5", priority=0, state_reason="JobHeldUser")], [node("n1")])
    assert p.cycle().restored == [] and not rec.of("5")


def test_a_replan_restores_the_users_request_first(tmp_path: Path) -> None:
    stale = placed_job("5", admin_comment=placed_job("5").admin_comment.replace(f"at={int(NOW) - 30}",
                                                                                  f"at={int(NOW) - 500}"))
    p, rec = placer(tmp_path, [stale], [node("n1", used=(0, 1)), node("n2")])
    report = p.cycle()
    assert report.replanned == ["5"]
    calls = [c for c in rec.of("5") if c[0] in ("update", "set_begin")]
    assert calls[0][2] == "AdminComment" and calls[0][3].startswith("pal:held class=A src=replan")
    assert calls[1][0] == "set_begin"
    assert ("update", "5", "TresPerNode", "gres:gpu:2") in calls and ("update", "5", "NodeList", "") in calls
    audit = [r.outcome for r in p.audit.pending]
    assert "replanned" in audit
    # the next cycle places it again, from the user's request, in its shape
    p.clock = lambda: NOW + 1
    report = p.cycle()
    # pal-guard: first fit (n1's two free GPUs); n2's are faster but n2 is whole, and
    # breaking a whole node for a 2-GPU job is a cost the default does not take
    assert report.placed == ["5"] and placed_slots(rec, "5") == ("n1", ["v100_g2", "v100_g3"])


# --------------------------------------------------------------------------- waiting for better GPUs


def waiting_case(tmp_path: Path, **cfg: object):  # type: ignore[no-untyped-def]
    """n1 minor 3 free (the slowest, sf 1.3); every other GPU busy, n2 minor 0 (the fastest)
    held by a job that ends in 60 s; a held class-A job with a one-hour limit."""
    nodes = [node("n1", used=(0, 1, 2)), node("n2", used=(0, 1, 2, 3))]
    runner = SlurmJob(job_id="90", name="r", user="u", state="RUNNING", state_reason="None", priority=1,
                      partition="gpu", submit_time=NOW - 100, nodes="n2", start_time=NOW - 100, end_time=NOW + 60,
                      gres_detail=("gpu:v100_g0:1(IDX:0),gpu:v100_g1:0(IDX:),gpu:v100_g2:0(IDX:),gpu:v100_g3:0(IDX:)",))
    # the other busy GPUs are held by jobs that end in ten hours (a GPU busy for no job is
    # taken as being given back: ProblemBuilder.releasing)
    filler = replace(runner, job_id="91", name="f", nodes="n[1-2]", end_time=NOW + 36000, gres_detail=(
        "gpu:v100_g0:1(IDX:0),gpu:v100_g1:1(IDX:1),gpu:v100_g2:1(IDX:2),gpu:v100_g3:0(IDX:)",
        "gpu:v100_g0:0(IDX:),gpu:v100_g1:1(IDX:1),gpu:v100_g2:1(IDX:2),gpu:v100_g3:1(IDX:3)"))
    jobs = [held("1", time_limit_s=3600.0), runner, filler]
    return placer(tmp_path, jobs, nodes, **cfg)


def test_a_long_job_waits_for_a_fast_gpu_that_frees_soon_and_says_so(tmp_path: Path) -> None:
    p, rec = waiting_case(tmp_path, policy="pal-backfill")
    report = p.cycle()
    assert report.placed == [] and report.waits == ["1"]
    waits = [r for r in p.audit.pending if r.outcome == "waiting"]
    assert len(waits) == 1 and "n2:0" in waits[0].reason and "sooner" in waits[0].reason
    p.cycle()
    assert len([r for r in p.audit.pending if r.outcome == "waiting"]) == 1, "audited once, not every cycle"
    # the fast GPU frees: the job is placed there, and its record says how long it waited
    rec._nodes = [node("n1", used=(0, 1, 2)), node("n2", used=(1, 2, 3))]
    rec._jobs = [j for j in rec._jobs if j.job_id != "90"]
    p.clock = lambda: NOW + 61
    assert p.cycle().placed == ["1"]
    assert placed_slots(rec, "1") == ("n2", ["v100_g0"])
    applied = [r for r in p.audit.pending if r.outcome == "applied"][-1]
    assert "waited 61 s for n2:0" in applied.reason


def test_a_job_waits_for_the_fast_gpu_of_a_job_completing_but_not_of_one_stuck(tmp_path: Path) -> None:
    """A COMPLETING job (cancelled or ended, its epilog running) gives its GPUs back within
    seconds: a long job waits for its fast GPU instead of taking the slow one free now (seen on
    the test cluster: the fast GPU's job was cancelled, the next cycle caught it COMPLETING).
    One COMPLETING longer than COMPLETING_GRACE_S is stuck, and nobody waits for it."""
    from pal_slurm.placement.belief import COMPLETING_GRACE_S

    p, rec = waiting_case(tmp_path, policy="pal-backfill")
    rec._jobs = [replace(j, state="COMPLETING", end_time=NOW - 2) if j.job_id == "90" else j for j in rec._jobs]
    assert p.cycle().waits == ["1"]
    p, rec = waiting_case(tmp_path / "stuck", policy="pal-backfill")
    rec._jobs = [replace(j, state="COMPLETING", end_time=NOW - COMPLETING_GRACE_S - 1) if j.job_id == "90" else j
                 for j in rec._jobs]
    assert p.cycle().placed == ["1"] and placed_slots(rec, "1") == ("n1", ["v100_g3"])


def test_a_gpu_busy_for_no_job_is_being_given_back_for_a_while(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The nodes are read before the jobs: when the fast GPU's job ends in between, the GPU is
    busy in one read and held by no job in the other (seen on the test cluster, the placer
    woken by that job's end). It is taken as a release due now, so the held job waits for it;
    a GPU busy for no job longer than COMPLETING_GRACE_S is not waited for."""
    from pal_slurm.placement.belief import COMPLETING_GRACE_S

    caplog.set_level(logging.INFO, logger="pal_slurm.placer.problem")
    p, rec = waiting_case(tmp_path, policy="pal-backfill")
    rec._jobs = [j for j in rec._jobs if j.job_id != "90"]  # ended; n2:0 still busy in the nodes' read
    report = p.cycle()
    assert report.placed == [] and report.waits == ["1"]
    waits = [r for r in p.audit.pending if r.outcome == "waiting"]
    assert "n2:0" in waits[0].reason, waits[0].reason
    assert "GPUs busy for no running job (taken as being given back for up to 60 s): n2:0" in caplog.text
    p.clock = lambda: NOW + COMPLETING_GRACE_S + 1  # still busy for no job: stuck, or not ours to know
    assert p.cycle().placed == ["1"] and placed_slots(rec, "1") == ("n1", ["v100_g3"])
    assert "busy for no running job for over 60 s" in caplog.text and "n2:0; no job waits for them" in caplog.text


def test_a_drained_nodes_gpus_busy_for_no_job_are_not_being_given_back() -> None:
    """Being given back means usable again soon: not on a node that takes no new jobs."""
    busy = node("n1", used=(0,))
    drained = replace(node("n2", used=(0,)), flags=frozenset({"DRAIN"}))
    view = cluster_view.build_view([busy, drained], [], {}, ["A"], NOW)
    assert [(view.slots[g].node, view.slots[g].minor) for g in view.orphaned] == [("n1", 0)]


def test_with_waiting_off_it_starts_on_the_slow_gpu(tmp_path: Path) -> None:
    p, rec = waiting_case(tmp_path, policy="pal-backfill", wait_fraction=0.0)
    assert p.cycle().placed == ["1"] and placed_slots(rec, "1") == ("n1", ["v100_g3"])


def test_waiting_is_bounded_by_the_estimate(tmp_path: Path) -> None:
    """A job whose estimate is short waits for nothing: 60 s is more than half of 100 s."""
    p, rec = waiting_case(tmp_path, policy="pal-backfill")
    rec._jobs = [replace(j, time_limit_s=100.0) if j.job_id == "1" else j for j in rec._jobs]
    assert p.cycle().placed == ["1"]


def test_a_job_without_a_time_limit_never_waits(tmp_path: Path) -> None:
    p, rec = waiting_case(tmp_path, policy="pal-backfill")
    rec._jobs = [replace(j, time_limit_s=None) if j.job_id == "1" else j for j in rec._jobs]
    assert p.cycle().placed == ["1"]


def test_learned_runtimes_shorten_estimates_but_never_beyond_the_limit(tmp_path: Path) -> None:
    p, _rec = waiting_case(tmp_path)
    job = held("1", time_limit_s=3600.0, user="u", name="train", command="/x.sh")
    from pal_slurm.jobs.fingerprint import fingerprint

    fp = fingerprint("u", "train", "/x.sh")
    assert p.estimate_s(job, {}) == 3600.0
    assert p.estimate_s(job, {fp: 600.0}) == 600.0
    assert p.estimate_s(job, {fp: 9000.0}) == 3600.0
    assert p.estimate_s(replace(job, time_limit_s=None), {fp: 9000.0}) == 9000.0
    run = replace(job, state="RUNNING", start_time=NOW - 100, end_time=NOW + 3500)
    # start + learned, and the grace Slurm's whole-second StartTime needs
    assert p.expected_end(run, {fp: 600.0}, NOW) == NOW + 500 + LEARNED_END_GRACE_S
    assert p.expected_end(run, {fp: 50.0}, NOW) == NOW + 3500  # overdue by the estimate: the limit
    # a job that ran exactly its learned runtime is not overdue within the grace (its start
    # as Slurm says it lies up to a second before its script's); past the grace it is
    assert p.expected_end(run, {fp: 100.0}, NOW) == NOW + LEARNED_END_GRACE_S
    assert p.expected_end(run, {fp: 100.0}, NOW + LEARNED_END_GRACE_S) == NOW + 3500


def test_a_placement_says_when_its_estimate_was_learned_and_from_what(tmp_path: Path) -> None:
    """The imported sacct history (by user + job name) gives the held job's estimate; the
    applied record says it; a learned runtime over the limit is the limit and goes unsaid."""
    from pal_slurm.jobs.runtimes import LearnedRuntimes
    from pal_slurm.placer.cycle import Placer

    learned = LearnedRuntimes(by_name={("u", "j"): 120.0, ("u", "long"): 9000.0})
    p, rec = placer(tmp_path, [held("1", time_limit_s=3600.0), held("2", name="long", time_limit_s=3600.0)],
                    [node("n1")])
    p = Placer(rec, p.cfg, p.factors, p.audit, classes=p.classes, clock=p.clock, history=lambda: learned)
    assert sorted(p.cycle().placed) == ["1", "2"]
    reasons = {r.job_id: r.reason for r in p.audit.pending if r.outcome == "applied"}
    assert reasons["1"].endswith("; runtime estimate 120 s learned from sacct history"), reasons
    assert "runtime estimate" not in reasons["2"], reasons


def test_audit_times_follow_the_injected_clock(tmp_path: Path) -> None:
    p, _rec = placer(tmp_path, [held("1")], [node("n1")])
    p.cycle()
    assert all(r.decided_at.timestamp() == NOW for r in p.audit.pending)


def test_a_cycle_that_changed_something_has_one_line(tmp_path: Path) -> None:
    p, _rec = placer(tmp_path, [held("1"), held("2", tres_per_task="gres:gpu:1", tres_per_node="")], [node("n1")])
    report = p.cycle()
    assert report.changed
    line = report.line()
    assert "\n" not in line and "placed 1 (1)" in line and "released unchanged 1 (2)" in line


def test_stopping_with_grace_keeps_the_filter_holding_briefly(tmp_path: Path) -> None:
    p, _rec = placer(tmp_path, [], [node("n1")])
    p.publish()
    p.release_all("placer stopped", grace_s=10)
    text = (tmp_path / "filter-state").read_text()
    beat = int(text.split("\nheartbeat ")[1].split("\n")[0])
    # fresh for exactly grace_s more seconds (stale_after 30), each new hold at most 15 s
    assert beat == int(NOW) - 20 and "\nhold_s 15\n" in text
    p.release_all("placer stopped")
    assert "\nheartbeat 0\n" in (tmp_path / "filter-state").read_text()


def test_a_restarting_placer_republishes_the_models_it_had(tmp_path: Path) -> None:
    p, _rec = placer(tmp_path, [], [node("n1")])
    p.cycle()
    assert "\nmodel v100\n" in (tmp_path / "filter-state").read_text()
    fresh, _ = placer(tmp_path, [], [])
    fresh.publish()
    assert "\nmodel v100\n" in (tmp_path / "filter-state").read_text()

