"""The placer's database role on the real PostgreSQL and MariaDB servers (the roles, and what the
GPU nodes may do: test_db_roles.py).

Real cycles of a Placer (its database thread, as the daemon runs) read the classes, rules and
runtime history and write placements, marks, identities and accounting as `pal_placer`, and
nothing beyond that is granted.
"""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import select

from tests.support.role_db import T, RoleDb, refused
from pal_slurm.db.engine import session_scope
from pal_slurm.db.models import JobAccounting, JobIdentity, JobProfile, Placement


def _the_admins_side(roles: RoleDb, tmp_path: Path) -> None:
    """What the admin writes, as the owner: measurements, a classification, a class rule, the
    runtime history the placer learns from."""
    from pal_slurm.services.classification import run_classification
    from pal_slurm.config import DatabaseConfig, PalConfig
    from pal_slurm.db.models import JobHistory
    from pal_slurm.demo.cluster_gpus import records
    from pal_slurm.db.measurement_store import import_records
    from pal_slurm.db.sensitivity_store import add_rule

    owner_cfg = PalConfig(database=DatabaseConfig(url="sqlite://"), data_dir=tmp_path)
    with session_scope(roles.owner) as s:
        import_records(s, records())
        add_rule(s, "A", ["A", "B", "C", "D"], user="u", note="test")
        for i in range(4):
            s.add(JobHistory(source="c", slurm_job_id=f"h{i}", user="u", name="j", started_at=T - timedelta(days=i),
                             elapsed_s=3600.0, state="COMPLETED", gpus=1, nodes=1, imported_at=T))
            s.add(JobProfile(slurm_job_id=f"p{i}", node="pal-n1", user="u", gpu_uuids=[], gpus=1,
                             started_at=datetime.now(UTC) - timedelta(days=i + 1),
                             ended_at=datetime.now(UTC) - timedelta(days=i + 1) + timedelta(hours=1),
                             duration_s=3600.0, samples=1, fingerprint="f" * 16))
    run_classification(roles.owner, owner_cfg, note="role test")


def _placer_as_pal_placer(roles: RoleDb, tmp_path: Path) -> tuple[Any, Any, Any, Any]:
    """The daemon, as pal_placer, on a recorded Slurm holding one job: its configuration, the
    placer, the thread that does its database work (as `pal placer` runs it), the recording."""
    from pal_slurm.config import DatabaseConfig, PalConfig, PlacerConfig
    from pal_slurm.demo.cluster_gpus import NODES
    from pal_slurm.placer.service import build_placer
    from tests.support.recording_slurm import Recorder, held, node

    cfg = PalConfig(database=DatabaseConfig(url=roles.urls["placer"]), data_dir=tmp_path,
                    placer=PlacerConfig(mode="enforce", state_file=str(tmp_path / "filter-state"),
                                        classes_refresh_s=600.0))
    p = build_placer(cfg, lambda: roles.placer, background_db=True)
    worker = p.runner.__self__  # type: ignore[union-attr]
    now = time.time()
    job = replace(held("1"), begin_time=now + 80, submit_time=now - 5)
    backend = Recorder([job], [node(n) for n in NODES])  # type: ignore[list-item]
    p.backend = backend  # type: ignore[assignment]
    return cfg, p, worker, backend


def _cycles_place_start_and_end_a_job(roles: RoleDb, p: Any, worker: Any, backend: Any) -> None:
    """Cycles whose database work, as pal_placer, all succeeds: the job's identity, its placement,
    its start and end marks, its accounting record, and a new job's identity."""
    from tests.support.recording_slurm import held, running

    def cycle() -> Any:
        report = p.cycle()
        assert worker.drain(30), "the database thread did not finish"
        assert worker.errors == 0, f"the placer's database work failed as {roles.names.placer}: {worker.last_error}"
        return report

    cycle()  # reads the classes, the rules and the history; records the job's identity
    assert cycle().placed == ["1"]  # places by the classes read as pal_placer; the decision recorded
    placed = backend.jobs()[0]
    at, minor = placed.required_nodes, int(placed.tres_per_node.split(":")[-2].removeprefix("v100_g"))
    backend._jobs = [running(placed, at, (minor,), start=time.time())]  # noqa: SLF001
    cycle()  # a placed job started: its mark
    backend._jobs = [replace(held("2", user="v", name="other"), begin_time=time.time() + 80,  # noqa: SLF001
                             submit_time=time.time())]
    cycle()  # the first job ended: its end mark and its accounting record; a new job's identity
    assert not p.audit.waiting and p.audit.last_error is None
    assert p.accounting is not None and p.accounting.sink.last_error is None and not p.accounting.sink.pending


