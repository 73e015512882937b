"""The submit filter's Lua checks, run from pytest.

`luac5.1 -p` matters because an invalid job_submit.lua stops slurmctld from
starting; the unit tests in tests/lua/ run the filter's logic with a fake
`slurm` table. Both need the Debian package lua5.1: when it is missing the
tests skip, except under PAL_REQUIRE_SLURM=1 (CI), where they fail.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FILTER = REPO / "spank_hooks" / "job_submit.lua"
LUA_TESTS = REPO / "tests" / "lua" / "test_job_submit.lua"


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        reason = f"{name} not found (apt-get install lua5.1)"
        if os.environ.get("PAL_REQUIRE_SLURM") == "1":
            pytest.fail(f"{reason} but PAL_REQUIRE_SLURM=1")
        pytest.skip(reason)
    return path


def test_filter_compiles_with_luac() -> None:
    result = subprocess.run(
        [_tool("luac5.1"), "-p", str(FILTER)], capture_output=True, text=True, timeout=30, check=False
    )
    assert result.returncode == 0, result.stderr


def test_lua_unit_tests_pass() -> None:
    result = subprocess.run(
        [_tool("lua5.1"), str(LUA_TESTS)], capture_output=True, text=True, timeout=120, cwd=REPO, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert " 0 failed" in result.stdout, result.stdout


def test_filter_never_shells_out() -> None:
    """The filter runs inside slurmctld: no os.execute, io.popen or dofile into the global env."""
    text = FILTER.read_text()
    for forbidden in ("os.execute", "io.popen", "dofile(", "require("):
        assert forbidden not in text, forbidden


def test_filter_holds_through_begin_time_not_priority_zero() -> None:
    """Slurm 22.05 skips submit-time validation for a job held with priority 0, so a request
    plain Slurm rejects would pend forever; the filter must hold through the begin time only."""
    text = FILTER.read_text()
    assert "changes.begin_time" in text
    assert "changes.priority" not in text and "job_desc.priority =" not in text
