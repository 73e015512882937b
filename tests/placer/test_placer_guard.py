"""The placer with the default policy (pal-guard): what reaches Slurm, the filter and `pal explain`."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from pal_eval.fakes import StaticFactors
from pal_slurm.config import PlacerConfig
from pal_slurm.placer.audit import AuditSink
from pal_slurm.placer.cycle import Placer
from pal_slurm.placer.factors import Factors
from pal_slurm.placement.variability import GpuVariability
from tests.support.recording_slurm import CLASSES, NOW, Recorder, held, node, placer


def placed_on(rec: Recorder, job_id: str) -> str | None:
    nodes = [c[3] for c in rec.of(job_id) if c[0] == "update" and c[2] == "NodeList"]
    return nodes[-1] if nodes else None


def test_pal_guard_is_the_default_and_explains_a_variability_choice(tmp_path: Path) -> None:
    # minor m has PerfVar 1.0 + m/10. n1: minor 0 busy, first fit would take minor 1 (1.1);
    # n2 has only minor 0 free (1.0): a tighter fit, 10 % faster, so pal-guard moves the job
    p, rec = placer(tmp_path, [held("1", time_limit_s=3600.0)], [node("n1", used=(0,)), node("n2", used=(1, 2, 3))])
    assert p.policy.name == "pal-guard"
    assert p.cycle().placed == ["1"]
    assert placed_on(rec, "1") == "n2"
    rec_ = next(r for r in p.audit.pending if r.job_id == "1")
    assert "variability choice" in rec_.reason and "instead of first fit's 1.100" in rec_.reason
    assert "saves an expected 0.10 GPU-h" in rec_.reason  # 1 GPU x 1 h x (1.1 - 1.0)


def test_a_first_fit_placement_says_so(tmp_path: Path) -> None:
    # n2 is whole: its fast GPUs are not worth breaking it; first fit stays on n1 minor 1
    p, rec = placer(tmp_path, [held("1")], [node("n1", used=(0,)), node("n2")])
    assert p.cycle().placed == ["1"]
    assert placed_on(rec, "1") == "n1"
    assert "first fit kept" in next(r for r in p.audit.pending if r.job_id == "1").reason


def left_to_slurm_case(tmp_path: Path) -> tuple[Placer, Recorder, list[float]]:
    """A held 2 x 1-GPU job on a flat fleet whose first fit uses other slots on each node (n1
    and n2 have other minors free), and the placer's clock, to be moved by the test."""
    job = held("7", gpus=2, node_count=2)
    nodes = [node("n1", used=(0, 1)), node("n2", used=(2, 3)), node("n3")]
    backend = Recorder([job], nodes)
    flat = {(n.name, m): GpuVariability(perfvar={c: 1.0 for c in CLASSES}, slowdown={c: 1.0 for c in CLASSES})
            for n in nodes for m in range(4)}
    cfg = PlacerConfig(mode="enforce", state_file=str(tmp_path / "state"))
    clock = [NOW]
    p = Placer(backend, cfg, StaticFactors(Factors(by_slot=flat, version=1, loaded_at=NOW)),  # type: ignore[arg-type]
               AuditSink(None), classes=CLASSES, clock=lambda: clock[0])
    return p, backend, clock


def test_a_multi_node_first_fit_is_left_to_slurm_unchanged(tmp_path: Path) -> None:
    # 2 nodes x 2 GPUs, every GPU alike for the job: first fit, which may use other slots on
    # each node than one per-node request could name, so the job is released as submitted
    p, backend, _clock = left_to_slurm_case(tmp_path)
    report = p.cycle()
    assert report.released == ["7"] and report.placed == []
    assert not [c for c in backend.of("7") if c[0] == "update" and c[2] in ("TresPerNode", "NodeList") and c[3]]
    assert any("first fit, left to Slurm" in (c[3] or "") for c in backend.of("7") if c[0] == "update")


