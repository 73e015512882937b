"""placer/writer.py, the one place the placer writes to Slurm, over a recording backend: the
clear-then-set rule, the mode check, the log of every write, and audit records that carry
the job's user and account whatever their outcome."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import pytest

from pal_slurm.placer import shapes, slurm_updates
from pal_slurm.placer.audit import AuditSink
from pal_slurm.placer.cluster_view import build_view
from pal_slurm.placer.cycle import Placer
from pal_slurm.placer.writer import Writer
from tests.support.recording_slurm import placed_job
from tests.support.recording_slurm import NOW, Recorder, held, node, placer


def test_retype_clears_then_sets() -> None:
    rec = Recorder([held("1")], [node("n1")])
    w = Writer(rec, AuditSink(None), policy="p", mode="enforce", clock=lambda: NOW)  # type: ignore[arg-type]
    w.retype("1", [("TresPerNode", "gres:gpu:v100_g0:1"), ("NodeList", "n1")], clear=("TresPerJob", "TresPerNode"))
    assert rec.calls == [("update", "1", "TresPerJob", ""), ("update", "1", "TresPerNode", ""),
                         ("update", "1", "TresPerNode", "gres:gpu:v100_g0:1"), ("update", "1", "NodeList", "n1")]


def test_a_placement_is_written_only_in_enforce_mode() -> None:
    job = held("1")
    rec = Recorder([job], [node("n1")])
    view = build_view([node("n1")], [job], {}, ("A",))
    shape = shapes.request_shape(job, 4)
    assert not isinstance(shape, str)
    update = slurm_updates.update_for(job, shape, [0], view)
    w = Writer(rec, AuditSink(None), policy="p", mode="observe", clock=lambda: NOW)  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="only in enforce mode"):
        w.apply(job, update, "pal: placed ...")
    assert rec.calls == []


def test_the_log_names_every_write_in_order(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The debug log is the cycle's dry run: one line per command, in the order it was sent."""
    p, rec = placer(tmp_path, [held("1"), held("2", submit_time=NOW - 10_000)], [node("n1")], max_hold_s=600)
    sent: list[str] = []
    update_job, start_now = rec.update_job, rec.start_now

    def update(job_id: str, fields: list[tuple[str, str]]) -> None:
        sent.append(f"job {job_id}: scontrol update " + " ".join(f"{k}={v}" for k, v in fields))
        update_job(job_id, fields)

    def start(job_id: str) -> None:
        sent.append(f"job {job_id}: start now")
        start_now(job_id)

    rec.update_job, rec.start_now = update, start  # type: ignore[method-assign]
    with caplog.at_level(logging.DEBUG, logger="pal_slurm.placer.job_writes"):
        report = p.cycle()
    assert report.placed == ["1"] and report.released == ["2"]
    said = [r.getMessage() for r in caplog.records if r.name == "pal_slurm.placer.job_writes"]
    assert said == sent and len(sent) == 7
    assert said[2].startswith("job 1: scontrol update AdminComment=pal:held class=A src=default "
                              "was=tres_per_node:gres:gpu:1 set=gres:gpu:v100_g0:1 on=n1"), "recorded first"
    assert said[3:5] == ["job 1: scontrol update TresPerNode=",
                         "job 1: scontrol update TresPerNode=gres:gpu:v100_g0:1 NodeList=n1"], "clear, then set"


def test_every_audit_record_carries_the_jobs_user_and_account(tmp_path: Path) -> None:
    """Applied, released, restored and re-planned in one cycle; observed in another."""
    jobs = [held("1", account="acct"), held("2", account="acct", submit_time=NOW - 10_000),
            placed_job("3", account="acct", state_reason="BadConstraints"), placed_job("4", account="acct")]
    p, _rec = placer(tmp_path, jobs, [node("n1", used=(0, 1)), node("n2")], max_hold_s=600, replan_after_s=10)
    p.cycle()
    by_outcome = {r.outcome: r for r in p.audit.pending}
    assert sorted(by_outcome) == ["applied", "released-unchanged", "replanned", "restored"]
    assert {(r.user, r.account) for r in p.audit.pending} == {("u", "acct")}
    assert all(r.submitted_at is not None for r in p.audit.pending)
    fresh = replace(held("5", account="acct"), admin_comment="", state_reason="Resources")
    p, _rec = placer(tmp_path, [fresh], [node("n1")])
    p = Placer(p.backend, p.cfg.model_copy(update={"mode": "observe"}), p.factors, AuditSink(None), classes=p.classes,
               clock=p.clock)
    assert p.cycle().observed == ["5"]
    assert [(r.outcome, r.user, r.account) for r in p.audit.pending] == [("observe", "u", "acct")]


def test_every_write_checks_the_mode() -> None:
    """Observe mode writes only to fail open: each write that holds or places a job is refused
    before anything reaches Slurm, and each that ends a hold, restores a request or labels a
    job goes through (observe mode releases what an enforce run left held or placed)."""
    job = held("1")
    view = build_view([node("n1")], [job], {}, ("A",))
    shape = shapes.request_shape(job, 4)
    assert not isinstance(shape, str)
    update = slurm_updates.update_for(job, shape, [0], view)
    rec = Recorder([job], [node("n1")])
    w = Writer(rec, AuditSink(None), policy="p", mode="observe", clock=lambda: NOW)  # type: ignore[arg-type]
    steering = {
        "apply": lambda: w.apply(job, update, "pal: placed ..."),
        "verify": lambda: w.verify([]),
        "set_begin": lambda: w.set_begin("1", NOW + 60),
        "hold_again": lambda: w.hold_again(job, "pal:held class=A src=replan", NOW + 60),
    }
    for name, write in steering.items():
        with pytest.raises(RuntimeError, match="only in enforce mode, not observe"):
            write()
        assert rec.calls == [], f"{name} reached Slurm in observe mode"
    fail_open = {
        "update": lambda: w.update("1", [("NodeList", "")]),
        "release": lambda: w.release("1"),
        "start_now": lambda: w.start_now("1"),
        "unhold": lambda: w.unhold(job),
        "comment": lambda: w.comment("1", "pal: released unchanged: x"),
        "clear": lambda: w.clear("1"),
        "retype": lambda: w.retype("1", [("TresPerNode", "gres:gpu:v100_g0:1")]),
        "change": lambda: w.change("1", ["TresPerNode"], [("TresPerNode", "gres:gpu:1")]),
        "put_back": lambda: w.put_back(placed_job("1")),
        "release_unchanged": lambda: w.release_unchanged(job, "placer is in observe mode"),
    }
    for name, write in fail_open.items():
        before = len(rec.calls)
        write()
        assert len(rec.calls) > before, f"{name} wrote nothing in observe mode"
    w.mode = "enforce"
    assert w.hold_again(job, "pal:held class=A src=replan", NOW + 60)
    assert rec.calls[-2:] == [("update", "1", "AdminComment", "pal:held class=A src=replan"),
                              ("set_begin", "1", str(int(NOW + 60)))]
    w.mode = "dry-run"  # a mode no write knows: every write refused
    for write in (*steering.values(), *fail_open.values()):
        with pytest.raises(RuntimeError, match="not dry-run"):
            write()


def test_an_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="placer mode 'dry-run': one of enforce, observe"):
        Writer(Recorder([], []), AuditSink(None), policy="p", mode="dry-run",  # type: ignore[arg-type]
               clock=lambda: NOW)