def _what_the_placer_wrote(roles: RoleDb) -> None:
    """As the owner reads it: both placements, the reason learned from the history, both
    identities, one accounting record."""
    with session_scope(roles.owner) as s:
        got = s.execute(select(Placement.slurm_job_id, Placement.outcome, Placement.started_at.is_not(None),
                               Placement.ended_at.is_not(None)).where(Placement.outcome == "applied")).all()
        assert sorted(got) == [("1", "applied", True, True), ("2", "applied", False, False)]
        reason = s.scalar(select(Placement.reason).where(Placement.slurm_job_id == "1"))
        assert "learned from sacct history" in reason, "the runtime history was read as pal_placer"
        assert {i for i, in s.execute(select(JobIdentity.slurm_job_id))} == {"1", "2"}
        assert s.execute(select(JobAccounting.slurm_job_id, JobAccounting.mode)).all() == [("1", "enforce")]


def _nothing_beyond_it(roles: RoleDb) -> None:
    """The placer may not touch the admin's or the nodes' tables, rewrite or delete its own
    decisions and accounting, nor read the accounting or who ran which job."""
    placer = roles.placer
    assert "denied" in refused(placer, "UPDATE gpu_classes SET slowdown = 1.0")
    assert "denied" in refused(placer, "DELETE FROM class_rules")
    assert "denied" in refused(placer, "UPDATE gpus SET serial = 'x'")
    assert "denied" in refused(placer, "INSERT INTO nodes (name, first_seen, last_seen) VALUES ('n', :t, :t)",
                               {"t": T})
    assert "denied" in refused(placer, "UPDATE placements SET reason = 'rewritten'")
    assert "denied" in refused(placer, "DELETE FROM placements")
    assert "denied" in refused(placer, "DELETE FROM job_accounting")
    assert "denied" in refused(placer, "SELECT * FROM job_accounting")
    assert "denied" in refused(placer, "DELETE FROM gpu_flags")
    assert "denied" in refused(placer, "UPDATE gpu_flags SET kind = 'x'")
    assert "denied" in refused(placer, "UPDATE gpu_passive_speed SET factor = 1.0")
    user = '"user"' if roles.kind == "postgres" else "`user`"
    assert "denied" in refused(placer, f"SELECT {user} FROM job_profiles")
    assert "denied" in refused(placer, f"SELECT {user} FROM job_accounting")


def test_the_placer_does_what_the_placer_does_as_pal_placer(roles: RoleDb, tmp_path: Path) -> None:
    from pal_slurm.db.advisory_lock import AdvisoryLock
    from pal_slurm.report.service import load_gpu_rows

    # the admin's side, as the owner: measurements, a classification, a class rule, history
    _the_admins_side(roles, tmp_path)

    # the daemon, as pal_placer: its database work on its own thread, as `pal placer` runs it
    cfg, p, worker, backend = _placer_as_pal_placer(roles, tmp_path)
    _cycles_place_start_and_end_a_job(roles, p, worker, backend)

    # the metrics exporter's reads (start_metrics) and the advisory lock, as pal_placer
    rows = load_gpu_rows(roles.placer, None, cfg)
    assert len(rows) == 16

    # pal gpus learn (pal-gpus-learn.service runs it with the placer's login): reads the runs of the
    # ledger, replaces the passive estimates, opens and clears flags
    from pal_slurm.services.passive import learn

    learned = learn(roles.placer, cfg, apply=True)
    assert learned.applied
    from pal_slurm.classification.failslow import FailSlowFlag
    from pal_slurm.db.passive_store import SlotGpu, clear_reprofiled, open_fail_slow

    uuid, node = rows[0]["uuid"], rows[0]["node"]
    flag = FailSlowFlag(gpu=uuid, job_class="A", at=0.0, cusum=13.0, jobs=("1",), passive_factor=1.4,
                        benchmark_factor=1.0)
    with session_scope(roles.placer) as s:  # a flag of any node's GPU, raised before its profile runs
        assert open_fail_slow(s, [flag], {uuid: SlotGpu(1, uuid, node, 0, 0.0)}, datetime.now(UTC)) == [flag]
    with session_scope(roles.placer) as s:
        assert clear_reprofiled(s, datetime.now(UTC)) == [(uuid, "fail_slow")]
    lock = AdvisoryLock(roles.placer)
    assert lock.acquire() and lock.held
    lock.release()

    _what_the_placer_wrote(roles)

    # and nothing beyond it
    _nothing_beyond_it(roles)
    worker.stop()
