"""What users put in job names reaches an admin's terminal and spreadsheets harmlessly:
control sequences shown escaped in tables and prose, CSV cells a spreadsheet would run
neutralised (pal_slurm/cli/render.py, which every listing goes through)."""

from __future__ import annotations

import csv
import io

import pytest

from pal_slurm.cli.render import Column, emit_rows, prose

ROWS = [{"job": "1", "name": "train\x1b]0;owned\x07\x1b[2J\nFAKE LINE"},
        {"job": "2", "name": "=HYPERLINK(\"http://x\",\"y\")"},
        {"job": "3", "name": "-2.5"}, {"job": "4", "name": "@cmd"}, {"job": "5", "name": "plain"}]
COLUMNS = [Column("job", lambda r: r["job"]), Column("name", lambda r: r["name"])]


def test_a_table_shows_control_characters_escaped(capsys: pytest.CaptureFixture[str]) -> None:
    emit_rows(ROWS, COLUMNS, "table")
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    assert "\\x1b]0;owned\\x07" in out and "FAKE LINE" in out
    assert not any(line.strip().startswith("FAKE LINE") for line in out.splitlines()), \
        "a newline in a job name does not start a line of its own"


def test_prose_shows_control_characters_escaped(capsys: pytest.CaptureFixture[str]) -> None:
    prose("job train\x1b[31m red")
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\\x1b[31m" in out


def test_csv_cells_that_a_spreadsheet_would_run_are_neutralised(capsys: pytest.CaptureFixture[str]) -> None:
    emit_rows(ROWS, COLUMNS, "csv")
    got = {r["job"]: r["name"] for r in csv.DictReader(io.StringIO(capsys.readouterr().out))}
    assert got["2"] == "'=HYPERLINK(\"http://x\",\"y\")"
    assert got["4"] == "'@cmd"
    assert got["3"] == "-2.5", "a number stays a number"
    assert got["5"] == "plain"
    assert got["1"].startswith("train\x1b"), "CSV carries the data as it is; only formulas are defused"
