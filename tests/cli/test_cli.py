"""The `pal` CLI in-process through click's CliRunner: output, exit codes, one-line errors.

The options every command shares (numbers, --format/--json, exit codes) are checked in
test_cli_options.py; the node names that reach Slurm's configuration in test_cli_slurm_names.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import ARTIFACT_CONFIG, DATA
from tests.support.pal_cli import run
from pal_slurm.cli.main import cli, main


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
