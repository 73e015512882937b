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

REPO = Path(__file__).resolve().parents[2]
FILTER = REPO / "spank_hooks" / "job_submit.lua"
LUA_TESTS = REPO / "tests" / "lua" / "test_job_submit.lua"


def _tool(name: str) -> str:
    from conftest import require_tool

    return require_tool(name, "lua5.1")


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


def test_the_filters_slot_type_rule_is_the_python_one() -> None:
    """job_submit.lua keeps a copy of the `<model>_g<minor>` rule (Lua cannot import ours):
    on names that are slot types, near misses and bare model types, both must agree."""
    from pal_slurm.slurm.gresconf import is_slot_type, slot_of_type, slot_type

    names = [slot_type("Tesla V100-SXM2-16GB", 0), slot_type("NVIDIA A100-SXM4-80GB", 12), "rtx3090ti_g3",
             "x_g1_g2", "v100", "g0", "_g0", "v100_g", "v100_gx1", "v100_g1a", "v100-g1", "h100_G0", "a_g007"]
    chunk = ("slurm = {log_info=function() end, log_error=function() end, log_debug=function() end, "
             "user_msg=function() end, SUCCESS=0, ERROR=-1}; PAL_FILTER_TEST = true; "
             f"local pal = dofile({str(FILTER)!r}); "
             "for _, n in ipairs(arg) do print(n .. '=' .. tostring(pal.is_slot_type(n))) end")
    result = subprocess.run([_tool("lua5.1"), "-", *names], input=chunk, capture_output=True, text=True,
                            timeout=60, cwd=REPO, check=False)
    assert result.returncode == 0, result.stderr
    lua = dict(line.split("=", 1) for line in result.stdout.split())
    for name in names:
        want = slot_of_type(name) is not None
        assert is_slot_type(name) is want, name
        assert lua[name] == str(want).lower(), f"{name}: Lua says {lua[name]}, Python {want}"
    assert slot_of_type("a_g007") == 7 and slot_of_type("x_g1_g2") == 2


def test_the_filter_runs_no_code_from_its_state_file() -> None:
    """The state file is data: nothing in the filter compiles or runs a chunk, and nothing
    sandboxes one (a sandbox left in would mean a chunk still runs somewhere)."""
    import re

    text = FILTER.read_text()
    for forbidden in (r"\bloadstring\b", r"\bload\s*\(", r"\bsetfenv\b", r"\bcoroutine\b", r"\bdebug\b",
                      r"\bloadfile\b"):
        assert not re.search(forbidden, text), forbidden


def test_the_filter_and_the_placer_agree_on_the_default_paths() -> None:
    """The filter computes the wake-up file beside its state file as the placer does: both
    defaults must name the same state file, and the same file name."""
    from pal_slurm.config import PlacerConfig
    from pal_slurm.placer.wake import WAKE_NAME

    text = FILTER.read_text()
    assert f'pal.DEFAULT_STATE_PATH = "{PlacerConfig().state_file}"' in text
    assert f'pal.WAKE_NAME = "{WAKE_NAME}"' in text
