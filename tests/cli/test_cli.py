"""The `pal` CLI in-process through click's CliRunner: output, exit codes, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import ARTIFACT_CONFIG, DATA
from tests.support.fleetgen import records, two_tier_fleet
from pal_slurm.cli.main import cli, main
from pal_slurm.ingest.jsonl import dump_jsonl


def run(runner: CliRunner, url: str, *args: str, code: int = 0):
    result = runner.invoke(cli, ["--db", url, *args], env={"PAL_CONFIG": ARTIFACT_CONFIG})
    assert result.exit_code == code, f"exit {result.exit_code}: {result.output}"
    assert "Traceback" not in result.output
    return result


@pytest.fixture
def fleet_file(tmp_path: Path) -> Path:
    recs = records(two_tier_fleet(), benchmark="resnet50") + records(two_tier_fleet(), benchmark="pagerank", tag="p")
    path = tmp_path / "fleet.jsonl"
    path.write_text(dump_jsonl(recs))
    return path


@pytest.fixture
def loaded(runner: CliRunner, sqlite_url: str, fleet_file: Path) -> str:
    run(runner, sqlite_url, "db", "upgrade")
    run(runner, sqlite_url, "profile", "import", str(fleet_file))
    run(runner, sqlite_url, "classify", "--allow-partial")  # no bert runs: classes B and C unprofiled
    return sqlite_url


def test_help_lists_commands(runner: CliRunner) -> None:
    result = runner.invoke(cli, ["--help"])
    assert result.exit_code == 0
    for cmd in ("config", "db", "profile", "classify", "report", "gpus", "demo"):
        assert cmd in result.output


def test_db_upgrade_and_current(runner: CliRunner, sqlite_url: str) -> None:
    # a SQLite file that does not exist is refused by everything but `db upgrade` (a typo is not a new database)
    missing = run(runner, sqlite_url, "db", "current", code=1).output
    assert "no database at" in missing and not Path(sqlite_url.removeprefix("sqlite:///")).exists()
    assert "to create it, run `pal db upgrade`" in missing
    assert "upgraded from empty" in run(runner, sqlite_url, "db", "upgrade").output
    assert "already at revision" in run(runner, sqlite_url, "db", "upgrade").output
    data = json.loads(run(runner, sqlite_url, "db", "current", "--json").stdout)
    assert data["up_to_date"] is True and data["current"] == data["head"]


def test_commands_refuse_an_unmigrated_database(runner: CliRunner, sqlite_url: str, fleet_file: Path) -> None:
    result = run(runner, sqlite_url, "profile", "import", str(fleet_file), code=1)
    assert result.output.strip().endswith("run `pal db upgrade`")
    assert result.output.startswith("pal: error: ")


def test_import_twice_adds_nothing(runner: CliRunner, sqlite_url: str, fleet_file: Path) -> None:
    run(runner, sqlite_url, "db", "upgrade")
    first = json.loads(run(runner, sqlite_url, "profile", "import", "--json", str(fleet_file)).stdout)
    second = json.loads(run(runner, sqlite_url, "profile", "import", "--json", str(fleet_file)).stdout)
    assert first[0]["added"] == 136 and first[0]["new_gpus"] == 17
    assert second[0]["added"] == 0 and second[0]["already_present"] == 136


@pytest.mark.parametrize("name,bench", [("resnet", "resnet50"), ("bert", "bert"), ("pagerank", "pagerank"),
                                        ("sgemm", "sgemm")])
def test_import_each_artifact_format(runner: CliRunner, sqlite_url: str, name: str, bench: str) -> None:
    run(runner, sqlite_url, "db", "upgrade")
    path = DATA / "artifact-csv" / f"{name}-longhorn-agg.csv"
    result = run(runner, sqlite_url, "profile", "import", "--json", "--input-format", "pal-artifact",
                 "--benchmark", bench, "--model", "V100", str(path))
    out = json.loads(result.stdout)
    assert out[0]["added"] == out[0]["runs"] > 0 and out[0]["benchmarks"] == [bench]
    # sgemm is measured by no default job class: stored, and said so
    assert ("is used by no job class" in result.stderr) is (bench == "sgemm")


def test_a_misspelt_benchmark_is_warned_about(runner: CliRunner, sqlite_url: str) -> None:
    run(runner, sqlite_url, "db", "upgrade")
    result = run(runner, sqlite_url, "profile", "import", "--input-format", "pal-artifact", "--benchmark", "resnt50",
                 "--model", "V100", str(DATA / "artifact-csv" / "resnet-longhorn-agg.csv"))
    assert "pal: warning: benchmark 'resnt50' is used by no job class ([job_classes] use bert, pagerank, " \
           "resnet50)" in result.stderr


def test_bad_row_names_file_and_line_and_imports_nothing(runner: CliRunner, sqlite_url: str, fleet_file: Path,
                                                         tmp_path: Path) -> None:
    run(runner, sqlite_url, "db", "upgrade")
    lines = fleet_file.read_text().splitlines()
    lines[5] = lines[5].replace('"score": ', '"score": "fast", "was": ')
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines) + "\n")
    result = run(runner, sqlite_url, "profile", "import", str(fleet_file), str(bad), code=1)
    assert f"{bad}:6:" in result.output and "score" in result.output
    # the good file before it was imported (its own transaction), the bad one not at all
    counts = json.loads(run(runner, sqlite_url, "profile", "import", "--json", str(fleet_file)).stdout)
    assert counts[0]["already_present"] == 136


def test_artifact_format_needs_benchmark_and_model(runner: CliRunner, sqlite_url: str) -> None:
    run(runner, sqlite_url, "db", "upgrade")
    result = run(runner, sqlite_url, "profile", "import", "--input-format", "pal-artifact",
                 str(DATA / "artifact-csv" / "resnet-longhorn-agg.csv"), code=1)
    assert "--benchmark" in result.output and "--model" in result.output


def test_missing_file_is_one_line(runner: CliRunner, sqlite_url: str, tmp_path: Path) -> None:
    run(runner, sqlite_url, "db", "upgrade")
    result = run(runner, sqlite_url, "profile", "import", str(tmp_path / "nope.jsonl"), code=1)
    assert len(result.output.strip().splitlines()) == 1 and "nope.jsonl" in result.output


def test_report_json_shape(runner: CliRunner, loaded: str) -> None:
    data = json.loads(run(runner, loaded, "report", "--format", "json").stdout)
    assert {"benchmarks", "job_classes", "classification"} <= data.keys()
    item = next(i for i in data["benchmarks"] if i["benchmark"] == "resnet50")
    assert item["model"] == "V100" and item["gpus"] == 17
    assert set(item["perfvar"]) == {"min", "p5", "median", "p95", "max"}
    assert item["perfvar"]["min"] <= item["perfvar"]["median"] <= item["perfvar"]["max"]
    assert all({"slowdown", "gpus"} <= b.keys() for b in item["bins"])
    assert sum(b["gpus"] for b in item["bins"]) == 17
    assert item["outliers"] == ["GPU-broken-00"]
    classes = {c["job_class"]: c for c in data["job_classes"]}
    assert classes["A"]["benchmark"] == "resnet50" and classes["D"]["benchmark"] == "pagerank"


def test_report_table_and_csv(runner: CliRunner, loaded: str) -> None:
    table = run(runner, loaded, "report").output
    assert "resnet50" in table and "GPU-broken-00" in table
    assert "re-profile" in table or "dcgmi diag -r 3" in table  # its graded action (staleness depends on today)
    csv_out = run(runner, loaded, "report", "--format", "csv").output.splitlines()
    assert csv_out[0].startswith("job_class,model,benchmark,GPUs")
    assert any(line.startswith("A,V100,resnet50,17,") for line in csv_out)


def test_gpus_listing(runner: CliRunner, loaded: str) -> None:
    rows = json.loads(run(runner, loaded, "gpus", "--format", "json").stdout)
    assert len(rows) == 17
    broken = next(r for r in rows if r["uuid"] == "GPU-broken-00")
    assert broken["outlier"] is True and broken["classes"]["A"]["slowdown"] > 1.3
    assert broken["classes"]["B"]["bin"] is None  # no bert runs: unprofiled
    only = json.loads(run(runner, loaded, "gpus", "--format", "json", "--node", "node-0").stdout)
    assert only and all(r["node"] == "node-0" for r in only)
    csv_out = run(runner, loaded, "gpus", "--format", "csv").output.splitlines()
    assert len(csv_out) == 18


def test_report_html(runner: CliRunner, loaded: str, tmp_path: Path) -> None:
    page = tmp_path / "r.html"
    run(runner, loaded, "report", "--html", str(page))
    text = page.read_text()
    assert text.lstrip().lower().startswith("<!doctype html") and "GPU-broken-00" in text


def test_classify_versions_and_hysteresis(runner: CliRunner, loaded: str) -> None:
    out = json.loads(run(runner, loaded, "classify", "--allow-partial", "--hysteresis", "0.01", "--format", "json").stdout)
    assert out["version"] == 2 and out["previous_version"] == 1
    assert json.loads(run(runner, loaded, "report", "--format", "json", "--version", "1").stdout)[
        "classification"]["version"] == 1
    assert "does not exist" in run(runner, loaded, "report", "--version", "9", code=1).output


def test_config_show_masks_password(runner: CliRunner) -> None:
    result = runner.invoke(cli, ["--db", "postgresql+psycopg://pal:s3cret@db.example/pal", "config", "show",
                                 "--format", "json"], env={"PAL_CONFIG": ARTIFACT_CONFIG})
    assert result.exit_code == 0, result.output
    assert "s3cret" not in result.output
    assert json.loads(result.stdout)["database"]["url"] == "postgresql+psycopg://pal:***@db.example/pal"
    toml_out = runner.invoke(cli, ["--db", "sqlite:///x.db", "config", "show"], env={"PAL_CONFIG": ARTIFACT_CONFIG}).output
    assert "[classification]" in toml_out and "min_runs = 3" in toml_out


def test_invalid_config_is_one_line(runner: CliRunner, tmp_path: Path) -> None:
    cfg = tmp_path / "pal.toml"
    cfg.write_text("[classification]\nmax_bins = 'many'\n")
    result = runner.invoke(cli, ["--config", str(cfg), "config", "show"])
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        f"pal: error: {cfg}: classification.max_bins: Input should be a valid integer, unable to parse string as an integer"
    ]


def test_logging_level_from_config(runner: CliRunner, tmp_path: Path, sqlite_url: str, fleet_file: Path) -> None:
    """[logging] level applies without -v/--debug; the flags win over it; the default stays WARNING."""
    def import_log(level: str | None, *flags: str) -> str:
        cfg = tmp_path / f"pal-{level}.toml"
        cfg.write_text(f"[logging]\nlevel = '{level}'\n" if level else "")
        result = runner.invoke(cli, ["--config", str(cfg), "--db", sqlite_url, *flags, "profile", "import",
                                     str(fleet_file)])
        assert result.exit_code == 0, result.output
        return result.stderr

    run(runner, sqlite_url, "db", "upgrade")
    assert "pal: INFO:" in import_log("INFO")
    assert "pal: INFO:" not in import_log(None)
    assert "pal: INFO:" not in import_log("ERROR")
    assert "pal: INFO:" in import_log("ERROR", "-v")


def test_usage_error_exit_2(runner: CliRunner) -> None:
    assert runner.invoke(cli, ["report", "--format", "xml"]).exit_code == 2


def test_main_returns_codes(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["--version"]) == 0
    assert main(["--config", str(tmp_path / "missing.toml"), "config", "show"]) == 1
    assert "configuration file not found" in capsys.readouterr().err


def test_demo(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(cli, ["demo", "--dir", str(tmp_path / "d"), "--nodes", "4"], env={"PAL_CONFIG": "",
                                                                                         "PAL_DB_URL": ""})
    assert result.exit_code == 0, result.output
    assert (tmp_path / "d" / "report.html").exists() and (tmp_path / "d" / "fleet-profile.jsonl").exists()
    assert "6/6" in result.output and "true tier" in result.output


def test_demo_ignores_pal_db_url_from_the_environment(runner: CliRunner, tmp_path: Path) -> None:
    prod = tmp_path / "production.db"
    result = runner.invoke(cli, ["demo", "--dir", str(tmp_path / "d"), "--nodes", "2"],
                           env={"PAL_CONFIG": "", "PAL_DB_URL": f"sqlite:///{prod}"})
    assert result.exit_code == 0, result.output
    assert not prod.exists() and (tmp_path / "d" / "pal-demo.db").exists()
    assert "ignoring PAL_DB_URL" in result.stderr


def test_the_placer_refuses_a_mistyped_sqlite_url_and_creates_nothing(runner: CliRunner, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'typo' / 'pla.db'}"
    result = runner.invoke(cli, ["--db", url, "placer", "--once", "--state-file", str(tmp_path / "state")])
    assert result.exit_code == 1 and "no database at" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "typo").exists() and not (tmp_path / "state").exists()


def test_a_reader_that_goes_away_ends_pal_quietly_with_141(monkeypatch, tmp_path: Path, capsys) -> None:
    """`pal ... | head`: no "pal: error: Broken pipe", exit 128 + SIGPIPE, as Unix tools do."""
    import sys

    class GoneReader:
        """stdout whose reader has closed the pipe (what `head` leaves behind)."""

        def __init__(self) -> None:
            self._file = open(tmp_path / "stdout", "w")  # noqa: SIM115 - a real fd to point at /dev/null

        def write(self, text: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self) -> None:
            pass

        def fileno(self) -> int:
            return self._file.fileno()

        def isatty(self) -> bool:
            return False

    monkeypatch.setattr(sys, "stdout", GoneReader())
    assert main(["db", "sql", "--dialect", "postgresql"]) == 141
    assert capsys.readouterr().err == ""


def test_loading_the_cli_does_not_load_the_slurm_adapter() -> None:
    """Every `pal` command loads the CLI; the Slurm adapter (~50 ms) only the commands that use it."""
    probe = "import sys, pal_slurm.cli.main; print('pal_slurm.slurm.backend' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


# -- one number type, one set of exit codes, one output option ------------------------------------

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
                                ("jobs", "rule", "export"), ("gpus", "drain")}]
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


# -- what reaches Slurm's configuration is checked where it enters ---------------------------------

@pytest.mark.parametrize("node", ["gpu 01 Gres=evil", "gpu[01-16]"])
def test_import_refuses_node_names_slurm_would_misread(runner: CliRunner, sqlite_url: str, tmp_path: Path,
                                                       node: str) -> None:
    from dataclasses import replace

    recs = records(two_tier_fleet(), benchmark="resnet50")
    recs[3] = replace(recs[3], gpu=replace(recs[3].gpu, node=node))
    jsonl = tmp_path / "bad.jsonl"
    jsonl.write_text(dump_jsonl(recs))
    csv = tmp_path / "bad.csv"
    csv.write_text(f"uuid,perf,ts,cab-node\nGPU-1,10,1600000000,c001-001\nGPU-2,10,1600000000,{node}\n")
    run(runner, sqlite_url, "db", "upgrade")
    for args, where in (([str(jsonl)], f"{jsonl}:4: "),
                        (["--input-format", "pal-artifact", "--benchmark", "b", "--model", "V100", str(csv)],
                         f"{csv}:3: ")):
        result = run(runner, sqlite_url, "profile", "import", *args, code=1)
        assert result.stderr.startswith(f"pal: error: {where}") and repr(node) in result.stderr
        assert result.stderr.count("\n") == 1
    # nothing was stored: gres-conf finds no GPU
    assert "knows no GPUs" in run(runner, sqlite_url, "slurm", "gres-conf", code=1).stderr


def test_gres_conf_refuses_a_bad_name_already_in_the_database(runner: CliRunner, sqlite_url: str) -> None:
    """A database filled before imports checked names: gres-conf names the bad node and writes nothing."""
    from dataclasses import replace

    from pal_slurm.db.engine import make_engine, session_scope
    from pal_slurm.db.measurement_store import import_records

    run(runner, sqlite_url, "db", "upgrade")
    recs = [replace(r, gpu=replace(r.gpu, node="gpu 01 Gres=evil")) if r.gpu.node == "node-0" else r
            for r in records(two_tier_fleet(), benchmark="resnet50")]
    engine = make_engine(sqlite_url)
    try:
        with session_scope(engine) as session:
            import_records(session, recs)
    finally:
        engine.dispose()
    result = run(runner, sqlite_url, "slurm", "gres-conf", code=1)
    assert result.stdout == "" and result.stderr.count("\n") == 1
    assert result.stderr.startswith("pal: error: node name 'gpu 01 Gres=evil'") and "database" in result.stderr


@pytest.mark.parametrize("inventory, message", [
    ({"nodes": []}, "no GPUs: nothing to configure"),
    ({"nodes": [{"name": "g1", "model": "V100", "gpus": 1_000_000_000}]}, "at most 64"),
    ({"nodes": [{"name": "gpu[01-16]", "model": "V100", "gpus": 4}]}, "hostlist brackets"),
])
def test_gres_conf_refuses_an_inventory_with_nothing_or_too_much(runner: CliRunner, tmp_path: Path,
                                                                 inventory: dict, message: str) -> None:
    path = tmp_path / "inventory.json"
    path.write_text(json.dumps(inventory))
    out = tmp_path / "out"
    result = runner.invoke(cli, ["slurm", "gres-conf", "--inventory", str(path), "--output-dir", str(out)],
                           env={"PAL_CONFIG": ""})
    assert result.exit_code == 1 and result.stderr.startswith(f"pal: error: {path}") and message in result.stderr
    assert result.stderr.count("\n") == 1 and not out.exists()


def test_gpus_shows_each_nodes_gpus_in_slot_order(runner: CliRunner, sqlite_url: str, tmp_path: Path) -> None:
    """UUIDs that sort against the slots: the listing follows the slots Slurm schedules."""
    uuids = {f"GPU-{9 - i:02d}aa": 1.0 + 0.001 * i for i in range(8)}  # slot i gets the i-th UUID, descending
    node_of = {u: ("n10" if i >= 4 else "n2") for i, u in enumerate(uuids)}
    path = tmp_path / "slots.jsonl"
    path.write_text(dump_jsonl(records(uuids, node_of=node_of)))
    run(runner, sqlite_url, "db", "upgrade")
    run(runner, sqlite_url, "profile", "import", str(path))
    run(runner, sqlite_url, "classify", "--allow-partial")
    rows = json.loads(run(runner, sqlite_url, "gpus", "--json").stdout)
    assert [(r["node"], r["slot"]) for r in rows] == [("n2", s) for s in range(4)] + [("n10", s) for s in range(4)]
    table = run(runner, sqlite_url, "gpus").stdout.splitlines()
    header = next(line for line in table if line.lstrip().startswith("node"))
    assert header.split()[:3] == ["node", "slot", "GPU"]
    body = [line.split() for line in table if line.startswith(("n2", "n10"))]
    assert [(cells[0], cells[1]) for cells in body] == [("n2", str(s)) for s in range(4)] + [("n10", str(s)) for s in range(4)]


def test_profile_refuses_a_node_name_slurm_would_misread(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(cli, ["profile", "inventory", "--backend", "sim", "--no-db", "--node", "gpu 01 Gres=evil"],
                           env={"PAL_CONFIG": ""})
    assert result.exit_code == 2 and result.stderr.startswith("pal: error: ") and "--node" in result.stderr


def test_a_log_message_is_one_line_whatever_a_user_put_in_it() -> None:
    """A job name with a newline or an escape sequence must not forge a log line or reach the
    terminal: the CLI's log formatter escapes control characters; a traceback still follows."""
    import logging

    from pal_slurm.cli.main import OneLineFormatter

    fmt = OneLineFormatter("pal: %(levelname)s: %(message)s")
    rec = logging.LogRecord("x", logging.INFO, __file__, 1, "job %s (%s)", ("7", "train\npal: ERROR: forged\x1b[2J"),
                            None)
    line = fmt.format(rec)
    assert "\n" not in line and "\x1b" not in line
    assert line == "pal: INFO: job 7 (train\\npal: ERROR: forged\\x1b[2J)"
    try:
        raise ValueError("boom")
    except ValueError:
        import sys

        rec = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    assert fmt.format(rec).startswith("pal: ERROR: failed\nTraceback")
