"""The database roles of pal_slurm/db/role_grants.py (as roles.py writes them) on the real
PostgreSQL and MariaDB servers.

Each test creates the roles in a throwaway database with the generated SQL (as the server's
administrator, as an admin would), connects as each role and shows:

- a GPU node writes its own measurements and job profiles through the real profiler and agent
  stores, and cannot write classifications, class rules, another node's GPUs, nodes,
  measurements, job profiles or flags, nor change or delete any job profile;
- the placer does exactly what the placer does: real cycles of a Placer (its database thread,
  as the daemon runs) read the classes, rules and runtime history and write placements, marks,
  identities and accounting as `pal_placer`, and nothing beyond that is granted
  (test_db_roles_placer.py);
- the owner migrates the schema with no more than its grants (MariaDB; on PostgreSQL it owns it).

Roles are global to a server and tests run side by side, so every test names its own roles
(RoleNames with a random tag); they are dropped afterwards.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, func, select, text
from sqlalchemy.exc import SQLAlchemyError

from tests.support.role_db import T, RoleDb, refused, run_script
from pal_slurm.agent.aggregate import JobProfileRecord
from pal_slurm.agent.job_profile_store import GpuFlagRecord, load_node_facts, write_items
from pal_slurm.db.engine import session_scope
from pal_slurm.db.models import Gpu, GpuFlag, JobProfile, Node, ProfileRun
from pal_slurm.db.roles import node_login, role_statements
from pal_slurm.errors import PalError
from pal_slurm.gpu.interface import InventoryScan, scan_inventory
from pal_slurm.gpu.simulated import SimBackend
from pal_slurm.gpu.simulated_fleet import make_fleet
from pal_slurm.profiler.benchmarks import select_benchmarks
from pal_slurm.profiler.inventory import store_inventory
from pal_slurm.profiler.run_store import save_inventory
from pal_slurm.profiler.service import RunRequest, profile_node

FLEET = make_fleet(nodes=2, gpus_per_node=4, seed=5)


#: how each server refuses a node's row of another node: row-level security, the triggers
OTHERS_ROW = ("violates row-level security policy", "pal: node gpu001 may not write")


def not_its_own(message: str) -> str:
    assert any(m in message for m in OTHERS_ROW), f"refused for another reason: {message}"
    return message


def nothing_changed(engine: Engine, sql: str, params: dict[str, Any] | None = None) -> str:
    """PostgreSQL's row-level security hides the rows a role may not update: the UPDATE runs and
    changes none. MariaDB's triggers refuse it. Either way the rows stay as they are."""
    try:
        with engine.begin() as conn:
            count = conn.execute(text(sql), params or {}).rowcount
    except SQLAlchemyError as exc:
        return not_its_own(str(getattr(exc, "orig", exc)).splitlines()[0])
    assert count == 0, f"{count} row(s) changed: {sql}"
    assert engine.dialect.name == "postgresql", "MariaDB's trigger refuses it, it does not skip it"
    return "0 rows"


def _profile(engine: Engine, node: str, tmp_path: Path, busy: tuple[int, ...] = ()) -> Any:
    """`pal profile run` on `node` (simulated GPUs, simulated benchmarks), stored through `engine`."""
    backend = SimBackend(FLEET, [node], busy=busy)
    req = RunRequest(benchmarks=tuple(select_benchmarks("stream")), passes=2, sim_start=T)
    try:
        return profile_node(backend, req, data_dir=tmp_path / node, engine_factory=lambda: engine)
    finally:
        backend.close()


def _uuids(node: str) -> list[str]:
    return [g.uuid for g in FLEET.gpus if g.node == node]


def _job(node: str, job: str, user: str = "alice") -> JobProfileRecord:
    return JobProfileRecord(slurm_job_id=job, node=node, user=user, gpu_uuids=tuple(_uuids(node)[:1]),
                            started_at=T, ended_at=T + timedelta(hours=1), samples=3600, gpu_util_mean=90.0,
                            gpu_util_p95=99.0, sm_active_mean=None, mem_bw_util_mean=None, power_w_mean=250.0,
                            sm_clock_mhz_mean=1400.0)


def _flag(node: str, uuid_: str) -> GpuFlagRecord:
    return GpuFlagRecord(gpu_uuid=uuid_, node=node, kind="clock_drift", expected_mhz=1500.0, observed_mhz=1100.0,
                         detail="test", flagged_at=T)


# --------------------------------------------------------------------------- the GPU nodes


