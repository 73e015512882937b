"""What every `pal` command shares: one bounded number type, one set of exit codes (2 for usage,
130 for Ctrl-C, 141 for a closed pipe), one output option (--format, --json)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.support.pal_cli import run
from pal_slurm.cli.main import cli, main


def _commands(command=cli, path=()):  # type: ignore[no-untyped-def]
    """(argv path, command) of every command and subcommand."""
    import click

    yield path, command
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            yield from _commands(sub, (*path, name))


def _number_options() -> list[tuple[tuple[str, ...], str]]:
    from pal_slurm.cli.numbers import Real, Whole

    return [(path, p.opts[0]) for path, c in _commands() for p in c.params
            if isinstance(p.type, (Real, Whole)) and p.opts[0].startswith("--")]


def test_every_number_option_takes_the_one_bounded_type() -> None:
    """No option is a bare click INT/FLOAT or an unbounded range: they take nan, inf, 10**18."""
    import click

    from pal_slurm.cli.numbers import Real, Whole

    loose = [f"pal {' '.join(path)} {p.opts[0]}" for path, c in _commands() for p in c.params
             if isinstance(p.type, (click.types.IntParamType, click.types.FloatParamType)) and not getattr(p, "count", False)
             and not isinstance(p.type, (Real, Whole))]
    assert not loose, f"options without a bounded finite type (pal_slurm/cli/numbers.py): {loose}"
    unbounded = [f"pal {' '.join(path)} {p.opts[0]}" for path, c in _commands() for p in c.params
                 if isinstance(p.type, (Real, Whole)) and (p.type.min is None or p.type.max is None)]
    assert not unbounded
    assert len(_number_options()) > 30


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e300", "99999999999999999999"])
def test_every_number_option_refuses_nan_inf_and_huge_values_naming_the_option(runner: CliRunner,
                                                                                value: str) -> None:
    for path, option in _number_options():
        if value == "inf" and option == "--max-factor":  # inf turns that check off (tested below)
            continue
        result = runner.invoke(cli, [*path, option, value], env={"PAL_CONFIG": ""})
        where = f"pal {' '.join(path)} {option} {value}"
        assert result.exit_code == 2, f"{where}: exit {result.exit_code}: {result.output}"
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("pal: error: ") and option in lines[0], (where, lines)


def test_max_factor_keeps_inf_as_off(runner: CliRunner, sqlite_url: str, fleet_file: Path) -> None:
    run(runner, sqlite_url, "db", "upgrade")
    run(runner, sqlite_url, "profile", "import", "--max-factor", "inf", str(fleet_file))
    assert "finite" in run(runner, sqlite_url, "profile", "import", "--max-factor", "nan", str(fleet_file),
                           code=2).stderr


@pytest.mark.parametrize("args", [["--locality-penalty", "nan"], ["--locality-penalty", "inf"],
                                  ["--round-seconds", "nan"], ["--synthetic", "1000000000"],
                                  ["--cluster", "1000000000x4"], ["--cluster", "4x1000"],
                                  ["--cluster", "9" * 5000 + "x4"]])
def test_simulate_refuses_what_used_to_spin_or_crash(runner: CliRunner, args: list[str]) -> None:
    result = runner.invoke(cli, ["simulate", "--variability", "parametric:wide", "--synthetic", "5", *args])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("pal: error: ") and args[0] in result.stderr and "Traceback" not in result.output


@pytest.mark.parametrize("since", ["99999999999999d", "36501d", "tomorrow"])
def test_a_since_beyond_bounds_is_a_usage_error(runner: CliRunner, loaded: str, since: str) -> None:
    for cmd in (["report", "savings"], ["report", "fairness"]):
        result = run(runner, loaded, *cmd, "--since", since, code=2)
        assert result.stderr.count("\n") == 1 and "--since" in result.stderr and "internal error" not in result.stderr
    assert run(runner, loaded, "report", "savings", "--since", "36500d", "--format", "json").stdout


def test_db_current_on_a_newer_schema_says_upgrade_pal_slurm(runner: CliRunner, sqlite_url: str) -> None:
    import sqlite3

    run(runner, sqlite_url, "db", "upgrade")
    with sqlite3.connect(sqlite_url.removeprefix("sqlite:///")) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '9999_from_a_newer_pal'")
    out = run(runner, sqlite_url, "db", "current", code=1).stdout
    assert "upgrade pal-slurm" in out and "pal db upgrade" not in out
    data = json.loads(run(runner, sqlite_url, "db", "current", "--format", "json", code=1).stdout)
    assert data["newer_than_pal"] is True and "upgrade pal-slurm" in data["advice"]
    upgrade = run(runner, sqlite_url, "db", "upgrade", code=1)
    assert upgrade.stderr.startswith("pal: error: ") and "upgrade pal-slurm" in upgrade.stderr


def test_ctrl_c_is_exit_130_with_one_line(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import click

    @click.command("wait")
    def wait() -> None:
        raise KeyboardInterrupt

    monkeypatch.setitem(cli.commands, "wait", wait)
    assert main(["wait"]) == 130
    assert capsys.readouterr().err.strip() == "pal: error: interrupted"
    result = CliRunner().invoke(cli, ["wait"])
    assert result.exit_code == 130 and "Aborted" not in result.output


def test_a_usage_error_is_one_line_naming_the_option(runner: CliRunner) -> None:
    result = runner.invoke(cli, ["gpus", "--format", "xml"])
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("pal: error: ") and "--format" in result.stderr


@pytest.mark.parametrize("argv", [["gpus"], ["gpus", "--wide"], ["report"], ["report", "--format", "csv"],
                                  ["db", "sql", "--dialect", "sqlite"], ["--help"]], ids=" ".join)
def test_a_closed_pipe_is_exit_141_for_every_command(loaded: str, argv: list[str]) -> None:
    """The reader is gone before pal writes (what `| head -1` leaves): rich's tables and click's
    lines end the same way, quietly, with 128 + SIGPIPE."""
    import os

    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run([sys.executable, "-m", "pal_slurm", "--db", loaded, *argv], stdout=write_end,
                              stderr=subprocess.PIPE, text=True, timeout=120, env={**os.environ, "PAL_CONFIG": ""})
    finally:
        os.close(write_end)
    assert proc.returncode == 141, proc.stderr
    assert proc.stderr == ""


def test_json_is_an_alias_of_format_json_everywhere() -> None:
    """Every command that prints takes --format and --json; import's input format is --input-format."""
    missing = [" ".join(path) for path, c in _commands() if not isinstance(c, __import__("click").Group)
               and {"--json", "--format"} - {o for p in c.params for o in p.opts}
               # actions that print one line of what they did, SQL, and JSON itself
               and path not in {("db", "upgrade"), ("db", "sql"), ("db", "roles"), ("jobs", "rule", "delete"),
                                ("jobs", "rule", "export"), ("gpus", "drain"),
                                ("gpus", "quarantine"), ("gpus", "release")}]
    assert not missing, f"commands without --format/--json: {missing}"


