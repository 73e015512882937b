"""Database roles with the least each part of pal-slurm needs, as SQL for PostgreSQL and MariaDB.

Why: every GPU node and the controller reach the one database, and a node is the easiest host
to take over. With one all-powerful account on every node, a node could rewrite the
classification the placer places by, the admins' class rules, or another node's GPUs. Three
identities instead:

- **the owner** (`pal`): owns the schema, runs `pal db upgrade` and the admin commands
  (`pal classify`, `pal jobs rule`, imports). Kept on the admins' machines only.
- **the placer** (`pal_placer`, on the controller): reads the classification, the class rules
  and the runtime history (job profiles, job history, job identities, job sensitivity), and
  writes what pal_slurm.placer writes: `placements` (its audit records and their start/end
  marks), `job_accounting`, `job_identities`. Nothing else.
- **the GPU nodes** (group `pal_node`, one login `pal_node_<node>` per node: the node's name as
  pal-slurm stores it, its Slurm node name): `pal agent` and `pal profile run|inventory` insert
  the node's own measurements (its node row, its GPUs, profile runs and benchmark failures of
  its GPUs, the job profiles and GPU flags of its jobs) and read what they compare against.
  Row by row, a node writes only its own: on PostgreSQL by row-level security policies keyed on
  the connecting role's name, on MariaDB (no row-level security) by triggers keyed on the
  session's login name (USER()).

The table lists below are read off the code (each entry says where); `tests/test_db_roles.py`
runs the placer's and the node's real database work as these roles on both servers, and a test
fails when a table of the models is in no list, so a new table gets a decision.

What MariaDB cannot enforce, and PostgreSQL does: reads by row. A node's login there can read
every node's job profiles' id, job id, node and start (the columns it must read to skip a job
it stored already), never their user, command fingerprint or figures (column privileges), and
every node's GPU flags' GPU, node, kind and clearing. On PostgreSQL an UPDATE of another node's
row changes nothing (row-level security hides the row); MariaDB's trigger refuses it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from sqlalchemy.dialects import mysql, postgresql

from pal_slurm.db.models import Base
from pal_slurm.errors import InputError

__all__ = ["NODE_GRANTS", "OWNER_ONLY", "PLACER_GRANTS", "Grant", "RoleNames", "node_login", "role_sql",
           "role_statements"]

Dialect = Literal["postgresql", "mysql"]
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
    Grant("profile_runs", select=ALL, why="the metrics exporter's clocks (report.service.load_gpu_rows)"),
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
    Grant("job_accounting", select=("id",), insert=True, why="db.accounting_store.AccountingSink.flush"),
)

#: pal agent (agent.job_profile_store), pal profile run|inventory (profiler.run_store,
#: profiler.inventory, db.measurement_store.import_records)
NODE_GRANTS: tuple[Grant, ...] = (
    Grant("alembic_version", select=ALL, why="db.migrate.require_current"),
    Grant("nodes", select=ALL, insert=True, update=("last_seen",),
          why="profiler.inventory._node, measurement_store._ensure_nodes: its own node row"),
    Grant("gpus", select=ALL, insert=True,
          update=tuple(c.name for c in Base.metadata.tables["gpus"].columns if c.name not in ("id", "uuid")),
          why="profiler.inventory.store_inventory, measurement_store._Identity: its own GPUs; reads the "
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

#: what the owner may do on MariaDB, on the pal database only: the schema (`pal db upgrade`) and
#: every row (the admin commands); not ALL: no GRANT OPTION, no TRIGGER, no routines or events
MYSQL_OWNER_PRIVILEGES = "SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, ALTER, INDEX, REFERENCES"

#: PostgreSQL's longest identifier (NAMEDATALEN - 1)
PG_MAX_NAME = 63


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
    assert not undecided, f"tables no role grant names (add them to roles.py): {undecided}"
    for rule in NODE_ROWS:
        assert any(g.table == rule.table and g.insert for g in NODE_GRANTS), f"{rule.table}: a row rule, no insert"


def node_login(node: str, dialect: Dialect, names: RoleNames = RoleNames()) -> str:
    """The database login of GPU node `node`: the prefix and the node's name; InputError when
    the name is not a Slurm node name or the login would be too long for the server."""
    from pal_slurm.slurm.gresconf import name_problem

    problem = name_problem(node, "node")
    if problem is not None:
        raise InputError(problem)
    login = names.node_prefix + node
    if dialect == "postgresql" and len(login.encode()) > PG_MAX_NAME:
        raise InputError(f"node {node}: its login {login!r} is longer than PostgreSQL's {PG_MAX_NAME} bytes "
                         f"(node names of at most {PG_MAX_NAME - len(names.node_prefix)} characters)")
    return login


# -- rendering -----------------------------------------------------------------------------------

def _quote(dialect: Dialect, name: str) -> str:
    """An identifier as the dialect writes it: PostgreSQL quotes only where needed (reserved
    words such as "user", capitals, '-'), MariaDB always (backticks)."""
    if dialect == "mysql":
        return mysql.dialect().identifier_preparer.quote_identifier(name)
    return postgresql.dialect().identifier_preparer.quote(name)


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _like_prefix(prefix: str) -> str:
    """A LIKE pattern for names that start with `prefix` (its _ and % escaped with \\)."""
    return prefix.replace("\\", "\\\\").replace("_", "\\_").replace("%", "\\%") + "%"


def _privileges(dialect: Dialect, grant: Grant) -> list[str]:
    out = []
    for verb, cols in (("SELECT", grant.select), ("UPDATE", grant.update)):
        if cols == ALL:
            out.append(verb)
        elif cols:
            out.append(f"{verb} ({', '.join(_quote(dialect, c) for c in cols)})")
    if grant.insert:
        out.append("INSERT")
    if grant.delete:
        out.append("DELETE")
    return out


def _pg_sequences(grants: Sequence[Grant]) -> list[str]:
    """The sequences behind the integer keys of the tables the role inserts into (SERIAL)."""
    out = []
    for g in grants:
        table = Base.metadata.tables.get(g.table)
        if g.insert and table is not None and any(c.autoincrement is not False and c.primary_key
                                                  for c in table.primary_key.columns):
            out.append(f"{g.table}_id_seq")
    return out


def _pg_own(rule: RowRule) -> str:
    """The PostgreSQL condition that a row belongs to the connecting node."""
    if rule.kind == "name":
        return "name = pal_node_name()"
    if rule.kind == "node":
        return "node = pal_node_name()"
    if rule.kind == "node_id":
        return "node_id IN (SELECT n.id FROM nodes n WHERE n.name = pal_node_name())"
    return ("gpu_id IN (SELECT g.id FROM gpus g JOIN nodes n ON n.id = g.node_id "
            "WHERE n.name = pal_node_name())")


def _postgresql(database: str, nodes: Sequence[str], names: RoleNames) -> list[str]:
    q = lambda n: _quote("postgresql", n)  # noqa: E731
    placer, node = q(names.placer), q(names.node)
    both = f"{placer}, {node}"
    out = [
        f"DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = {_literal(names.placer)}) THEN "
        f"CREATE ROLE {placer} LOGIN; END IF; END $$",
        f"DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = {_literal(names.node)}) THEN "
        f"CREATE ROLE {node} NOLOGIN; END IF; END $$",
        # from nothing, every run: what an earlier version of this file granted and this one does not goes
        f"REVOKE ALL ON ALL TABLES IN SCHEMA public FROM {both}",
        f"REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM {both}",
        "REVOKE CREATE ON SCHEMA public FROM PUBLIC",  # PostgreSQL < 15 lets every role create tables
        f"GRANT CONNECT ON DATABASE {q(database)} TO {both}",
        f"GRANT USAGE ON SCHEMA public TO {both}",
    ]
    for role, grants in ((placer, PLACER_GRANTS), (node, NODE_GRANTS)):
        for g in grants:
            out.append(f"GRANT {', '.join(_privileges('postgresql', g))} ON {q(g.table)} TO {role}")
        seqs = _pg_sequences(grants)
        if seqs:
            out.append(f"GRANT USAGE ON SEQUENCE {', '.join(seqs)} TO {role}")
    # the node a login belongs to: its name after the prefix (NULL for every other role)
    out.append(
        "CREATE OR REPLACE FUNCTION pal_node_name() RETURNS text LANGUAGE sql STABLE AS "
        f"$$ SELECT CASE WHEN current_user::text LIKE {_literal(_like_prefix(names.node_prefix))} "
        f"THEN substr(current_user::text, {len(names.node_prefix) + 1}) END $$")
    out.append(f"GRANT EXECUTE ON FUNCTION pal_node_name() TO {both}")
    ours = ", ".join(_literal(f"{r}__") for r in (names.placer, names.node))
    out.append(
        "DO $$ DECLARE p record; BEGIN FOR p IN SELECT policyname, tablename FROM pg_policies "
        f"WHERE schemaname = 'public' AND left(policyname, strpos(policyname, '__') + 1) IN ({ours}) LOOP "
        "EXECUTE format('DROP POLICY %I ON %I', p.policyname, p.tablename); END LOOP; END $$")
    placer_reads = {g.table for g in PLACER_GRANTS if g.select}
    for rule in NODE_ROWS:
        t, own = q(rule.table), _pg_own(rule)
        out.append(f"ALTER TABLE {t} ENABLE ROW LEVEL SECURITY")
        pol = lambda role, cmd: q(f"{role}__{cmd}")  # noqa: E731
        out.append(f"CREATE POLICY {pol(names.node, 'select')} ON {t} FOR SELECT TO {node} "
                   f"USING ({own if rule.read_own else 'true'})")
        out.append(f"CREATE POLICY {pol(names.node, 'insert')} ON {t} FOR INSERT TO {node} WITH CHECK ({own})")
        if any(g.table == rule.table and g.update for g in NODE_GRANTS):
            # a GPU no node holds yet (imported without one) may be claimed; never one of another node
            using = f"{own} OR node_id IS NULL" if rule.kind == "node_id" else own
            out.append(f"CREATE POLICY {pol(names.node, 'update')} ON {t} FOR UPDATE TO {node} "
                       f"USING ({using}) WITH CHECK ({own})")
        if rule.table in placer_reads:
            out.append(f"CREATE POLICY {pol(names.placer, 'select')} ON {t} FOR SELECT TO {placer} USING (true)")
    for n in nodes:
        login = q(node_login(n, "postgresql", names))
        out.append(f"DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = "
                   f"{_literal(node_login(n, 'postgresql', names))}) THEN CREATE ROLE {login} LOGIN; END IF; END $$")
        out.append(f"GRANT {node} TO {login}")
    return out


def _my_user(name: str) -> str:
    return f"{_literal(name)}@'%'"


def _my_trigger(rule: RowRule, when: Literal["INSERT", "UPDATE"], names: RoleNames) -> str:
    """A MariaDB BEFORE trigger that refuses a node login's row of another node (USER() is the
    session's login, also inside a trigger, where CURRENT_USER() is the trigger's definer)."""
    skip = len(names.node_prefix) + 1
    me_node = f"SUBSTRING(me, {skip})"
    own_node_id = f"(SELECT id FROM nodes WHERE name = {me_node})"
    if rule.kind == "name":
        bad = f"NOT (NEW.name <=> {me_node})" + (f" OR NOT (OLD.name <=> {me_node})" if when == "UPDATE" else "")
        what = "CONCAT('node ', NEW.name)"
    elif rule.kind == "node":
        bad = f"NOT (NEW.node <=> {me_node})"
        what = f"CONCAT('a row of node ', IFNULL(NEW.node, 'NULL'))"
    elif rule.kind == "node_id":
        bad = f"NOT IFNULL(NEW.node_id = {own_node_id}, FALSE)"
        if when == "UPDATE":
            bad += f" OR (OLD.node_id IS NOT NULL AND NOT IFNULL(OLD.node_id = {own_node_id}, FALSE))"
        what = "CONCAT('GPU ', NEW.uuid, ' of another node')"
    else:
        bad = ("NOT EXISTS (SELECT 1 FROM gpus g JOIN nodes n ON n.id = g.node_id "
               f"WHERE g.id = NEW.gpu_id AND n.name = {me_node})")
        what = "CONCAT('a measurement of GPU id ', NEW.gpu_id, ', not one of its GPUs')"
    name = f"{names.node}__{rule.table}_{when.lower()}"
    return (f"CREATE OR REPLACE TRIGGER {_quote('mysql', name)} BEFORE {when} ON {_quote('mysql', rule.table)} "
            "FOR EACH ROW BEGIN\n"
            "  DECLARE me VARCHAR(255) DEFAULT SUBSTRING_INDEX(USER(), '@', 1);\n"
            "  DECLARE msg VARCHAR(512);\n"
            f"  IF me LIKE {_literal(_like_prefix(names.node_prefix))} AND ({bad}) THEN\n"
            f"    SET msg = CONCAT('pal: node ', {me_node}, ' may not write ', {what});\n"
            "    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = msg;\n"
            "  END IF;\n"
            "END")


def _mysql(database: str, nodes: Sequence[str], names: RoleNames) -> list[str]:
    db = _quote("mysql", database)
    owner, placer, node = _my_user(names.owner), _my_user(names.placer), _quote("mysql", names.node)
    out = [
        f"USE {db}",
        f"CREATE USER IF NOT EXISTS {owner} ACCOUNT LOCK",
        f"CREATE USER IF NOT EXISTS {placer} ACCOUNT LOCK",
        f"CREATE ROLE IF NOT EXISTS {node}",
        # from nothing, every run: an older GRANT ALL, or what an earlier version of this file granted
        # (the owner's first GRANT makes sure there is a grant to revoke: MariaDB refuses to revoke none)
        f"GRANT SELECT ON {db}.* TO {owner}",
        f"REVOKE GRANT OPTION ON {db}.* FROM {owner}",
        f"REVOKE ALL PRIVILEGES ON {db}.* FROM {owner}",
        f"REVOKE ALL PRIVILEGES, GRANT OPTION FROM {placer}",
        f"REVOKE ALL PRIVILEGES, GRANT OPTION FROM {node}",
        f"GRANT {MYSQL_OWNER_PRIVILEGES} ON {db}.* TO {owner}",
    ]
    for role, grants in ((placer, PLACER_GRANTS), (node, NODE_GRANTS)):
        for g in grants:
            out.append(f"GRANT {', '.join(_privileges('mysql', g))} ON {db}.{_quote('mysql', g.table)} TO {role}")
    for rule in NODE_ROWS:
        out.append(_my_trigger(rule, "INSERT", names))
        if any(g.table == rule.table and g.update for g in NODE_GRANTS):
            out.append(_my_trigger(rule, "UPDATE", names))
    for n in nodes:
        login = _my_user(node_login(n, "mysql", names))
        out += [f"CREATE USER IF NOT EXISTS {login} ACCOUNT LOCK", f"GRANT {node} TO {login}",
                f"SET DEFAULT ROLE {node} FOR {login}"]
    return out


def role_statements(dialect: Dialect, *, database: str = "pal", nodes: Sequence[str] = (),
                    names: RoleNames = RoleNames()) -> list[str]:
    """The statements that create the roles and grant them what they need, one SQL statement
    each (no terminator): what `role_sql` renders, and what a client runs one by one. Rerunning
    them is safe, and needed after `pal db upgrade` (new tables, new columns)."""
    check_specs()
    if not database or any(c in database for c in "`\"'\\\0"):
        raise InputError(f"database name {database!r}: no quotes or backslashes")
    if dialect == "postgresql":
        return _postgresql(database, nodes, names)
    if dialect == "mysql":
        return _mysql(database, nodes, names)
    raise ValueError(f"dialect {dialect!r}: postgresql or mysql")


def _header(dialect: Dialect, database: str, names: RoleNames) -> str:
    client = ("sudo -u postgres psql -v ON_ERROR_STOP=1 -d " + database + " -f FILE" if dialect == "postgresql"
              else "mariadb < FILE (as root, over the server's socket)")
    login = (f'\\password {names.placer}' if dialect == "postgresql"
             else f"ALTER USER '{names.placer}'@'%' IDENTIFIED BY '...' ACCOUNT UNLOCK;")
    return "\n".join([
        f"-- pal-slurm database roles ({dialect}), generated by `pal db roles --dialect {dialect}`: do not edit.",
        "-- Run it as the server's administrator after `pal db upgrade` (and again after every upgrade):",
        f"--   {client}",
        f"-- owner {names.owner}: the schema and the admin commands; {names.placer}: the placement daemon;",
        f"-- {names.node}: the GPU nodes, one login {names.node_prefix}<node> each (`pal db roles --node NAME`),",
        "-- writing only their own rows. Logins are created without a password (MariaDB: locked); set one",
        f"-- at the client's prompt, never on a command line: {login}",
        "-- docs/admin-guide.md, \"Database\", says what each role may do and why.",
        "",
    ])


def role_sql(dialect: Dialect, *, database: str = "pal", nodes: Sequence[str] = (),
             names: RoleNames = RoleNames()) -> str:
    """`role_statements` as a script for the server's own client (psql, mariadb): what
    `pal db roles` prints and sql/roles-*.sql hold. PostgreSQL runs it in one transaction;
    MariaDB's triggers are written between DELIMITER lines (their bodies hold semicolons)."""
    stmts = role_statements(dialect, database=database, nodes=nodes, names=names)
    lines = [_header(dialect, database, names)]
    if dialect == "postgresql":
        lines.append("BEGIN;\n")
        lines += [s + ";\n" for s in stmts]
        lines.append("COMMIT;\n")
    else:
        for s in stmts:
            if s.startswith("CREATE OR REPLACE TRIGGER"):
                lines.append("DELIMITER //\n" + s + " //\nDELIMITER ;\n")
            else:
                lines.append(s + ";\n")
    return "".join(lines)
