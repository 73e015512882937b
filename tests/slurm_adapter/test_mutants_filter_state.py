"""The filter state file (pal_slurm/slurm/filter_state.py) on the cases the rest of the suite
leaves open (each found by `make mutation`): what job_submit.lua reads from it, read by the
filter's own parser (lua5.1, as slurmctld's filter; skipped without it, like
tests/slurm_adapter/test_lua_filter.py), awkward values carried through unchanged, the limits of its settings
and of the file, the file as written on disk, and what the placer reads back from it."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

from pal_slurm.slurm import filter_state
from pal_slurm.slurm.filter_state import FilterState, decode, encode, render

REPO = Path(__file__).resolve().parents[2]
FILTER = REPO / "spank_hooks" / "job_submit.lua"

#: a Lua 5.1 chunk that parses a state file with the filter's own pal.parse_state and prints
#: what the filter sees as JSON (sets as sorted lists, every byte outside printable ASCII as
#: \u00XX, so a test compares bytes, not how Lua quotes them)
DUMP = r"""
slurm = { SUCCESS = 0, ERROR = -1, log_info = function() end, log_error = function() end }
PAL_FILTER_TEST = true
local pal = dofile(FILTER)
local s, err = pal.parse_state(io.read("*a"))
local function str(v)
  return '"' .. (string.gsub(v, '[%z\1-\31"\\\127-\255]', function(c)
    return string.format("\\u%04x", string.byte(c))
  end)) .. '"'
