"""The database roles of `db/role_grants` as SQL: PostgreSQL (row-level security) and MariaDB
(triggers), for `pal db roles` and sql/roles-*.sql.

Why the roles, and what each may do, is `db/role_grants`; this module only writes it in each
server's dialect, and checks a node's login name.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from sqlalchemy.dialects import mysql, postgresql

from pal_slurm.db.models import Base
from pal_slurm.db.role_grants import (
    ALL,
    NODE_GRANTS,
    NODE_ROWS,
    PLACER_GRANTS,
    Grant,
    RoleNames,
    RowRule,
    check_specs,
)
from pal_slurm.errors import InputError

__all__ = ["MYSQL_OWNER_PRIVILEGES", "node_login", "role_sql", "role_statements"]

Dialect = Literal["postgresql", "mysql"]

#: what the owner may do on MariaDB, on the pal database only: the schema (`pal db upgrade`) and
#: every row (the admin commands); not ALL: no GRANT OPTION, no TRIGGER, no routines or events
MYSQL_OWNER_PRIVILEGES = "SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, ALTER, INDEX, REFERENCES"

#: PostgreSQL's longest identifier (NAMEDATALEN - 1)
PG_MAX_NAME = 63


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
    for rule in NODE_ROWS:
        out += _pg_row_policies(rule, names)
    for n in nodes:
        login = q(node_login(n, "postgresql", names))
        out.append(f"DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = "
                   f"{_literal(node_login(n, 'postgresql', names))}) THEN CREATE ROLE {login} LOGIN; END IF; END $$")
        out.append(f"GRANT {node} TO {login}")
    return out


def _pg_row_policies(rule: RowRule, names: RoleNames) -> list[str]:
    """Row-level security of one table a node writes its own rows of: the node's policies, and the
    placer's where it reads or writes the table too (the controller's rows name any node)."""
    q = lambda n: _quote("postgresql", n)  # noqa: E731
    placer, node = q(names.placer), q(names.node)
    pol = lambda role, cmd: q(f"{role}__{cmd}")  # noqa: E731
    t, own = q(rule.table), _pg_own(rule)
    out = [f"ALTER TABLE {t} ENABLE ROW LEVEL SECURITY",
           f"CREATE POLICY {pol(names.node, 'select')} ON {t} FOR SELECT TO {node} "
           f"USING ({own if rule.read_own else 'true'})",
           f"CREATE POLICY {pol(names.node, 'insert')} ON {t} FOR INSERT TO {node} WITH CHECK ({own})"]
    if any(g.table == rule.table and g.update for g in NODE_GRANTS):
        # a GPU no node holds yet (imported without one) may be claimed; never one of another node
        using = f"{own} OR node_id IS NULL" if rule.kind == "node_id" else own
        out.append(f"CREATE POLICY {pol(names.node, 'update')} ON {t} FOR UPDATE TO {node} "
                   f"USING ({using}) WITH CHECK ({own})")
    mine = [g for g in PLACER_GRANTS if g.table == rule.table]
    if any(g.select for g in mine):
        out.append(f"CREATE POLICY {pol(names.placer, 'select')} ON {t} FOR SELECT TO {placer} USING (true)")
    if any(g.insert for g in mine):
        out.append(f"CREATE POLICY {pol(names.placer, 'insert')} ON {t} FOR INSERT TO {placer} WITH CHECK (true)")
    if any(g.update for g in mine):
        out.append(f"CREATE POLICY {pol(names.placer, 'update')} ON {t} FOR UPDATE TO {placer} "
                   "USING (true) WITH CHECK (true)")
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