def test_a_node_stores_its_own_measurements_and_job_profiles(roles: RoleDb, tmp_path: Path) -> None:
    """The node's real work, as its own login: inventory, a profiling run (scores and a busy
    GPU's failure), the agent's job profile and flag, and the facts the agent reads back."""
    node = roles.nodes["gpu001"]
    out = _profile(node, "gpu001", tmp_path, busy=(1,))
    assert out.db_error is None, out.db_error
    assert out.saved.imported.added == 6 and out.saved.failures_added == 1
    assert len(out.saved.inventory.added) == 4
    again = save_inventory(node, scan_inventory(SimBackend(FLEET, ["gpu001"])))  # its GPUs updated in place
    assert sorted(again.updated) == sorted(_uuids("gpu001"))
    with session_scope(node) as s:
        done = write_items(s, [_job("gpu001", "101"), _flag("gpu001", _uuids("gpu001")[0])])
    assert (done.profiles, done.flags) == (1, 1)
    with session_scope(node) as s:  # a retry after a lost commit: found, not written twice
        again2 = write_items(s, [_job("gpu001", "101"), _flag("gpu001", _uuids("gpu001")[0])])
        facts = load_node_facts(s, _uuids("gpu001"))
    assert (again2.profiles_skipped, again2.flags_skipped) == (1, 1)
    assert set(facts.scores) == set(_uuids("gpu001")) - {_uuids("gpu001")[1]}
    assert facts.open_flags == {_uuids("gpu001")[0]}
    with session_scope(roles.owner) as s:
        assert s.scalar(select(func.count()).select_from(ProfileRun)) == 6
        assert s.scalar(select(func.count()).select_from(JobProfile)) == 1
        assert {n for n, in s.execute(select(Node.name))} == {"gpu001"}


def _both_nodes_profiled(roles: RoleDb, tmp_path: Path) -> tuple[Any, int, int]:
    """Both nodes profiled and gpu002 with a job profile; what gpu001 must not change of gpu002's
    (its first GPU's serial and id, its node's id), as the owner reads them before."""
    me, other = roles.nodes["gpu001"], roles.nodes["gpu002"]
    assert _profile(me, "gpu001", tmp_path).db_error is None
    assert _profile(other, "gpu002", tmp_path).db_error is None
    with session_scope(other) as s:
        write_items(s, [_job("gpu002", "202", user="bob")])
    with session_scope(roles.owner) as s:
        theirs = s.scalars(select(Gpu).where(Gpu.uuid == _uuids("gpu002")[0])).one()
        their_node = s.scalar(select(Node.id).where(Node.name == "gpu002"))
        serial_before = theirs.serial
        their_gpu_id = theirs.id
    return serial_before, their_gpu_id, their_node


def _the_admins_tables_are_refused(roles: RoleDb, me: Engine) -> None:
    """Classifications and class rules: neither by SQL nor through the rule store's own code."""
    assert "denied" in refused(me, "INSERT INTO classification_runs (version, created_at, params, note) "
                                   "VALUES (99, :t, '{}', 'forged')", {"t": T})
    assert "denied" in refused(me, "UPDATE gpu_classes SET slowdown = 1.0")
    assert "denied" in refused(me, "INSERT INTO class_rules (user, job_class, note, created_at) "
                                   "VALUES ('mallory', 'A', '', :t)".replace("user", "\"user\"" if roles.kind ==
                                                                                "postgres" else "`user`"), {"t": T})
    with pytest.raises(PalError) as err:
        from pal_slurm.db.sensitivity_store import add_rule

        with session_scope(me) as s:
            add_rule(s, "A", ["A", "B", "C", "D"], user="mallory")
    assert "denied" in str(err.value)


def _another_nodes_gpus_are_refused(me: Engine, their_node: int) -> None:
    """Changed, claimed by a scan that moves them, or created on it."""
    nothing_changed(me, "UPDATE gpus SET serial = 'forged' WHERE uuid = :u", {"u": _uuids("gpu002")[0]})
    nothing_changed(me, "UPDATE gpus SET node_id = (SELECT id FROM nodes WHERE name = 'gpu001') WHERE uuid = :u",
                    {"u": _uuids("gpu002")[0]})
    moved = replace(scan_inventory(SimBackend(FLEET, ["gpu002"])).gpus[0], node="gpu001")
    with pytest.raises(PalError) as err:  # even past the code's own refusal (allow_move), the database says no
        with session_scope(me) as s:
            store_inventory(s, InventoryScan(backend="sim", nodes=("gpu001",), gpus=(moved,)), allow_move=True)
    # PostgreSQL: the other node's row is hidden from the UPDATE (0 rows); MariaDB: the trigger
    assert "0 were matched" in str(err.value) or "may not write GPU" in str(err.value), err.value
    not_its_own(refused(me, "INSERT INTO gpus (uuid, node_id, model, first_seen, last_seen, state) "
                "VALUES ('GPU-forged', :n, 'V100', :t, :t, 'present')", {"n": their_node, "t": T}))
    assert "denied" in refused(me, "DELETE FROM gpus WHERE uuid = :u", {"u": _uuids("gpu002")[0]})


