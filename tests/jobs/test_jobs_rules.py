"""Admin rules + learned classes -> the submit filter's rules and the daemon's class lookup.

The pure ordering/export tests need nothing; the learning flow runs through the CLI on
every database backend; the export is fed to the real job_submit.lua (lua5.1) to show the
filter reads our rules as we mean them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import REPO

from pal_slurm.agent.aggregate import JobProfileRecord
from pal_slurm.agent.job_profile_store import write_items
from pal_slurm.cli.main import cli
from pal_slurm.db.engine import make_engine, session_scope
from pal_slurm.jobs.fingerprint import fingerprint
from pal_slurm.db.class_rules_store import load_class_rules
from pal_slurm.db.sensitivity_store import record_identity
from pal_slurm.jobs.rules import (
    AdminRule,
    ClassRuleTable,
    filter_rules,
    resolve_class,
)
from pal_slurm.slurm import filter_state

T0 = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)


def table() -> ClassRuleTable:
    admin = [
        AdminRule(1, None, None, "proj", None, "B"),
        AdminRule(2, "alice", "etl", None, None, "D", "I/O bound"),
        AdminRule(3, "carol", None, None, "debug", "C"),
        AdminRule(4, "bob", None, None, None, "A"),
    ]
    learned = [
        ("fp-alice-train", "alice", "train", "A"),
        ("fp-alice-train2", "alice", "train", "A"),  # another script, same verdict: agreed
        ("fp-dave-a", "dave", "mix", "A"),
        ("fp-dave-b", "dave", "mix", "D"),  # disagreeing scripts: no filter rule
        ("fp-erin", "erin", "graph", "D"),
    ]
    return ClassRuleTable.build(admin, learned)


def test_export_format_and_order() -> None:
    rules = filter_rules(table())
    assert rules == [
        {"user": "alice", "name": "etl", "class": "D", "id": "rule-2"},  # two fields: most specific first
        {"user": "carol", "partition": "debug", "class": "C", "id": "rule-3"},
        {"account": "proj", "class": "B", "id": "rule-1"},  # one field, then by id
        {"user": "bob", "class": "A", "id": "rule-4"},
        {"user": "alice", "name": "train", "class": "A", "id": "learned-fp-alice-train"},
        {"user": "erin", "name": "graph", "class": "D", "id": "learned-fp-erin"},
    ]
    allowed = {"user", "name", "account", "partition", "class", "id"}
    assert all(set(r) <= allowed and {"class", "id"} <= set(r) for r in rules)
    assert all(v is not None for r in rules for v in r.values())  # absent, never None (Lua nil = any)


def test_resolve_order() -> None:
    t = table()
    assert resolve_class(t, "alice", "etl", "x") == ("D", "rule:rule-2")
    assert resolve_class(t, "bob", "anything", "x", account="proj") == ("B", "rule:rule-1")
    assert resolve_class(t, "carol", "x", "y", partition="gpu") == ("A", "default")
    assert resolve_class(t, "carol", "x", "y", partition="debug") == ("C", "rule:rule-3")
    assert resolve_class(t, "alice", "train", "new script") == ("A", "learned-name:fp-alice-train")
    assert resolve_class(t, "dave", "mix", "other") == ("A", "default")  # scripts disagree: nothing by name
    assert resolve_class(t, "dave", "mix", "other", default="C") == ("C", "default")


def test_exact_fingerprint_beats_the_name() -> None:
    fp_a, fp_d = fingerprint("dave", "mix", "gemm.py"), fingerprint("dave", "mix", "pagerank.py")
    t = ClassRuleTable.build([], [(fp_a, "dave", "mix", "A"), (fp_d, "dave", "mix", "D")])
    assert resolve_class(t, "dave", "mix", "gemm.py") == ("A", f"learned:{fp_a}")
    assert resolve_class(t, "dave", "mix", "pagerank.py\n") == ("D", f"learned:{fp_d}")
    assert filter_rules(t) == []  # the filter cannot tell them apart: no rule


# --------------------------------------------------------------------------- the learning flow, per backend

def _profile(job: str, util: float, mem: float, samples: int, end_min: int) -> JobProfileRecord:
    start = T0 + timedelta(minutes=end_min - samples // 60)
    return JobProfileRecord(job, "gpu001", "x", ("GPU-1",), start, T0 + timedelta(minutes=end_min), samples,
                            util, min(100.0, util + 3), None, mem, 250.0, 1400.0)


def test_learn_classes_rules_through_the_cli(db_url: str) -> None:
    runner = CliRunner()

    def pal(*args: str) -> str:
        result = runner.invoke(cli, ["--db", db_url, *args])
        assert result.exit_code == 0, result.output
        return result.output

    pal("db", "upgrade")
    engine = make_engine(db_url)
    try:
        with session_scope(engine) as s:
            jobs = [("101", "alice", "train", "train.py", 90, 30), ("102", "alice", "train", "train.py", 88, 28),
                    ("103", "bob", "pr", "pagerank.py", 50, 80), ("104", "dave", "mix", "gemm.py", 95, 10),
                    ("105", "dave", "mix", "io.py", 10, 5), ("106", "erin", "tiny", "x.py", 90, 10)]
            for job, user, name, cmd, util, mem in jobs:
                record_identity(s, job, user, name, cmd, seen_at=T0)
            record_identity(s, "101", "alice", "train", "train.py", seen_at=T0 + timedelta(hours=1))  # no-op
            samples = {"106": 50}  # too little evidence
            write_items(s, [_profile(j, u, m, samples.get(j, 600), i * 10) for i, (j, _u, _n, _c, u, m)
                            in enumerate(jobs, start=1)])
            write_items(s, [_profile("999", 90, 10, 600, 100)])  # the daemon never saw job 999
        learned = json.loads(pal("jobs", "learn", "--json"))
        assert learned == {"profiles": 6, "unidentified_profiles": 1, "fingerprints": 5, "classified": 4,
                           "by_class": {"A": 2, "D": 2}, "removed": 0}
        rows = {(r["user"], r["name"], r["class"]): r for r in json.loads(pal("jobs", "classes", "--format", "json"))}
        alice = rows[("alice", "train", "A")]
        assert alice["jobs"] == 2 and alice["samples"] == 1200 and alice["gpu_util_mean"] == pytest.approx(89.0)
        assert alice["fingerprint"] == fingerprint("alice", "train", "train.py") and alice["filter_rule"] == "yes"
        assert rows[("dave", "mix", "D")]["filter_rule"].startswith("no")
        assert ("erin", "tiny", "A") not in rows

        assert "added rule-1: class D" in pal("jobs", "rule", "add", "--class", "d", "--user", "bob",
                                              "--partition", "gpu", "--note", "graph jobs")
        exported = json.loads(pal("jobs", "rule", "export"))
        assert exported == [
            {"user": "bob", "partition": "gpu", "class": "D", "id": "rule-1"},
            {"user": "alice", "name": "train", "class": "A",
             "id": f"learned-{fingerprint('alice', 'train', 'train.py')}"},
            {"user": "bob", "name": "pr", "class": "D", "id": f"learned-{fingerprint('bob', 'pr', 'pagerank.py')}"},
        ]
        with session_scope(engine) as s:
            t = load_class_rules(s)
            assert resolve_class(t, "dave", "mix", "gemm.py")[0] == "A"
        assert resolve_class(t, "bob", "pr", "pagerank.py", partition="gpu") == ("D", "rule:rule-1")
        listed = json.loads(pal("jobs", "rule", "list", "--format", "json"))
        assert [(r["id"], r["note"]) for r in listed] == [(1, "graph jobs")]
        pal("jobs", "rule", "delete", "1")
        assert json.loads(pal("jobs", "rule", "list", "--format", "json")) == []

        # learning again from the same profiles changes nothing
        assert json.loads(pal("jobs", "learn", "--json"))["classified"] == 4
    finally:
        engine.dispose()


@pytest.mark.parametrize("args, message", [
    (["--class", "Z", "--user", "x"], "not a configured job class"),
    (["--class", "A"], "at least one of --user"),
    (["--class", "A", "--name", " padded"], "surrounded by spaces"),
])
def test_bad_rules_are_one_line_errors(sqlite_url: str, args: list[str], message: str) -> None:
    runner = CliRunner()
    assert runner.invoke(cli, ["--db", sqlite_url, "db", "upgrade"]).exit_code == 0
    result = runner.invoke(cli, ["--db", sqlite_url, "jobs", "rule", "add", *args])
    assert result.exit_code == 1 and message in result.output and "Traceback" not in result.output
    result = runner.invoke(cli, ["--db", sqlite_url, "jobs", "rule", "delete", "42"])
    assert result.exit_code == 1 and "no class rule 42" in result.output


# --------------------------------------------------------------------------- the real filter reads them

def _lua_literal(value: str) -> str:
    out = []
    for byte in value.encode("utf-8"):
        out.append("\\" + chr(byte) if chr(byte) in '"\\' else chr(byte) if 32 <= byte < 127 else f"\\{byte:03d}")
    return '"' + "".join(out) + '"'


def test_job_submit_lua_matches_like_resolve(tmp_path: Path) -> None:
    from conftest import require_tool

    lua = require_tool("lua5.1", "lua5.1")
    t = table()
    rules = filter_rules(t)
    state = tmp_path / "filter-state"
    state.write_text(filter_state.render(filter_state.FilterState(mode="enforce", heartbeat=0, stale_after=30,
                                                                  rules=filter_state.rules_from(rules))))
    views = [("alice", "etl", "a1", "gpu"), ("bob", "x", "proj", "gpu"), ("carol", "x", "none", "debug"),
             ("alice", "train", "none", "gpu"), ("dave", "mix", "none", "gpu"), ("zed", "q", "none", "gpu")]
    script = tmp_path / "probe.lua"
    script.write_text(
        'slurm = { SUCCESS = 0, ERROR = -1, log_info = function() end, log_error = function() end }\n'
        f'PAL_FILTER_TEST = true\nlocal pal = dofile({_lua_literal(str(REPO / "spank_hooks" / "job_submit.lua"))})\n'
        f'local state = assert(pal.load_state({_lua_literal(str(state))}))\n'
        + "".join(f'print(pal.class_hint({{ user_name = {_lua_literal(u)}, name = {_lua_literal(n)}, '
                  f'account = {_lua_literal(a)}, partition = {_lua_literal(p)} }}, state.rules))\n'
                  for u, n, a, p in views))
    proc = subprocess.run([lua, str(script)], capture_output=True, text=True, timeout=30, check=False)
    assert proc.returncode == 0, proc.stderr
    got = [tuple(line.split("\t")[:2]) for line in proc.stdout.splitlines()]
    expected = []
    for u, n, a, p in views:
        job_class, source = resolve_class(t, u, n, "not learned", account=a, partition=p)
        if source.startswith("rule:"):
            expected.append((job_class, source))
        elif source.startswith("learned-name:"):
            expected.append((job_class, f"rule:learned-{source.split(':', 1)[1]}"))
        else:
            expected.append(("auto", "default"))  # the filter leaves unknown jobs to the daemon
    assert got == expected


def test_the_placer_keeps_its_last_class_rules_while_the_database_is_down(tmp_path: Path):
    """placer/class_rules.ClassRules: rules reloaded every refresh; a failed reload keeps the last
    table (placement goes on with what it knew), and before any table the default class."""
    from types import SimpleNamespace

    from pal_slurm.db.migrate import upgrade
    from pal_slurm.db.sensitivity_store import add_rule
    from pal_slurm.placer.class_rules import ClassRules

    engine = make_engine(f"sqlite:///{tmp_path / 'pal.db'}")
    upgrade(engine)
    with session_scope(engine) as session:
        add_rule(session, "A", ["A", "B", "C", "D"], user="alice")
    now = [0.0]
    up = [True]

    def get_engine():
        if not up[0]:
            raise OSError("database down")
        return engine

    job = SimpleNamespace(user="alice", name="train", command="/bin/true", account=None, partition="gpu")
    down_from_start = ClassRules(lambda: (_ for _ in ()).throw(OSError("down")), 60.0, "D", clock=lambda: now[0])
    assert down_from_start.resolve(job) == ("D", "default")
    rules = ClassRules(get_engine, 60.0, "D", clock=lambda: now[0])
    first = rules.resolve(job)
    assert first[0] == "A"
    up[0] = False
    now[0] = 120.0  # past the refresh: the reload fails, the last table stays
    assert rules.resolve(job) == first
    assert rules.filter_rules() and rules.filter_rules()[0]["class"] == "A"
