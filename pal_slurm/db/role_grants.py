"""Database roles with the least each part of pal-slurm needs: what each may do, table by table.

Why: every GPU node and the controller reach the one database, and a node is the easiest host
to take over. With one all-powerful account on every node, a node could rewrite the
classification the placer places by, the admins' class rules, or another node's GPUs. Three
identities instead:

- **the owner** (`pal`): owns the schema, runs `pal db upgrade` and the admin commands
  (`pal classify`, `pal jobs rule`, imports). Kept on the admins' machines only.
- **the placer** (`pal_placer`, on the controller): reads the classification, the class rules
  and the runtime history (job profiles, job history, job identities, job sensitivity), and
  writes what pal_slurm.placer writes: `placements` (its audit records and their start/end
  marks), `job_accounting`, `job_identities`; and what `pal gpus learn` (pal-gpus-learn.service,
  on the controller with the placer's login) learns from that ledger: `gpu_passive_speed` and the
  fail-slow `gpu_flags` (opening them, clearing those a re-profile answered). Nothing else.
- **the GPU nodes** (group `pal_node`, one login `pal_node_<node>` per node: the node's name as
  pal-slurm stores it, its Slurm node name): `pal agent` and `pal profile run|inventory` insert
  the node's own measurements (its node row, its GPUs, profile runs and benchmark failures of
  its GPUs, the job profiles and GPU flags of its jobs) and read what they compare against.
  Row by row, a node writes only its own: on PostgreSQL by row-level security policies keyed on
  the connecting role's name, on MariaDB (no row-level security) by triggers keyed on the
  session's login name (USER()).

The table lists below are read off the code (each entry says where); `tests/db/test_db_roles.py`
and `test_db_roles_placer.py` run the node's and the placer's real database work as these roles on
both servers, and a test fails when a table of the models is in no list, so a new table gets a
decision.

What MariaDB cannot enforce, and PostgreSQL does: reads by row. A node's login there can read
every node's job profiles' id, job id, node and start (the columns it must read to skip a job
it stored already), never their user, command fingerprint or figures (column privileges), and
every node's GPU flags' GPU, node, kind and clearing. On PostgreSQL an UPDATE of another node's
row changes nothing (row-level security hides the row); MariaDB's trigger refuses it.

`db/roles` renders these lists as SQL for each server.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pal_slurm.db.models import Base

__all__ = ["ALL", "NODE_GRANTS", "NODE_ROWS", "OWNER_ONLY", "PLACER_GRANTS", "Grant", "RoleNames", "RowRule",
           "check_specs"]

ALL: Literal["*"] = "*"
Columns = tuple[str, ...] | Literal["*"] | None


@dataclass(frozen=True)
class Grant:
    """What one role may do on one table: SELECT and UPDATE of every column (ALL) or of some
    (a tuple; column privileges), INSERT and DELETE of whole rows; `why` names the code."""

    table: str
    select: Columns = None
    insert: bool = False
    update: Columns = None
    delete: bool = False
    why: str = ""


@dataclass(frozen=True)
class RoleNames:
    """The role names; tests use their own (roles are global to a server, tests run side by side)."""

    owner: str = "pal"
    placer: str = "pal_placer"
    node: str = "pal_node"
    #: a node's login is this prefix and its node name
    node_prefix: str = "pal_node_"


#: pal placer (pal_slurm.placer and what it calls)
PLACER_GRANTS: tuple[Grant, ...] = (
    Grant("alembic_version", select=ALL, why="db.migrate.require_current: the schema check before reading"),
    Grant("benchmarks", select=ALL, why="db.variability_store.load_variability (classification_store)"),
    Grant("classification_runs", select=ALL, why="load_variability: the latest classification"),
    Grant("classification_results", select=ALL, why="load_variability, the metrics exporter (report.service)"),
    Grant("classification_bins", select=ALL, why="classification_store.load_classification"),
    Grant("gpu_classes", select=ALL, why="classification_store.load_classification"),
    Grant("gpus", select=ALL, why="load_variability (minor numbers), the metrics exporter"),
    Grant("nodes", select=ALL, why="classification_store.load_classification (node names)"),
    Grant("profile_runs", select=ALL, why="the metrics exporter's clocks (report.service.load_gpu_rows); pal gpus "
          "learn: when each GPU was last profiled (services.passive)"),
    Grant("class_rules", select=ALL, why="db.class_rules_store.load_class_rules"),
    Grant("job_sensitivity", select=ALL, why="db.class_rules_store.load_class_rules (learned classes)"),
    Grant("job_profiles", select=("fingerprint", "slurm_job_id", "started_at", "duration_s"),
          why="db.sensitivity_store.learned_runtimes (runtimes by fingerprint)"),
    Grant("job_history", select=ALL, why="db.history_store.HistoryReader (runtimes by user and name)"),
    Grant("job_identities", select=ALL, insert=True, update=("user", "name", "command", "fingerprint", "first_seen"),
          why="db.sensitivity_store.record_identities, every GPU job the placer sees"),
    # `id`: an ORM insert of one row reads its new key back (INSERT ... RETURNING id)
    Grant("placements", select=("id", "slurm_job_id", "outcome", "started_at", "ended_at"), insert=True,
          update=("started_at", "ended_at"), why="placer.audit.AuditSink.flush: records and start/end marks"),
    Grant("job_accounting", select=("id", "slurm_job_id", "fingerprint", "job_class", "gpus", "runtime_s", "started_at",
                                    "ended_at", "time_limit_s"), insert=True,
          why="db.accounting_store.AccountingSink.flush; pal gpus learn reads the runs (db.passive_store.load_runs), "
              "never who ran them (user, account, partition)"),
    Grant("gpu_flags", select=("id", "gpu_uuid", "node", "kind", "detail", "flagged_at", "cleared_at"), insert=True,
          update=("cleared_at",),
          why="db.passive_store: the metrics exporter's pal_gpu_flag; pal gpus learn (pal-gpus-learn.service, the "
              "placer's login) opens fail-slow flags and clears those a re-profile answered"),
    Grant("gpu_passive_speed", select=ALL, insert=True, delete=True,
          why="db.passive_store: the metrics exporter and placement by it ([classification] passive = use); "
              "pal gpus learn replaces the estimates"),
)

#: pal agent (agent.job_profile_store), pal profile run|inventory (profiler.run_store,
#: profiler.inventory, db.measurement_store.import_records)
NODE_GRANTS: tuple[Grant, ...] = (
    Grant("alembic_version", select=ALL, why="db.migrate.require_current"),
    Grant("nodes", select=ALL, insert=True, update=("last_seen",),
          why="profiler.inventory._node, measurement_store._ensure_nodes: its own node row"),
    Grant("gpus", select=ALL, insert=True,
          update=tuple(c.name for c in Base.metadata.tables["gpus"].columns if c.name not in ("id", "uuid")),
          why="profiler.inventory.store_inventory, gpu_identity.resolve_gpus: its own GPUs; reads the "
              "fleet's GPUs of a model to judge a new score (ingest.validate)"),
    Grant("benchmarks", select=ALL, insert=True, why="measurement_store.create_benchmark: a benchmark new to the "
          "database (shared names, never changed)"),
    Grant("profile_runs", select=ALL, insert=True,
          why="measurement_store.import_records: its GPUs' runs; reads stored scores (ingest.validate) and "
              "agent.job_profile_store.load_node_facts' expected clocks"),
    Grant("benchmark_failures", select=("id", "run_key"), insert=True,
          why="profiler.run_store.save_run: its GPUs' failed benchmarks"),
    Grant("classification_runs", select=ALL, why="agent.job_profile_store.load_node_facts"),
    Grant("gpu_classes", select=ALL, why="agent.job_profile_store.load_node_facts (metrics, drift)"),
    Grant("job_profiles", select=("id", "slurm_job_id", "node", "started_at"), insert=True,
          why="agent.job_profile_store.write_items: its jobs' profiles, once each"),
    Grant("gpu_flags", select=("id", "gpu_uuid", "node", "kind", "cleared_at"), insert=True,
          why="agent.job_profile_store.write_items, load_node_facts: its GPUs' re-profiling requests"),
)

#: tables only the owner touches, and why
OWNER_ONLY: dict[str, str] = {
    "job_classes": "pal classify (classification_store.sync_job_classes); the placer reads classes by run",
}


@dataclass(frozen=True)
class RowRule:
    """Which rows of `table` a node may write (and with `read_own`, read): `kind` says how a row
    names its node."""

    table: str
    kind: Literal["name", "node_id", "gpu_id", "node"]
    read_own: bool = False


#: the node's row rules: PostgreSQL row-level security, MariaDB triggers
NODE_ROWS: tuple[RowRule, ...] = (
    RowRule("nodes", "name"),
    RowRule("gpus", "node_id"),
    RowRule("profile_runs", "gpu_id"),
    RowRule("benchmark_failures", "gpu_id"),
    RowRule("job_profiles", "node", read_own=True),
    RowRule("gpu_flags", "node", read_own=True),
)


def check_specs() -> None:
    """Every table and column named here exists in the models, and every table of the models
    has a decision (a grant or OWNER_ONLY): raises AssertionError naming what does not."""
    tables = Base.metadata.tables
    for grant in (*PLACER_GRANTS, *NODE_GRANTS):
        if grant.table == "alembic_version":
            continue
        assert grant.table in tables, f"{grant.table}: no such table in the models"
        for cols in (grant.select, grant.update):
            if isinstance(cols, tuple):
                missing = [c for c in cols if c not in tables[grant.table].columns]
                assert not missing, f"{grant.table}: no column {missing}"
    decided = {g.table for g in (*PLACER_GRANTS, *NODE_GRANTS)} | set(OWNER_ONLY)
    undecided = sorted(set(tables) - decided)
    assert not undecided, f"tables no role grant names (add them to role_grants.py): {undecided}"
    for rule in NODE_ROWS:
        assert any(g.table == rule.table and g.insert for g in NODE_GRANTS), f"{rule.table}: a row rule, no insert"
