"""The filter state file (pal_slurm/slurm/filter_state.py) on the cases the rest of the suite
leaves open (each found by `make mutation`): what job_submit.lua reads from it, read by Lua
itself (lua5.1, as slurmctld's filter; skipped without it, like tests/test_lua_filter.py), the
limits of its settings, the file as written on disk, and what the placer reads back from it."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from pal_slurm.slurm import filter_state
from pal_slurm.slurm.filter_state import FilterState, lua_string, render

#: a Lua 5.1 chunk that loads a filter state and prints it as JSON (keys sorted), so a test
#: compares what the filter sees, not how the file spells it
DUMP = r"""
local t = assert(loadstring(io.read("*a")))()
local function enc(v)
  local k = type(v)
  if k == "table" then
    if #v > 0 or next(v) == nil then
      local out = {}
      for i = 1, #v do out[#out + 1] = enc(v[i]) end
      return "[" .. table.concat(out, ",") .. "]"
    end
    local keys = {}
    for key in pairs(v) do keys[#keys + 1] = key end
    table.sort(keys)
    local out = {}
    for _, key in ipairs(keys) do out[#out + 1] = string.format("%q", key) .. ":" .. enc(v[key]) end
    return "{" .. table.concat(out, ",") .. "}"
  elseif k == "string" then
    return string.format("%q", v)
  end
  return tostring(v)
end
io.write(enc(t))
"""


def _as_lua_sees_it(text: str) -> object:
    lua = shutil.which("lua5.1")
    if lua is None:
        pytest.skip("lua5.1 not installed (apt-get install lua5.1): the filter's own reading is checked where it is")
    out = subprocess.run([lua, "-e", DUMP], input=text.encode(), capture_output=True, check=True, timeout=30)
    return json.loads(out.stdout.decode().replace("\\\n", "\\n"))


def test_the_filter_reads_every_setting_models_classes_and_only_the_set_rule_keys() -> None:
    state = FilterState(mode="enforce", heartbeat=1796000000, stale_after=30, models=("v100", "a100"),
                        rules=({"user": "alice", "name": "", "account": None, "class": "A", "id": "rule-1"},
                               {"partition": "gpu", "class": "D"}),
                        hold_s=120, unheld_classes=("C", "D"), wake="/var/lib/pal/placer-wake")
    assert _as_lua_sees_it(render(state)) == {
        "format": 1, "mode": "enforce", "heartbeat": 1796000000, "stale_after": 30, "hold_s": 120,
        "models": ["v100", "a100"], "unheld_classes": ["C", "D"], "wake": "/var/lib/pal/placer-wake",
        "rules": [{"user": "alice", "class": "A", "id": "rule-1"}, {"partition": "gpu", "class": "D"}]}


def test_printable_ascii_other_than_quote_and_backslash_is_written_as_it_is() -> None:
    assert lua_string("XX v100_g0-1.x") == '"XX v100_g0-1.x"'
    assert lua_string('"\\') == '"\\034\\092"'


def test_hold_s_is_one_second_to_one_day_inclusive_and_says_so() -> None:
    for ok in (1, 86400):
        FilterState(mode="observe", heartbeat=0, stale_after=1, hold_s=ok)
    for bad in (0, 86401):
        with pytest.raises(ValueError, match=r"^hold_s must be 1\.\.86400 seconds, not "):
            FilterState(mode="observe", heartbeat=0, stale_after=1, hold_s=bad)
    with pytest.raises(ValueError, match=r"^mode must be one of \('observe', 'enforce'\), not 'bogus'$"):
        FilterState(mode="bogus", heartbeat=0, stale_after=1)


def test_the_file_is_written_world_readable_into_a_directory_made_for_it(tmp_path: Path) -> None:
    """slurmctld (another user) reads the file while the placer rewrites it."""
    target = tmp_path / "run" / "pal" / "filter-state.lua"
    old = os.umask(0o077)
    try:
        filter_state.write(target, FilterState(mode="enforce", heartbeat=5, stale_after=30, models=("v100",)))
    finally:
        os.umask(old)
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert filter_state.read_models(target) == ("v100",)


def test_the_rules_the_filter_gets_keep_only_its_keys_with_values_and_a_class() -> None:
    entries = [{"user": "bob", "name": "", "account": None, "class": "B", "id": "rule-2", "comment": "x"},
               {"user": "carol", "id": "rule-3"}, {"user": "dave", "class": ""}]
    assert filter_state.rules_from(entries) == ({"user": "bob", "class": "B", "id": "rule-2"},)


def test_models_are_read_back_with_capitals_digits_and_punctuation(tmp_path: Path) -> None:
    path = tmp_path / "state.lua"
    filter_state.write(path, FilterState(mode="enforce", heartbeat=5, stale_after=30, models=("A100-SXM4_80.GB", "v100")))
    assert filter_state.read_models(path) == ("A100-SXM4_80.GB", "v100")


def test_the_heartbeat_age_is_read_through_garbage_and_is_none_for_a_goodbye(tmp_path: Path) -> None:
    path = tmp_path / "state.lua"
    path.write_bytes(b"-- \xff\xfe not ascii\nreturn { heartbeat = 1000, }\n")
    assert filter_state.heartbeat_age(path, now=1060.0) == 60.0
    path.write_text("return { heartbeat = 1, }\n")
    assert filter_state.heartbeat_age(path, now=61.0) == 60.0
    path.write_text("return { heartbeat = 0, }\n")
    assert filter_state.heartbeat_age(path, now=61.0) is None
    assert filter_state.heartbeat_age(tmp_path / "missing", now=61.0) is None
