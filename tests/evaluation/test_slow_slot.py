"""A slot turning slow on real Slurm (bench/slow_slot.py), its pure parts and its watch without a
cluster: the recurring workload and its one command line per fingerprint, the factors file with
the slot slowed, the checks read from the jobs' records (jobs' ends to the flag, no job on the slot
after the holder took it, its node's other slots busy meanwhile, every job COMPLETED), and when the
watch changes the factors, asks for the quarantine and stops the submissions."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from pal_eval.replay.harness import factors_path, sbatch_argv, write_factors
from pal_eval.replay.plan import plan_replay
from pal_eval.slow_slot_model import (
    SLOT_MIX,
    Flag,
    Moments,
    Ran,
    busy_share,
    ends_to_flag,
    figures,
    named_by_fingerprint,
    not_completed,
    slowed,
    started_between,
    workload,
)
from pal_eval.slow_slot_watch import Timing, Watch
from pal_slurm.simulate.estimates import parse_runtime_estimate

SLOT = ("pal-r02", 2)
SLOTS = [(f"pal-r0{n}", m) for n in (1, 2) for m in range(4)]


def test_the_workload_recurs_by_fingerprint_at_the_offered_load_with_limits_a_few_times_the_work() -> None:
    hours, gpus = 40.0, 32
    trace = workload(36, hours, 0.8, gpus, seed=1)
    names = {j.name for j in trace.jobs}
    assert 20 <= len(names) <= 36 and all(n.startswith("fp") for n in names)
    assert {j.num_gpus for j in trace.jobs} == {1, 2, 4} and {j.job_class for j in trace.jobs} == {"A"}
    assert all(2.0 * SLOT_MIX.min_s * 0.9 <= j.limit_s for j in trace.jobs)
    by_name: dict[str, set[tuple[int, float]]] = {}
    for j in trace.jobs:
        by_name.setdefault(j.name, set()).add((j.num_gpus, j.limit_s))
        assert j.limit_s >= 1.8 * j.nominal_runtime_s  # base x U[2, 4], the run's noise of a few %
    assert all(len(v) == 1 for v in by_name.values())  # one shape and limit per fingerprint
    offered = sum(j.num_gpus * j.nominal_runtime_s for j in trace.jobs) / (gpus * hours * 3600.0)
    assert 0.6 < offered < 1.0


def test_every_run_of_a_fingerprint_has_one_name_and_one_command_line() -> None:
    trace = workload(12, 20.0, 0.8, 16, seed=3)
    plan = named_by_fingerprint(plan_replay(trace, seconds_per_hour=30.0, estimate=parse_runtime_estimate("limit"),
                                            nodes=4, gpus_per_node=4))
    first: dict[str, list[str]] = {}
    kw = {"script": Path("/w/s.py"), "factors": Path("/w/f.json"), "records": Path("/w/r"), "logs": Path("/w/l"),
          "locality_penalty": 1.0}
    repeated = 0
    for j in plan.jobs:
        assert j.name == j.job.name
        argv = sbatch_argv(j, same_command=True, **kw)
        export = [a for a in argv if a.startswith("--export=")]
        assert export == [f"--export=ALL,PAL_REPLAY_TRACE_ID={j.job.job_id},PAL_REPLAY_WORK_S={j.work_s:.6f}"]
        command = argv[argv.index("/w/s.py"):]
        assert command == ["/w/s.py", "/w/f.json", "/w/r", "A", "1"]
        if j.name in first:
            repeated += 1
            assert [a for a in argv if not a.startswith("--export=")] == first[j.name]
        first.setdefault(j.name, [a for a in argv if not a.startswith("--export=")])
    assert repeated > 10
    # the replay's own jobs keep their command line with the run's values in it
    plain = sbatch_argv(plan.jobs[0], **kw)
    assert not any(a.startswith("--export=") for a in plain) and plan.jobs[0].job.job_id in plain


def test_the_slot_slows_by_the_ratio_and_nothing_else_changes() -> None:
    factors = {"pal-r02": {"2": {"A": 1.1, "D": 1.0}, "3": {"A": 0.9, "D": 1.0}}, "pal-r01": {"0": {"A": 1.0}}}
    out = slowed(factors, SLOT, 1.5)
    assert out["pal-r02"]["2"] == pytest.approx({"A": 1.65, "D": 1.5})
    assert out["pal-r02"]["3"] == factors["pal-r02"]["3"] and out["pal-r01"] == factors["pal-r01"]
    assert factors["pal-r02"]["2"] == {"A": 1.1, "D": 1.0}  # the classification's factors untouched
    with pytest.raises(ValueError, match="no GPU slot pal-r02:7"):
        slowed(factors, ("pal-r02", 7), 1.5)
    with pytest.raises(ValueError, match="positive"):
        slowed(factors, SLOT, 0.0)


def test_the_factors_file_is_replaced_whole(tmp_path: Path) -> None:
    path = factors_path(tmp_path)
    write_factors(path, {"n": {"0": {"A": 1.0}}})
    write_factors(path, {"n": {"0": {"A": 1.5}}})
    assert json.loads(path.read_text()) == {"n": {"0": {"A": 1.5}}}
    assert [p.name for p in tmp_path.iterdir()] == ["factors.json"]  # no temporary file left


def ran(i: int, gpus: list[tuple[str, int]], start: float, end: float, pace: float = 1.0) -> Ran:
    return Ran(str(i), tuple(gpus), start, end, pace)


#: t0 0, k 10 s per trace hour; the change at 100, the holder from 300, submissions until 450, the last end 500
AT = Moments(t0=0.0, k=10.0, change=100.0, holder_start=300.0, stop=450.0, end=500.0)
RUNS = [
    ran(1, [SLOT], 10, 60), ran(2, [SLOT, ("pal-r02", 3)], 60, 110),  # before the change
    ran(3, [SLOT], 110, 170, 1.5), ran(4, [("pal-r01", 0)], 120, 150), ran(5, [SLOT], 170, 230, 1.5),
    ran(6, [SLOT], 230, 320, 1.5),  # running when the holder was asked for; it finishes untouched
    ran(7, [("pal-r02", 0), ("pal-r02", 1)], 310, 400), ran(8, [("pal-r02", 3)], 400, 480),
]


def test_a_run_reads_slurms_start_where_its_record_has_it() -> None:
    r = Ran.of("9", {"start": 10.7, "slurm_start": 10, "end": 50.2, "gpus": [["n", 1]], "pace": 1.2})
    assert (r.start, r.end, r.gpus, r.pace) == (10.0, 50.2, (("n", 1),), 1.2)
    assert Ran.of("9", {"start": 10.7, "end": 50.2}).start == 10.7


def test_the_jobs_to_the_flag_count_the_slots_ends_after_the_change() -> None:
    assert ends_to_flag(RUNS, SLOT, 100.0, "5") == (3, 2)  # jobs 2, 3, 5 ended; 3 and 5 started after it
    assert ends_to_flag(RUNS, SLOT, 100.0, "4") is None  # not a job of the slot


def test_a_job_started_on_the_slot_after_the_holder_is_found() -> None:
    assert started_between(RUNS, [SLOT], 300.0) == []
    intruder = ran(10, [SLOT], 305, 330)
    assert started_between([*RUNS, intruder], [SLOT], 300.0) == [intruder]
    assert started_between(RUNS, [("pal-r02", 0), ("pal-r02", 3)], 300.0, 450.0) == [RUNS[6], RUNS[7]]


def test_the_figures() -> None:
    flags = [Flag(SLOT, "A", at=231.0, seen=240.0, crossing="5"),
             Flag(("pal-r01", 0), "A", at=151.0, seen=160.0, crossing="4", with_slots=(("pal-r01", 1),))]
    submitted = [r.slurm_id for r in RUNS]
    states = {j: "COMPLETED" for j in submitted}
    f = figures(RUNS, flags, slot=SLOT, slots=SLOTS, at=AT, submitted=submitted, states=states, intruders={})
    assert f["flag"]["jobs_ended"] == 3 and f["flag"]["slowed_jobs_ended"] == 2
    assert f["flag"]["hours_after_change"] == pytest.approx(13.1) and f["flag"]["seen_trace_h"] == pytest.approx(24)
    assert [x["gpu"] for x in f["false_flags"]] == ["pal-r01:0"] and f["false_flags"][0]["with"] == ["pal-r01:1"]
    assert f["slot_jobs"] == {"before_change": 2, "change_to_holder": 3, "after_holder": 0, "after_holder_ids": []}
    assert f["mates"]["jobs_started_out_of_service"] == 2
    # pal-r02's slots 0, 1, 3 from 300 to 500: job 7 held two of them 90 s, job 8 one of them 80 s
    assert f["mates"]["busy_out_of_service"] == pytest.approx((2 * 90 + 80) / (3 * 200))
    assert f["jobs"] == {"submitted": 8, "records": 8, "completed": 8, "not_completed": {}}


def test_a_job_not_seen_completed_is_named_with_its_last_state() -> None:
    assert not_completed(["1", "2", "3"], {"1": "COMPLETED", "2": "CANCELLED"}) == {"2": "CANCELLED",
                                                                                    "3": "never seen"}


def test_busy_share_counts_only_the_slots_asked_for_within_the_window() -> None:
    runs = [ran(1, [("n", 0), ("n", 1)], 0, 100), ran(2, [("n", 2)], 50, 150)]
    assert busy_share(runs, [("n", 0)], 0, 100) == 1.0
    assert busy_share(runs, [("n", 1), ("n", 2)], 50, 150) == pytest.approx((50 + 100) / 200)
    assert busy_share(runs, [], 0, 100) == 0.0


# -- the watch, with a stand-in for `pal` and for the learning --------------------------------------

#: a stand-in for `python -m pal_slurm --config F`: `gpus quarantine` succeeds, `gpus quarantined`
#: lists a holder job 77 on pal-r02:2
FAKE_PAL = [sys.executable, "-c", "import json, sys; a = sys.argv[1:]; print(json.dumps([{'gpu': 'pal-r02:2', "
                                  "'holder_job': '77'}]) if 'quarantined' in a else 'pal-r02:2 out of service')"]


def outcome(*flagged: str) -> SimpleNamespace:
    gpus = {f"GPU-{n}-{m}": (n, m) for n, m in SLOTS}
    flags = [SimpleNamespace(gpu=g, job_class="A", at=5.0, jobs=("11", "12"), with_gpus=(),
                             passive_factor=1.5, benchmark_factor=1.0) for g in flagged]
    return SimpleNamespace(gpus=gpus, opened=flags, runs=40, stored=8)


def watch(tmp_path: Path, learned: list[SimpleNamespace]) -> Watch:
    factors = {n: {str(m): {"A": 1.0} for nn, m in SLOTS if nn == n} for n, _ in SLOTS}
    w = Watch(SLOT, 1.5, Timing(k=10.0, change_s=50.0, learn_s=10.0, watch_s=200.0, after_s=60.0), tmp_path,
              factors, {}, FAKE_PAL, learn=lambda: learned.pop(0), say=lambda s: None)
    w.t0 = 0.0
    return w


def test_the_watch_slows_the_slot_and_quarantines_it_once_it_is_flagged(tmp_path: Path) -> None:
    w = watch(tmp_path, [outcome("GPU-pal-r01-0"), outcome("GPU-pal-r02-2")])
    w.change(50.0)
    assert json.loads(factors_path(tmp_path).read_text())["pal-r02"]["2"] == {"A": 1.5}
    w.learn_now(60.0)
    assert [f.slot for f in w.flags] == [("pal-r01", 0)] and not w.asked  # another GPU: no quarantine
    w.learn_now(70.0)
    assert [f.slot for f in w.flags][-1] == SLOT and w.flags[-1].crossing == "12"
    assert w.asked and w.asked[0]["argv"][-6:] == ["gpus", "quarantine", "pal-r02:2", "--reason", "fail-slow",
                                                   "--apply"]
    assert w._quarantine is not None
    w._quarantine.wait(timeout=60)
    w.quarantine_progress(80.0)
    assert w.asked[0]["rc"] == 0 and w.holder == "77"
    assert not w._may_ask()  # asked once, done


def test_the_submissions_stop_after_the_holder_took_the_slot_or_when_the_change_is_never_flagged(
        tmp_path: Path) -> None:
    w = watch(tmp_path, [])
    assert not w.done(10_000.0)  # nothing changed yet: the plan decides
    w.changed_at = 50.0
    assert not w.done(249.0) and w.done(250.0)  # watch_s after the change, never flagged
    w.asked.append({"at": 100.0, "rc": 0})
    assert not w.done(219.0) and w.done(220.0)  # asked, the holder never seen running: 2 x after_s
    w.holder_start = 130.0
    assert not w.done(189.0) and w.done(190.0)  # after_s after the holder took the slot