def _another_nodes_rows_are_refused(roles: RoleDb, me: Engine, their_gpu_id: int) -> None:
    """Its measurements, node row, job profiles and flags."""
    not_its_own(refused(me, "INSERT INTO profile_runs (run_key, gpu_id, benchmark_id, started_at, score, unit, lower_is_better, "
                "source, imported_at) SELECT 'forged', :g, id, :t, 1.0, 'x', false, 'x', :t FROM benchmarks",
            {"g": their_gpu_id, "t": T}))
    not_its_own(refused(me, "INSERT INTO nodes (name, first_seen, last_seen) VALUES ('gpu003', :t, :t)", {"t": T}))
    nothing_changed(me, "UPDATE nodes SET last_seen = :t WHERE name = 'gpu002'", {"t": T + timedelta(days=9)})
    with pytest.raises(PalError) as err:
        with session_scope(me) as s:
            write_items(s, [_job("gpu002", "666", user="bob")])
    not_its_own(str(err.value))
    with pytest.raises(PalError) as err:
        with session_scope(me) as s:
            write_items(s, [_flag("gpu002", _uuids("gpu002")[0])])
    not_its_own(str(err.value))
    user = '"user"' if roles.kind == "postgres" else "`user`"
    assert "denied" in refused(me, f"UPDATE job_profiles SET {user} = 'mallory'")
    assert "denied" in refused(me, "DELETE FROM job_profiles")
    assert "denied" in refused(me, f"SELECT {user}, fingerprint FROM job_profiles")  # who ran what: not the node's
    if roles.kind == "postgres":  # and on PostgreSQL not even another node's profiles' ids
        with me.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM job_profiles")).scalar() == 0


def test_a_node_cannot_write_what_is_not_its_own(roles: RoleDb, tmp_path: Path) -> None:
    me = roles.nodes["gpu001"]
    serial_before, their_gpu_id, their_node = _both_nodes_profiled(roles, tmp_path)
    # the admin's tables: classifications and class rules
    _the_admins_tables_are_refused(roles, me)
    # another node's GPUs: changed, claimed by a scan that moves them, or created on it
    _another_nodes_gpus_are_refused(me, their_node)
    # another node's measurements, node row, job profiles and flags
    _another_nodes_rows_are_refused(roles, me, their_gpu_id)

    with session_scope(roles.owner) as s:
        theirs = s.scalars(select(Gpu).where(Gpu.uuid == _uuids("gpu002")[0])).one()
        assert theirs.serial == serial_before and theirs.node_id == their_node
        assert s.scalar(select(func.count()).select_from(Gpu)) == 8
        assert s.scalar(select(func.count()).select_from(JobProfile)) == 1
        assert s.scalar(select(func.count()).select_from(GpuFlag)) == 0
        assert {n for n, in s.execute(select(Node.name))} == {"gpu001", "gpu002"}
        assert s.execute(select(JobProfile.node, JobProfile.user)).all() == [("gpu002", "bob")]


def test_the_role_script_runs_again_unchanged(roles: RoleDb) -> None:
    """Rerun after every `pal db upgrade`: the second run succeeds and the roles work as before."""
    run_script(roles.admin, role_statements(roles.dialect, database=roles.database,  # type: ignore[arg-type]
                                             nodes=["gpu001", "gpu002"], names=roles.names))
    with session_scope(roles.nodes["gpu001"]) as s:
        assert write_items(s, [_job("gpu001", "1")]).profiles == 1
    assert "denied" in refused(roles.nodes["gpu001"], "DELETE FROM job_profiles")


# --------------------------------------------------------------------------- without a server


def test_every_table_of_the_models_has_a_decision() -> None:
    """A new table is in no role's list until someone decides who may touch it."""
    from sqlalchemy import Column, Integer, Table

    from pal_slurm.db.models import Base
    from pal_slurm.db.role_grants import check_specs

    check_specs()
    extra = Table("new_table", Base.metadata, Column("id", Integer, primary_key=True))
    try:
        with pytest.raises(AssertionError, match=r"tables no role grant names .*new_table"):
            check_specs()
    finally:
        Base.metadata.remove(extra)


def test_node_logins_are_checked_and_named(runner) -> None:
    from pal_slurm.cli.main import cli
    from pal_slurm.errors import InputError

    assert node_login("gpu-01.a", "postgresql") == "pal_node_gpu-01.a"
    with pytest.raises(InputError, match="not one Slurm node name"):
        node_login("gpu[01-04]", "mysql")
    with pytest.raises(InputError, match="longer than PostgreSQL's 63 bytes"):
        node_login("n" * 55, "postgresql")
    assert node_login("n" * 55, "mysql") == "pal_node_" + "n" * 55
    out = runner.invoke(cli, ["db", "roles", "--dialect", "postgresql", "--node", "gpu001", "--node", "GPU-2"])
    assert out.exit_code == 0, out.output
    assert 'GRANT pal_node TO "pal_node_GPU-2";' in out.output and "GRANT pal_node TO pal_node_gpu001;" in out.output
    statements = [line for line in out.output.splitlines() if not line.startswith("--")]
    assert not any("PASSWORD" in line.upper() for line in statements), "a login's password is set at a prompt"
    out = runner.invoke(cli, ["db", "roles", "--dialect", "mysql", "--database", "site_pal", "--node", "gpu001"])
    assert out.exit_code == 0 and "USE `site_pal`;" in out.output
    assert "CREATE USER IF NOT EXISTS 'pal_node_gpu001'@'%' ACCOUNT LOCK;" in out.output
    bad = runner.invoke(cli, ["db", "roles", "--dialect", "mysql", "--node", "a b"])
    assert bad.exit_code == 1 and "not one Slurm node name" in bad.output
