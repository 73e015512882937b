"""`pal` run in-process on one database, as the CLI tests of several modules run it: the exit code
is the one expected and no traceback reached the user, whatever the command."""

from __future__ import annotations

from click.testing import CliRunner, Result

from conftest import ARTIFACT_CONFIG
from pal_slurm.cli.main import cli


def run(runner: CliRunner, url: str, *args: str, code: int = 0) -> Result:
    result = runner.invoke(cli, ["--db", url, *args], env={"PAL_CONFIG": ARTIFACT_CONFIG})
    assert result.exit_code == code, f"exit {result.exit_code}: {result.output}"
    assert "Traceback" not in result.output
    return result
