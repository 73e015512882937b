"""How the placer ends and keeps holds (pal_slurm/placer/writer.py and failopen.py), over a recording backend.

The real cluster runs (tests/slurm/test_placer*.py) show the commands work; this shows which
command each kind of hold gets: a begin-time hold ends with StartTime=now and is moved on
while the job waits, a priority-0 hold (earlier releases) ends with scontrol release, and a
hold that ran out only has its tag corrected.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.recording_slurm import NOW, held, node, placer


def test_a_begin_time_hold_is_retyped_then_ended_with_start_now(tmp_path: Path) -> None:
    p, b = placer(tmp_path, [held("1")], [node("n1")])
    report = p.cycle()
    assert report.placed == ["1"]
    calls = b.of("1")
    assert ("start_now", "1") in calls and ("release", "1") not in calls
    assert not any(c[0] == "set_begin" for c in calls)  # 80 s ahead: far enough, nothing to move
    # the user's request and the placement recorded first (still `pal:held`), then retyped
    # before the hold ends; the tag says placed only after it ended
    tags = [i for i, c in enumerate(calls) if len(c) > 2 and c[2] == "AdminComment"]
    retype = calls.index(next(c for c in calls if c[:3] == ("update", "1", "NodeList")))
    start = calls.index(("start_now", "1"))
    assert tags[0] < retype < start < tags[-1] and len(tags) == 2
    assert calls[tags[0]][3].startswith("pal:held class=A src=default was=tres_per_node:gres:gpu:1 set=")
    assert calls[tags[-1]][3].startswith("pal: placed")
    assert "\nhold_s 90\n" in (tmp_path / "filter-state").read_text()


def test_a_hold_ending_soon_is_moved_on_first(tmp_path: Path) -> None:
    """Waiting (no GPU free) or about to be retyped: a begin time within two cycles + 10 s moves to now + hold_s."""
    busy = [node("n1", used=(0, 1, 2, 3))]
    p, b = placer(tmp_path, [held("1", begin_in=8), held("2", begin_in=60), held("3", begin_in=-1)], busy, hold_s=120)
    report = p.cycle()
    assert report.held == 3 and not report.placed and not report.released
    assert ("set_begin", "1", str(int(NOW + 120))) in b.calls and ("set_begin", "3", str(int(NOW + 120))) in b.calls
    assert not b.of("2")  # 60 s ahead > 2 x 2 s + 10 s
    assert not any(c[0] in ("start_now", "release") for c in b.calls)
    p, b = placer(tmp_path, [held("4", begin_in=3)], [node("n1")])
    p.cycle()
    calls = [c[0] if c[0] != "update" else c[2] for c in b.of("4")]
    assert calls.index("set_begin") < calls.index("TresPerNode") < calls.index("start_now")


def test_a_priority_zero_hold_from_an_earlier_release_is_ended_with_release(tmp_path: Path) -> None:
    old = held("1", begin_in=None, priority=0, state_reason="JobHeldAdmin")
    p, b = placer(tmp_path, [old], [node("n1")])
    assert p.cycle().placed == ["1"]
    assert ("release", "1") in b.calls and ("start_now", "1") not in b.calls
    # and on release_all (SIGTERM, release-stale) each hold its own command
    p, b = placer(tmp_path, [old, held("2")], [node("n1")])
    assert sorted(p.release_all("placer stopped")) == ["1", "2"]
    assert ("release", "1") in b.calls and ("start_now", "2") in b.calls
    assert ("release", "2") not in b.calls and ("start_now", "1") not in b.calls


def test_released_unchanged_ends_the_hold_and_a_lapsed_hold_only_gets_its_tag_fixed(tmp_path: Path) -> None:
    per_task = held("1", tres_per_node="", tres_per_task="gres:gpu:1")
    lapsed = held("2", begin_in=-30, state_reason="Resources")
    p, b = placer(tmp_path, [per_task, lapsed], [node("n1")])
    report = p.cycle()
    assert report.released == ["1"] and ("start_now", "1") in b.calls
    assert b.of("2") == [("update", "2", "AdminComment",
                          "pal: released unchanged: the hold ended before a placement")]
    assert report.held == 1


def test_waiting_jobs_are_reported_when_nothing_fits(tmp_path: Path) -> None:
    """Every GPU busy: the held job stays held, takes nothing, and the cycle names it as waiting
    (it used to report no waiting job at all in that case)."""
    busy = [node("n1", used=(0, 1, 2, 3)), node("n2", used=(0, 1, 2, 3))]
    p, rec = placer(tmp_path, [held("7")], busy)
    report = p.cycle()
    assert report.waiting == ["7"] and not report.placed and not report.released
    assert not any(c[0] in ("start_now", "release") for c in rec.of("7"))


def test_a_hold_that_ran_low_during_the_cycle_is_moved_on_before_the_retype(tmp_path: Path) -> None:
    """A slow cycle (a large queue, a slow Slurm): the begin time was far enough when the cycle
    read it, but not by the time the job is retyped. It is checked against the time now, just
    before the retype, and moved on first: Slurm cannot start the job mid-change."""
    p, b = placer(tmp_path, [held("1", begin_in=40.0)], [node("n1")])
    ticks = iter(range(10_000))
    p.clock = p.writer.clock = lambda: NOW + 10 * next(ticks)  # every look at the clock: 10 s later
    report = p.cycle()
    assert report.placed == ["1"]
    calls = b.of("1")
    begin = next(i for i, c in enumerate(calls) if c[0] == "set_begin")
    retype = next(i for i, c in enumerate(calls) if c[:3] == ("update", "1", "TresPerNode"))
    assert begin < retype, calls