def test_import_format_is_the_output_and_input_format_has_its_own_option(runner: CliRunner, sqlite_url: str,
                                                                          fleet_file: Path) -> None:
    run(runner, sqlite_url, "db", "upgrade")
    moved = run(runner, sqlite_url, "profile", "import", "--format", "jsonl", str(fleet_file), code=2)
    assert "--input-format jsonl" in moved.stderr
    data = json.loads(run(runner, sqlite_url, "profile", "import", "--input-format", "jsonl", "--format", "json",
                          str(fleet_file)).stdout)
    assert data[0]["added"] == 136


def test_explain_of_a_job_with_no_decision_is_exit_1(runner: CliRunner, loaded: str) -> None:
    for args in (["explain", "123_4"], ["explain", "123", "--json"], ["placements", "--job", "123"]):
        result = run(runner, loaded, *args, code=1)
        assert result.stderr.startswith("pal: error: ") and "123" in result.stderr and result.stdout == ""


def test_a_rule_is_deleted_by_the_id_add_printed(runner: CliRunner, sqlite_url: str) -> None:
    run(runner, sqlite_url, "db", "upgrade")
    printed = run(runner, sqlite_url, "jobs", "rule", "add", "--class", "D", "--user", "bob").stdout
    rule_id = printed.split()[1].rstrip(":")
    assert rule_id == "rule-1"
    assert "deleted rule-1" in run(runner, sqlite_url, "jobs", "rule", "delete", rule_id).stdout
    number = run(runner, sqlite_url, "jobs", "rule", "add", "--class", "D", "--user", "bob").stdout.split()[1]
    number = number.rstrip(":").removeprefix("rule-")
    assert f"deleted rule-{number}" in run(runner, sqlite_url, "jobs", "rule", "delete", number).stdout
    bad = run(runner, sqlite_url, "jobs", "rule", "delete", "rule-x", code=2)
    assert bad.stderr.startswith("pal: error: ") and "rule-x" in bad.stderr


def test_a_rule_that_contradicts_another_is_refused_unless_replace(runner: CliRunner, sqlite_url: str) -> None:
    run(runner, sqlite_url, "db", "upgrade")
    run(runner, sqlite_url, "jobs", "rule", "add", "--class", "D", "--user", "alice", "--name", "etl")
    clash = run(runner, sqlite_url, "jobs", "rule", "add", "--class", "A", "--user", "alice", "--name", "etl", code=1)
    assert clash.stderr.startswith("pal: error: rule-1 already gives these jobs class D") and "--replace" in clash.stderr
    listed = json.loads(run(runner, sqlite_url, "jobs", "rule", "list", "--json").stdout)
    assert [(r["rule_id"], r["class"]) for r in listed] == [("rule-1", "D")]
    # a rule with other fields is no contradiction; the same rule again changes nothing
    run(runner, sqlite_url, "jobs", "rule", "add", "--class", "A", "--user", "alice")
    assert "nothing changed" in run(runner, sqlite_url, "jobs", "rule", "add", "--class", "D", "--user", "alice",
                                    "--name", "etl").stdout
    replaced = run(runner, sqlite_url, "jobs", "rule", "add", "--class", "A", "--user", "alice", "--name", "etl",
                   "--replace").stdout
    assert "replaced rule-1: class A (was D)" in replaced
    listed = json.loads(run(runner, sqlite_url, "jobs", "rule", "list", "--json").stdout)
    assert sorted((r["rule_id"], r["class"]) for r in listed) == [("rule-1", "A"), ("rule-2", "A")]