def test_the_filter_is_told_which_classes_it_need_not_hold(tmp_path: Path) -> None:
    nodes = [node("n1"), node("n2")]
    by_slot = {(n.name, m): GpuVariability(perfvar={"A": 1.0 + m / 10, "B": 1.0 + m / 10, "C": 1.01, "D": 1.0},
                                           slowdown={"A": 1.0, "B": 1.0, "C": 1.0, "D": 1.0})
               for n in nodes for m in range(4)}
    cfg = PlacerConfig(mode="enforce", state_file=str(tmp_path / "state"))
    p = Placer(Recorder([], nodes), cfg, StaticFactors(Factors(by_slot=by_slot, version=1, loaded_at=NOW)),  # type: ignore[arg-type]
               AuditSink(None), classes=CLASSES, clock=lambda: NOW)
    p.cycle()
    p.cycle()  # the classes found in one cycle go out with the next heartbeat
    # C and D have nothing to choose, A and B have: all are held (all or none, unheld_classes)
    assert "\nunheld " not in (tmp_path / "state").read_text()
    quiet = {k: GpuVariability(perfvar={"A": 1.0, "B": 1.02, "C": 1.01, "D": 1.0}, slowdown=v.slowdown)
             for k, v in by_slot.items()}
    r = Placer(Recorder([], nodes), PlacerConfig(mode="enforce", state_file=str(tmp_path / "quiet")),
               StaticFactors(Factors(by_slot=quiet, version=1, loaded_at=NOW)),  # type: ignore[arg-type]
               AuditSink(None), classes=CLASSES, clock=lambda: NOW)
    r.cycle()
    r.cycle()
    assert "\nunheld A\nunheld B\nunheld C\nunheld D\n" in (tmp_path / "quiet").read_text()
    cfg_off = PlacerConfig(mode="enforce", policy="pal-match", state_file=str(tmp_path / "other"))
    q = Placer(Recorder([], nodes), cfg_off, StaticFactors(Factors(by_slot=by_slot, version=1, loaded_at=NOW)),  # type: ignore[arg-type]
               AuditSink(None), classes=CLASSES, clock=lambda: NOW)
    q.cycle()
    q.cycle()
    assert "\nunheld " not in (tmp_path / "other").read_text()


def test_a_multi_node_first_fit_on_the_same_slots_is_pinned_as_it_would_run(tmp_path: Path) -> None:
    job = held("8", gpus=2, node_count=2)
    nodes = [node("n1", used=(0, 1)), node("n2", used=(0, 1)), node("n3")]
    flat = {(n.name, m): GpuVariability(perfvar={c: 1.0 for c in CLASSES}, slowdown={c: 1.0 for c in CLASSES})
            for n in nodes for m in range(4)}
    backend = Recorder([job], nodes)
    cfg = PlacerConfig(mode="enforce", state_file=str(tmp_path / "state"))
    p = Placer(backend, cfg, StaticFactors(Factors(by_slot=flat, version=1, loaded_at=NOW)),  # type: ignore[arg-type]
               AuditSink(None), classes=CLASSES, clock=lambda: NOW)
    assert p.cycle().placed == ["8"]
    assert placed_on(backend, "8") == "n1,n2"


def test_the_placer_places_nothing_while_slurm_has_not_yet_placed_a_job_left_to_it(tmp_path: Path) -> None:
    """Slurm picks a released-unchanged job's GPUs at its next pass, not necessarily the first
    fit the placer computed; a job placed meanwhile could get the same GPUs and stall (seen on
    a replay cluster: 120 s). So the next cycle waits, until Slurm's scheduler has looked."""
    p, backend, clock = left_to_slurm_case(tmp_path)
    job = backend._jobs[0]
    assert p.cycle().released == ["7"]
    # Slurm's pass has not come: 7 is pending, reason BeginTime, and job 8 is held
    left = replace(job, admin_comment="pal: released unchanged: first fit, left to Slurm", state_reason="BeginTime")
    backend._jobs = [left, held("8")]
    clock[0] = NOW + 1
    report = p.cycle()
    assert report.placed == [] and report.waiting == ["8"]
    # Slurm looked and could not start it (Resources): the placer goes on
    backend._jobs = [replace(left, state_reason="Resources"), held("8")]
    clock[0] = NOW + 2
    assert p.cycle().placed == ["8"]


def test_a_job_left_to_slurm_holds_the_placer_back_for_a_few_seconds_at_most() -> None:
    from pal_slurm.placer.holds import LEFT_TO_SLURM_GRACE_S, slurm_still_placing

    job = replace(held("7"), admin_comment="pal: released unchanged", state_reason="BeginTime")
    left = {"7": NOW}
    assert slurm_still_placing(left, [job], NOW + 1) == ["7"]
    assert slurm_still_placing(left, [job], NOW + LEFT_TO_SLURM_GRACE_S + 1) == [] and left == {}
    left = {"7": NOW}
    assert slurm_still_placing(left, [], NOW + 1) == [] and left == {}  # started and gone from the read