end
local function list(t)
  local out = {}
  for _, v in ipairs(t) do out[#out + 1] = v end
  return out
end
local function set(t)
  local out = {}
  for k in pairs(t) do out[#out + 1] = k end
  table.sort(out)
  return out
end
local function enc(v)
  local k = type(v)
  if k == "table" then
    if #v > 0 or next(v) == nil then
      local out = {}
      for i = 1, #v do out[#out + 1] = enc(v[i]) end
      return "[" .. table.concat(out, ",") .. "]"
    end
    local keys = set(v)
    local out = {}
    for _, key in ipairs(keys) do out[#out + 1] = str(key) .. ":" .. enc(v[key]) end
    return "{" .. table.concat(out, ",") .. "}"
  elseif k == "string" then
    return str(v)
  elseif k == "nil" then
    return "null"
  end
  return tostring(v)
end
if not s then
  io.write(enc({ error = err }))
else
  s.models, s.unheld = set(s.models), set(s.unheld)
  io.write(enc(s))
end
"""


def _bytes_back(value: Any) -> Any:
    """JSON strings of \\u00XX bytes back to the text their bytes spell in UTF-8."""
    if isinstance(value, str):
        return value.encode("latin-1").decode("utf-8", errors="replace")
    if isinstance(value, list):
        return [_bytes_back(v) for v in value]
    if isinstance(value, dict):
        return {_bytes_back(k): _bytes_back(v) for k, v in value.items()}
    return value


def _as_the_filter_reads_it(text: str) -> Any:
    lua = shutil.which("lua5.1")
    if lua is None:
        pytest.skip("lua5.1 not installed (apt-get install lua5.1): the filter's own reading is checked where it is")
    out = subprocess.run([lua, "-e", f"FILTER = {json.dumps(str(FILTER))}", "-e", DUMP], input=text.encode(),
                         capture_output=True, check=False, timeout=60)
    assert out.returncode == 0, out.stderr.decode()
    return _bytes_back(json.loads(out.stdout.decode("ascii")))


def test_the_filter_reads_every_setting_models_classes_and_only_the_set_rule_keys() -> None:
    state = FilterState(mode="enforce", heartbeat=1796000000, stale_after=30, models=("v100", "A100"),
                        rules=({"user": "alice", "name": "", "account": None, "class": "A", "id": "rule-1"},
                               {"partition": "gpu", "class": "D", "id": 7}),
                        hold_s=120, unheld_classes=("C", "D"), wake=True)
    assert _as_the_filter_reads_it(render(state)) == {
        "format": 2, "mode": "enforce", "heartbeat": 1796000000, "stale_after": 30, "hold_s": 120, "wake": True,
        "models": ["a100", "v100"], "unheld": ["C", "D"],
        "rules": [{"user": "alice", "class": "A", "id": "rule-1"}, {"partition": "gpu", "class": "D", "id": "7"}]}
    no_wake = _as_the_filter_reads_it(render(FilterState(mode="observe", heartbeat=0, stale_after=5)))
    assert no_wake["wake"] is False and no_wake["mode"] == "observe" and no_wake["rules"] == []


AWKWARD = ["two words", "a=b c=d", "100%", "%41 stays %41", "line\nbreak", "cr\rlf\r\n", "tab\there",
           'double "quotes"', "single 'quotes'", "back\\slash", "# not a comment", "ünïcödé", "€ and 🚀",
           "  padded  ", "rule id=1 class=A", "--[[ lua ]]", "]]..os.exit(1)..[[", "$(id)`id`", "\x01\x7f",
           "x" * 2000]


def test_awkward_rule_values_reach_the_filter_unchanged() -> None:
    """Every rule value the placer writes is what the filter compares with the job's fields,
    byte for byte: spaces, `=`, `%`, line ends, quotes, non-ASCII, text that looks like code."""
    rules = tuple({"user": v, "name": v, "account": v, "partition": v, "class": "B", "id": f"r{i}"}
                  for i, v in enumerate(AWKWARD))
    seen = _as_the_filter_reads_it(render(FilterState(mode="enforce", heartbeat=5, stale_after=30, rules=rules,
                                                      models=("Tesla V100-SXM2",), unheld_classes=("A B",))))
    assert seen["rules"] == [dict(r) for r in rules]
    assert seen["models"] == ["tesla v100-sxm2"] and seen["unheld"] == ["A B"]


def test_encoding_keeps_only_the_safe_bytes_and_decodes_back() -> None:
    assert encode("XX v100_g0-1.x") == "XX%20v100_g0-1.x"
    assert encode('%"\\=\n') == "%25%22%5C%3D%0A"
    assert encode("ü") == "%C3%BC"
    for value in AWKWARD:
        assert decode(encode(value)) == value
        assert re.fullmatch(r"(?:[A-Za-z0-9._-]|%[0-9A-F]{2})*", encode(value)), value
    # bytes that are not UTF-8 (never written by encode) are replaced, never an error
    assert decode("a%FFb%C3") == "a\ufffdb\ufffd"


def test_hold_s_is_one_second_to_one_day_inclusive_and_says_so() -> None:
    for ok in (1, 86400):
        FilterState(mode="observe", heartbeat=0, stale_after=1, hold_s=ok)
    for bad in (0, 86401):
        with pytest.raises(ValueError, match=r"^hold_s must be 1\.\.86400 seconds, not "):
            FilterState(mode="observe", heartbeat=0, stale_after=1, hold_s=bad)
    with pytest.raises(ValueError, match=r"^mode must be one of \('observe', 'enforce'\), not 'bogus'$"):
        FilterState(mode="bogus", heartbeat=0, stale_after=1)


def test_the_file_starts_with_its_format_and_says_wake_only_when_told() -> None:
    text = render(FilterState(mode="enforce", heartbeat=12, stale_after=30, hold_s=60))
    assert text.splitlines()[:6] == [filter_state.HEADER, "format 2", "mode enforce", "heartbeat 12",
                                     "stale_after 30", "hold_s 60"]
    assert "wake" not in text and text.endswith("\n")
    assert "\nwake 1\n" in render(FilterState(mode="enforce", heartbeat=12, stale_after=30, wake=True))


def test_the_file_is_written_for_owner_and_group_into_a_directory_made_for_it(tmp_path: Path) -> None:
    """slurmctld reads the file as SlurmUser while the placer rewrites it: the placer's own
    user in the recommended setup, else the directory's group; nobody else."""
    target = tmp_path / "run" / "pal" / "filter-state"
    old = os.umask(0o077)
    try:
        filter_state.write(target, FilterState(mode="enforce", heartbeat=5, stale_after=30, models=("v100",)))
    finally:
        os.umask(old)
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert filter_state.read_models(target) == ("v100",)
    assert sorted(p.name for p in target.parent.iterdir()) == ["filter-state"]


@pytest.mark.skipif(os.geteuid() != 0, reason="a placer gives the file the directory's group only as root")
def test_a_root_placer_gives_the_file_the_directorys_group(tmp_path: Path) -> None:
    """A root placer with a `root:slurm 0750` state directory: SlurmUser reads the file through its group."""
    directory = tmp_path / "placer"
    directory.mkdir(mode=0o750)
    os.chown(directory, 0, 4242)
    target = directory / "filter-state"
    filter_state.write(target, FilterState(mode="enforce", heartbeat=5, stale_after=30))
    assert target.stat().st_gid == 4242 and stat.S_IMODE(target.stat().st_mode) == 0o640
    os.chown(directory, 0, 0)
    filter_state.write(target, FilterState(mode="enforce", heartbeat=6, stale_after=30))
    assert target.stat().st_gid == 0


def test_the_rules_the_filter_gets_keep_only_its_keys_with_values_and_a_class() -> None:
    entries = [{"user": "bob", "name": "", "account": None, "class": "B", "id": "rule-2", "comment": "x"},
               {"user": "carol", "id": "rule-3"}, {"user": "dave", "class": ""}]
    assert filter_state.rules_from(entries) == ({"user": "bob", "class": "B", "id": "rule-2"},)


def test_models_are_read_back_with_capitals_digits_and_punctuation(tmp_path: Path) -> None:
    path = tmp_path / "state"
    filter_state.write(path, FilterState(mode="enforce", heartbeat=5, stale_after=30,
                                         models=("A100-SXM4_80.GB", "v100", "odd model%")))
    assert filter_state.read_models(path) == ("A100-SXM4_80.GB", "v100", "odd model%")
    assert filter_state.read_models(tmp_path / "missing") == ()
    path.write_text('return {\n  format = 1,\n  models = { "v100" },\n}\n')
    assert filter_state.read_models(path) == (), "a format-1 file of an older placer is not read"
    path.write_text("format 2\nmodel a b\nmodel \nmodel%20x\nmodel c%20d\n")
    assert filter_state.read_models(path) == ("a b", "c d"), "split at the first space, as the filter does"


def test_the_heartbeat_age_is_read_through_garbage_and_is_none_for_a_goodbye(tmp_path: Path) -> None:
    path = tmp_path / "state"
    path.write_bytes(b"# \xff\xfe not ascii\nformat 2\nmode enforce\nheartbeat 1000\n")
    assert filter_state.heartbeat_age(path, now=1060.0) == 60.0
    path.write_text("format 2\r\nheartbeat 1\r\n")
    assert filter_state.heartbeat_age(path, now=61.0) == 60.0
    path.write_text("format 2\nheartbeat 0\n")
    assert filter_state.heartbeat_age(path, now=61.0) is None
    for unread in ("format 2\nheartbeat 1.5\n", "format 2\nheartbeat soon\n", "heartbeat 1\nformat 2\n",
                   "return { format = 1, heartbeat = 1, }\n", "format 2\nheartbeat 1234567890123456\n",
                   "format 2\nmode enforce\n", "format 2\nheartbeat 5 6\n",
                   # a lone CR ends no line, for the filter: these say no heartbeat
                   "format 2\nmode enforce\rheartbeat 7\n", "format 2\rheartbeat 7\n"):
        path.write_text(unread)
        assert filter_state.heartbeat_age(path, now=61.0) is None, unread
    assert filter_state.heartbeat_age(tmp_path / "missing", now=61.0) is None


def test_a_file_the_filter_refuses_for_its_size_has_no_heartbeat(tmp_path: Path) -> None:
    """The filter holds nothing with a file over MAX_BYTES: the fail-safe must see it as stale."""
    path = tmp_path / "state"
    head = "format 2\nheartbeat 1000\n"
    path.write_text(head + "#" * (filter_state.MAX_BYTES - len(head) - 1) + "\n")
    assert path.stat().st_size == filter_state.MAX_BYTES
    assert filter_state.heartbeat_age(path, now=1010.0) == 10.0
    path.write_text(head + "#" * (filter_state.MAX_BYTES - len(head)) + "\n")
    assert filter_state.heartbeat_age(path, now=1010.0) is None
    # the limit is in bytes, as the filter counts: two-byte characters count twice
    path.write_text(head + "#" * (filter_state.MAX_BYTES - len(head) - 2) + "ü\n", encoding="utf-8")
    assert path.stat().st_size == filter_state.MAX_BYTES + 1
    assert filter_state.heartbeat_age(path, now=1010.0) is None


def test_the_published_mode_is_read_back(tmp_path: Path) -> None:
    path = tmp_path / "state"
    filter_state.write(path, FilterState(mode="enforce", heartbeat=5, stale_after=30))
    assert filter_state.published_mode(path) == "enforce"
    path.write_text('return { format = 1, mode = "enforce" }\n')
    assert filter_state.published_mode(path) is None
    for text, seen in (("format 2\nmode enforce now\n", "observe"), ("format 2\nmode bogus\n", "observe"),
                       ("format 2\nmode enforce\nmode observe\n", "observe"), ("format 2\n", None),
                       ("format 2\nmode observe\nmode enf%6Frce\n", "enforce")):
        path.write_text(text)
        assert filter_state.published_mode(path) == seen, text
    assert filter_state.published_mode(tmp_path / "missing") is None


def test_the_limits_are_the_filters() -> None:
    """The writer keeps to the limits the filter refuses a file beyond: the same numbers."""
    text = FILTER.read_text(encoding="utf-8")
    lua = {m[0]: eval(m[1], {}) for m in re.findall(r"^pal\.(STATE_MAX_\w+) = ([0-9 *]+)", text, flags=re.M)}
    assert lua["STATE_MAX_BYTES"] == filter_state.MAX_BYTES
    assert lua["STATE_MAX_LINE"] == filter_state.MAX_LINE
    assert lua["STATE_MAX_LINES"] == filter_state.MAX_LINES
    assert lua["STATE_MAX_RULES"] == filter_state.MAX_RULES
    assert lua["STATE_MAX_MODELS"] == filter_state.MAX_MODELS
    assert lua["STATE_MAX_RULE_FIELDS"] >= len(filter_state.RULE_KEYS)
    assert re.search(rf'^pal\.STATE_FORMAT = "{filter_state.FORMAT}"$', text, flags=re.M)


def test_what_does_not_fit_the_limits_is_left_out_last_first_and_said_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    rules = tuple({"user": f"u{i}", "class": "A", "id": str(i)} for i in range(filter_state.MAX_RULES + 2))
    long_rule = {"name": "n" * filter_state.MAX_LINE, "class": "B", "id": "long"}
    state = FilterState(mode="enforce", heartbeat=5, stale_after=30, rules=(rules[0], long_rule, *rules[1:]),
                        models=tuple(f"m{i}" for i in range(filter_state.MAX_MODELS + 1)))
    text = render(state)
    lines = text.splitlines()
    assert sum(line.startswith("rule ") for line in lines) == filter_state.MAX_RULES
    assert sum(line.startswith("model ") for line in lines) == filter_state.MAX_MODELS
    assert "id=long" not in text
    assert f"id={filter_state.MAX_RULES - 1} " in text and f"id={filter_state.MAX_RULES} " not in text
    assert max(len(line) for line in lines) <= filter_state.MAX_LINE
    seen = _as_the_filter_reads_it(text)
    assert "error" not in seen and len(seen["rules"]) == filter_state.MAX_RULES
    # bytes: long rules fill the file; the ones beyond 4 MiB are left out, and the filter reads the rest
    wide = tuple({"name": f"{i}-" + "x" * 8000, "class": "C"} for i in range(600))
    text = render(FilterState(mode="enforce", heartbeat=5, stale_after=30, rules=wide))
    assert len(text.encode()) <= filter_state.MAX_BYTES
    assert len(_as_the_filter_reads_it(text)["rules"]) == text.count("\nrule ") < 600
    with caplog.at_level(logging.WARNING, logger="pal_slurm.slurm.filter_state"):
        for _ in range(3):
            filter_state.write(tmp_path / "state", state)
        filter_state.write(tmp_path / "state", FilterState(mode="enforce", heartbeat=5, stale_after=30))
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and said[0].startswith("4 model, class or rule line(s) left out of the filter state"), said


def test_the_writer_stays_within_the_line_cap_without_counting_lines() -> None:
    """Its settings (7 lines at most), the models and the unheld classes at their cap and the
    rules at theirs are fewer lines than the filter reads."""
    state = FilterState(mode="enforce", heartbeat=5, stale_after=30, wake=True,
                        models=tuple(f"m{i}" for i in range(filter_state.MAX_MODELS)),
                        unheld_classes=tuple(f"c{i}" for i in range(filter_state.MAX_MODELS)),
                        rules=tuple({"class": "A", "id": str(i)} for i in range(filter_state.MAX_RULES)))
    lines = render(state).splitlines()
    assert len(lines) == 7 + 2 * filter_state.MAX_MODELS + filter_state.MAX_RULES <= filter_state.MAX_LINES


def test_a_file_of_exactly_the_byte_limit_is_written_whole_and_a_byte_more_is_not() -> None:
    """Lines of exactly MAX_LINE bytes fill the file to exactly MAX_BYTES (line ends counted);
    a last rule one byte longer would pass the limit and is left out."""
    base = FilterState(mode="enforce", heartbeat=5, stale_after=30)
    room = filter_state.MAX_BYTES - len(render(base))
    full = filter_state.MAX_LINE + 1                     # a line of the longest length and its end
    prefix = len("rule name=")
    rules = [{"name": f"{i:06d}".ljust(filter_state.MAX_LINE - prefix, "x")} for i in range(room // full)]
    last = room % full - 1 - prefix
    assert last > 10
    exact = render(FilterState(mode="enforce", heartbeat=5, stale_after=30,
                               rules=(*rules, {"name": "L" * last})))
    assert len(exact) == filter_state.MAX_BYTES and exact.count("\nrule ") == len(rules) + 1
    assert max(len(line) for line in exact.splitlines()) == filter_state.MAX_LINE
    over = render(FilterState(mode="enforce", heartbeat=5, stale_after=30,
                              rules=(*rules, {"name": "L" * (last + 1)})))
    assert over.count("\nrule ") == len(rules) and len(over) == filter_state.MAX_BYTES - last - prefix - 1
    seen = _as_the_filter_reads_it(exact)
    assert "error" not in seen and len(seen["rules"]) == len(rules) + 1
