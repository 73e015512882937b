"""`pal --help` starts light: no database layer, no numpy, no plotting.

The command modules import what a command needs inside the command (docs/architecture.md,
"Rules we keep"): help, usage errors and commands that never open a database then start in
a fraction of the time (bench/cli_startup.py measures it). Each case runs in a fresh
interpreter, since this test process has imported everything already.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import REPO

#: Libraries help must not load, and what each costs (cumulative import time on the 2-core CI machine).
HEAVY = {
    "sqlalchemy": "the database layer, about 0.5 s",
    "alembic": "the schema migrations, about 0.2 s",
    "numpy": "the placement and classification arrays, about 0.15 s",
    "matplotlib": "the report's and the simulator's plots, about 0.5 s",
}

#: Runs the `pal` entry point once per argument list in argv[1] (JSON; "every-help": the help of
#: every command and subcommand in turn), then prints which of HEAVY's packages it loaded.
PROBE = """
import json, sys
import click
from pal_slurm.cli.main import cli, main

def helps(command, path):
    yield [*path, "--help"]
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            yield from helps(sub, [*path, name])

runs = json.loads(sys.argv[1])
for argv in (list(helps(cli, [])) if runs == "every-help" else runs):
    assert main(argv) == 0, argv
print(json.dumps(sorted({m.split(".")[0] for m in sys.modules} & set(json.loads(sys.argv[2])))))
"""


def _heavy_loaded(runs: object) -> list[str]:
    proc = subprocess.run([sys.executable, "-c", PROBE, json.dumps(runs), json.dumps(sorted(HEAVY))],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _why(loaded: list[str]) -> str:
    return "; ".join(f"{m} ({HEAVY[m]})" for m in loaded) + ": import it inside the command that uses it"


@pytest.mark.parametrize("argv", [["--help"], ["simulate", "--help"]], ids=" ".join)
def test_help_loads_no_database_numpy_or_plots(argv: list[str]) -> None:
    loaded = _heavy_loaded([argv])
    assert not loaded, f"pal {' '.join(argv)} imported {_why(loaded)}"


def test_no_commands_help_loads_them() -> None:
    loaded = _heavy_loaded("every-help")
    assert not loaded, f"some command's --help imported {_why(loaded)}"


def test_the_probe_sees_what_a_command_loads() -> None:
    """The probe itself: `pal db sql` renders the migrations, which takes Alembic and SQLAlchemy."""
    assert _heavy_loaded([["db", "sql", "--dialect", "sqlite"]]) == ["alembic", "sqlalchemy"]


def test_a_database_error_is_still_one_line(capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The error boundary no longer imports SQLAlchemy to know its errors, and still turns one
    that escapes a command into one line; any other exception stays an internal error."""
    import click
    from sqlalchemy.exc import OperationalError

    from pal_slurm.cli.main import cli, main

    @click.command("boom")
    @click.argument("kind")
    def boom(kind: str) -> None:
        if kind == "db":
            raise OperationalError("SELECT 1", {}, Exception("disk I/O error\nat page 7"))
        raise RuntimeError("a bug")

    monkeypatch.setitem(cli.commands, "boom", boom)
    assert main(["boom", "db"]) == 1
    assert capsys.readouterr().err == "pal: error: database error: disk I/O error\n"
    assert main(["boom", "bug"]) == 1
    assert "pal: internal error: RuntimeError: a bug" in capsys.readouterr().err
