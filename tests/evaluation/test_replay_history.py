"""The replay's runtime history without a cluster: an arm's finished jobs as an sacct export that
the importer reads back, which earlier runs a pal+history arm learns from, and its prediction
with the learned estimates (pal_eval.replay.history, repeat, prediction.predict)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from sqlalchemy import Engine

from pal_eval.replay.arms import ArmSettings
from pal_eval.replay.fleet import name_fleet
from pal_eval.replay.harness import ArmRun, Tracked
from pal_eval.replay.history import arm_export, history_label
from pal_eval.replay.plan import plan_replay
from pal_eval.replay.prediction import predict
from pal_eval.replay.repeat import earlier_runs, export_path, save_export
from pal_slurm.db.engine import session_scope
from pal_slurm.db.history_store import import_history, learned_runtimes_all
from pal_slurm.errors import PalError
from pal_slurm.jobs.runtimes import RuntimeRule
from pal_slurm.jobs.sacct_history import read_history
from pal_slurm.placement.variability import GpuVariability, cluster_from_gpus
from pal_slurm.simulate.estimates import RuntimeEstimate, parse_runtime_estimate
from pal_slurm.simulate.traces import Trace, TraceJob

T0 = float(int(time.time()) - 86400)  # a day ago: inside the learning window


def tj(i: int, gpus: int, submit: float, work: float) -> TraceJob:
    return TraceJob(job_id=str(i), num_gpus=gpus, submit_time=submit, work=work, work_unit="seconds", model="m",
                    job_class="A", iter_time_s=1.0, line=i + 2, source="t.csv")


def plan(n: int = 4):
    t = Trace(name="t", jobs=tuple(tj(i, 1 + (i % 2) * 3, 60.0 * i, 600.0 + 60 * i) for i in range(n)))
    return plan_replay(t, seconds_per_hour=360.0, estimate=parse_runtime_estimate("x4"), nodes=2, gpus_per_node=4)


def finished_arm(p, *, broken: str | None = None) -> dict:
    """A stored arm result as the harness writes it, every job run for its work (real s)."""
    run = ArmRun(arm="slurm", t0=T0)
    for k, j in enumerate(p.jobs):
        start = j.submit_at_s + 1.0
        record = {"start": T0 + start, "end": T0 + start + j.work_s, "gpus": [["pal-r01", g] for g in range(j.job.num_gpus)]}
        if broken == j.job.job_id:
            record = {"error": "boom", "start": 0.0, "end": 0.0}
        run.jobs.append(Tracked(plan=j, slurm_id=str(100 + k), submitted_at=T0 + j.submit_at_s, limit_s=1e9,
                                record=record))
    return {"arm": "slurm", "complete": broken is None, "run": run.as_dict()}


def test_an_arms_finished_jobs_become_the_sacct_export_a_site_would_have(engine: Engine) -> None:
    p = plan()
    text = arm_export(finished_arm(p), user="root")
    h = read_history(text.splitlines(keepends=True), source="slurm.sacct")
    assert [(j.job_id, j.name, j.user, j.state, j.gpus, j.nodes) for j in h.jobs] == [
        (str(100 + k), f"replay-{k}", "root", "COMPLETED", 1 + (k % 2) * 3, 1) for k in range(4)]
    assert [j.elapsed_s for j in h.jobs] == [round(j.work_s) for j in p.jobs]  # whole seconds, as sacct
    with session_scope(engine) as s:
        import_history(s, h, history_label("t", 1, "slurm"))
        learned = learned_runtimes_all(s, RuntimeRule(min_jobs=1), now=None)
    # the placer looks these up by the user and name each job is submitted as
    assert {k: learned.learned("", "root", j.name).seconds for k, j in enumerate(p.jobs)} == {
        k: float(round(j.work_s)) for k, j in enumerate(p.jobs)}
    broken = arm_export(finished_arm(p, broken="2"), user="root")
    assert "replay-2" not in broken and "replay-3" in broken  # a job that did not finish has no runtime
    with pytest.raises(PalError, match="no start time"):
        arm_export({"arm": "pal", "run": {"jobs": []}}, user="root")


def test_save_export_writes_complete_arms_only(tmp_path: Path) -> None:
    p = plan()
    res = tmp_path / "t" / "rep1-seed1" / "slurm.json"
    res.parent.mkdir(parents=True)
    assert save_export(res, finished_arm(p), "root") == export_path(res) == res.with_suffix(".sacct")
    assert export_path(res).read_text().startswith("JobID|JobName|User|Submit|Start|End|Elapsed|State")
    other = res.with_name("pal.json")
    assert save_export(other, finished_arm(p, broken="1"), "root") is None and not export_path(other).exists()


def test_a_result_stored_without_its_start_time_is_exported_from_its_files_time(tmp_path: Path) -> None:
    """Results written before the run's t0 was stored: the run began its wall time before the
    result file was written; elapsed times (what is learned) are the same either way."""
    import json
    import os

    p = plan()
    doc = finished_arm(p)
    t0 = doc["run"].pop("t0")
    res = tmp_path / "slurm.json"
    res.write_text(json.dumps(doc))
    os.utime(res, (t0 + doc["run"]["wall_s"], t0 + doc["run"]["wall_s"]))
    assert save_export(res, doc, "root") == export_path(res)
    assert export_path(res).read_text() == arm_export({**doc, "run": {**doc["run"], "t0": t0}}, user="root")


def test_pal_history_learns_only_from_earlier_runs_never_its_own() -> None:
    done = lambda rep, ok=True: {"rep": rep, "complete": ok}  # noqa: E731
    results = {"slurm": [done(1), done(2), done(3)], "pal": [done(1), done(2, ok=False)],
               "pal+history": [done(1), done(2)]}
    assert earlier_runs(results, 1) == [(1, "pal"), (1, "slurm")]
    assert earlier_runs(results, 2) == [(1, "pal"), (1, "slurm"), (2, "slurm")]  # not rep 3: its future
    assert earlier_runs({"pal+history": [done(1)]}, 2) == []


def test_learned_estimates_are_capped_by_the_limit_and_the_limit_where_nothing_was_learned() -> None:
    p = plan()
    jobs = {j.job.job_id: j.job for j in p.jobs}
    est = RuntimeEstimate.from_learned({"0": 100.0, "1": 1e9})
    assert est.before_start(jobs["0"]) == 100.0 == est.running(jobs["0"], 0.0, 5.0).expected_end(0.0)
    assert est.before_start(jobs["1"]) == jobs["1"].limit_s  # never more than the limit
    assert est.before_start(jobs["2"]) == jobs["2"].limit_s  # nothing learned: the limit
    assert est.describe() == "learned (2 jobs, else limit)"


def test_pal_history_with_nothing_learned_predicts_exactly_the_pal_arm() -> None:
    var = [GpuVariability(perfvar={c: 1.0 + 0.5 * (i == 7) for c in "ABCD"},
                          slowdown={c: 1.0 + 0.5 * (i == 7) for c in "ABCD"}) for i in range(8)]
    cluster = cluster_from_gpus(name_fleet(var, ["pal-r01", "pal-r02"], 4))
    p = plan(8)
    pal = predict(p, cluster, "pal", ArmSettings())
    none = predict(p, cluster, "pal+history", ArmSettings(), learned={})
    assert [(o.start_time, o.gpu_ids) for o in none.outcomes] == [(o.start_time, o.gpu_ids) for o in pal.outcomes]
    exact = {j.job.job_id: j.job.nominal_runtime_s for j in p.jobs}
    learned = predict(p, cluster, "pal+history", ArmSettings(), learned=exact)
    assert learned.policy == pal.policy and len(learned.outcomes) == len(p.jobs)


@pytest.mark.parametrize("args", [["--history", "{bad}", "--arms", "pal+history"], ["--cap-hours", "0"]])
def test_the_replay_refuses_bad_input_before_any_cluster_starts(tmp_path: Path, args: list[str]) -> None:
    """A history file that does not parse (FILE:LINE) and a runtime cap that makes no sense are
    refused with exit 2 and one line, before a cluster starts (so this needs neither root nor Slurm)."""
    import subprocess
    import sys

    from conftest import harness_env

    bad = tmp_path / "bad.sacct"
    bad.write_text("JobID|JobName|User|Start|End|Elapsed|State\n"
                   "1|a|u|notatime|2026-11-30T07:00:00|00:01:00|COMPLETED\n")
    script = Path(__file__).resolve().parents[2] / "bench" / "replay.py"
    res = subprocess.run([sys.executable, str(script), *[a.format(bad=bad) for a in args], "--jobs", "2",
                          "--out", str(tmp_path / "out")], capture_output=True, text=True, env=harness_env(),
                         timeout=120)
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr
    want = f"{bad}:2: Start 'notatime'" if "--history" in args else "--cap-hours must be > 0"
    assert want in res.stderr and "replay cluster" not in res.stdout


def two_gpus_and_a_waiting_job(x_work: float):
    """One node of 2 equal GPUs; job x (1 GPU, `x_work` s) at 0, job y (both GPUs) at 10 s,
    limits 2000 s: y waits for x, so each pass shows when x is expected to end."""
    def job(i: str, gpus: int, submit: float, work: float) -> TraceJob:
        return TraceJob(job_id=i, num_gpus=gpus, submit_time=submit, work=work, work_unit="seconds", model="m",
                        job_class="A", iter_time_s=1.0, line=2, source="t.csv", limit_s=2000.0)

    var = [GpuVariability(perfvar={c: 1.0 for c in "ABCD"}, slowdown={c: 1.0 for c in "ABCD"}) for _ in range(2)]
    return (cluster_from_gpus(name_fleet(var, ["pal-r01"], 2)),
            Trace(name="t", jobs=(job("x", 1, 0.0, x_work), job("y", 2, 10.0, 50.0))))


def test_a_job_that_outlives_its_learned_runtime_is_expected_at_its_limit_from_then_on() -> None:
    """As the placer's `expected_end`: start + learned runtime while that is ahead, then start
    + limit (Slurm's EndTime); the moment it runs out is a pass of its own when a job waits."""
    from pal_slurm.placement.policies import get_policy
    from pal_slurm.simulate.event import EventOptions, simulate_events

    cluster, trace = two_gpus_and_a_waiting_job(x_work=1000.0)
    seen: list[tuple[float, float]] = []
    opts = EventOptions(runtime_estimate=RuntimeEstimate.from_learned({"x": 100.0}), backfill_interval_s=1e9)
    res = simulate_events(trace, cluster, get_policy("slurm-backfill"), opts,
                          on_decision=lambda snap, _q, _bf, _d: seen.append((snap.now, snap.expected_end.get("x", -1.0))))
    assert (10.0, 100.0) in seen  # y waits for x's GPU, expected at its learned end
    assert (100.0, 2000.0) in seen  # x outlived it: a pass at that moment, x now due at its limit
    y = next(o for o in res.outcomes if o.job_id == "y")
    assert y.start_time == 1000.0  # the truth is unchanged: y starts when x really ends
    limit = simulate_events(trace, cluster, get_policy("slurm-backfill"),
                            EventOptions(runtime_estimate=RuntimeEstimate(kind="limit"), backfill_interval_s=1e9),
                            on_decision=lambda snap, _q, _bf, _d: seen.append((-1.0, snap.now)))
    assert limit.outcomes == res.outcomes


def test_a_start_lead_makes_a_job_that_runs_exactly_its_learned_runtime_look_overdue() -> None:
    """Slurm's StartTime lies before the job's work starts (a whole second, at allocation), so
    the placer's start + learned runtime falls before the job really ends: for its last
    moments it is overdue and expected at start + limit. Without the lead the learned end is
    right and nothing jumps; the lead moves what the scheduler expects, never the truth."""
    from pal_slurm.placement.policies import get_policy
    from pal_slurm.simulate.event import EventOptions, simulate_events

    cluster, trace = two_gpus_and_a_waiting_job(x_work=100.0)

    def views(lead: float, grace: float = 0.0) -> tuple[list[tuple[float, float]], object]:
        seen: list[tuple[float, float]] = []
        opts = EventOptions(runtime_estimate=RuntimeEstimate.from_learned({"x": 100.0}, grace_s=grace),
                            backfill_interval_s=1e9, start_lead_s=lead)
        res = simulate_events(trace, cluster, get_policy("slurm-backfill"), opts,
                              on_decision=lambda snap, _q, _bf, _d: seen.append((snap.now,
                                                                                snap.expected_end.get("x", -1.0))))
        return seen, res

    exact, res0 = views(0.0)
    assert (10.0, 100.0) in exact and all(end != 2000.0 for _now, end in exact)
    led, res30 = views(30.0)
    assert (10.0, 70.0) in led  # Slurm's start + learned: 30 s before the work's end
    assert (70.0, 1970.0) in led  # outlived while still running: due at (Slurm's start) + limit
    assert res30.outcomes == res0.outcomes  # the truth is unchanged: y starts when x really ends
    # the placer's grace (LEARNED_END_GRACE_S) covers the lead: x is expected, never overdue
    graced, res_g = views(30.0, grace=40.0)
    assert (10.0, 110.0) in graced and all(end != 1970.0 for _now, end in graced)
    assert res_g.outcomes == res0.outcomes


def test_the_start_lead_is_read_from_job_records_and_from_slurmctld_logs() -> None:
    """Both sources of the lead: the job record's own `slurm_start`, and for older runs the
    allocation messages of slurmctld's log (22.05 and 24.11 print them alike), matched by job
    id and time; a restarted cluster's reused id is told apart by the time."""
    from datetime import datetime

    from pal_eval.replay.start_lead import allocation_times, lead_from_log, start_lead

    assert start_lead([{"start": 10.9, "slurm_start": 10.0}, {"start": 21.3, "slurm_start": 21.0},
                       {"start": 5.0}]) == pytest.approx(0.6)  # median of 0.9 and 0.3; the third has none
    assert start_lead([{"start": 1.0}]) is None
    log = ["[2026-12-02T21:37:56.010] sched: Allocate JobId=176 NodeList=pal-r[06-08] #CPUs=3 Partition=gpu",
           "[2026-12-02T21:29:27.696] sched/backfill: _start_job: Started JobId=1 in gpu on pal-r01",
           "[2026-12-02T21:29:35.953] _job_complete: JobId=1 done",
           "[2026-12-02T22:29:27.100] sched: Allocate JobId=1 NodeList=pal-r02 #CPUs=1 Partition=gpu",
           "garbage line"]
    allocs = allocation_times(log)
    at = lambda text: datetime.fromisoformat(text).timestamp()  # noqa: E731
    assert allocs == {"176": [at("2026-12-02T21:37:56.010")],
                      "1": [at("2026-12-02T21:29:27.696"), at("2026-12-02T22:29:27.100")]}
    records = [{"job": "1", "start": at("2026-12-02T21:29:27.800")},  # the first cluster's job 1
               {"job": "176", "start": at("2026-12-02T21:37:56.200")},
               {"job": "9", "start": at("2026-12-02T21:37:56.200")},  # not in the log
               {"trace_id": "x", "start": 1.0}]  # no job id
    lead, matched = lead_from_log(records, allocs)
    assert matched == 2 and lead == pytest.approx((0.8 + 0.2) / 2)


def test_a_calibration_run_gives_each_latency_and_the_start_lead() -> None:
    """`latencies_from` on a hand-made calibration: wave 1 starts 0.9 s after submission, wave 2
    1.4 s after its GPUs' wave-1 job ended (0.5 s of release, then 0.9 s of dispatch); every script started 0.6 s after the whole second
    Slurm reports as its StartTime, except one record without it (an older job script)."""
    from pal_eval.replay.calibration import calibration_plan, latencies_from

    cal = calibration_plan(2, 4)
    run = ArmRun(arm="slurm", t0=T0)
    for k, j in enumerate(cal.jobs):
        node = f"pal-r0{1 + k % 2}"
        start = T0 + 100.6 + k if j.job.job_id.startswith("cal0") else T0 + 100.6 + (k - 2) + 8.0 + 1.4
        submitted = start - 0.9 if j.job.job_id.startswith("cal0") else T0 + 90.0
        record = {"start": start, "end": start + 8.0, "gpus": [[node, g] for g in range(4)],
                  **({"slurm_start": float(int(start))} if k != 3 else {})}
        run.jobs.append(Tracked(plan=j, slurm_id=str(k + 1), submitted_at=submitted, limit_s=1e9, record=record))
    lat = latencies_from(run)
    assert lat.start_latency_s == pytest.approx(0.9) and lat.visible_after_s == 0.0
    assert lat.release_latency_s == pytest.approx(0.5)
    assert lat.start_lead_s == pytest.approx(0.6, abs=1e-6)
    old = ArmRun(arm="slurm", t0=T0, jobs=[Tracked(plan=t.plan, slurm_id=t.slurm_id, submitted_at=t.submitted_at,
                                                   limit_s=1e9, record={k: v for k, v in t.record.items()
                                                                        if k != "slurm_start"}) for t in run.jobs])
    assert latencies_from(old).start_lead_s == 0.0  # not measured: no lead, as before


def test_an_arm_is_predicted_as_the_mean_over_copies_with_jittered_arrivals() -> None:
    """`predict_mean`: the exact inputs' run (kept for job-by-job comparisons) and copies with
    every arrival moved by up to the jitter; the figures are their mean, the band their range."""
    import statistics

    from pal_eval.replay.prediction import METRICS, predict_mean

    var = [GpuVariability(perfvar={c: 1.0 + 0.5 * (i == 7) for c in "ABCD"},
                          slowdown={c: 1.0 + 0.5 * (i == 7) for c in "ABCD"}) for i in range(8)]
    cluster = cluster_from_gpus(name_fleet(var, ["pal-r01", "pal-r02"], 4))
    p = plan(8)
    exact = predict(p, cluster, "slurm", ArmSettings())
    alone = predict_mean(p, cluster, "slurm", ArmSettings(), copies=0)
    assert alone.metrics == exact.metrics and alone.base.outcomes == exact.outcomes
    assert all(alone.band[m] == (getattr(exact.metrics, m),) * 2 for m in METRICS)
    pm = predict_mean(p, cluster, "slurm", ArmSettings(), copies=4, jitter_s=2.0)
    copies = [predict(p, cluster, "slurm", ArmSettings(), jitter=(seed, p.to_trace_s(2.0))).metrics
              for seed in range(1, 5)]
    assert any(c.avg_jct_s != exact.metrics.avg_jct_s for c in copies)  # the jitter moves the queue
    assert pm.metrics.avg_jct_s == pytest.approx(statistics.mean([exact.metrics.avg_jct_s] + [c.avg_jct_s for c in copies]))
    assert pm.band["makespan_s"] == (min(c.makespan_s for c in [exact.metrics, *copies]),
                                     max(c.makespan_s for c in [exact.metrics, *copies]))
    assert pm.metrics.jobs == len(p.jobs) and pm.base.outcomes == exact.outcomes


def test_a_stored_result_is_predicted_again_on_the_inputs_of_its_run(tmp_path: Path) -> None:
    """`bench/replay.py --repredict`: the latencies the run measured and, for pal+history, the
    runtimes learned again from the same exports; the measurement itself is kept."""
    from dataclasses import replace

    from pal_eval.replay.arms import Latencies
    from pal_eval.replay.experiment import configure_database, learned_estimates, repredicted, submitting_user
    from pal_eval.replay.prediction import predict_mean

    var = [GpuVariability(perfvar={c: 1.0 + 0.5 * (i == 7) for c in "ABCD"},
                          slowdown={c: 1.0 + 0.5 * (i == 7) for c in "ABCD"}) for i in range(8)]
    db_url = f"sqlite:///{tmp_path / 'pal.db'}"
    cluster, _factors, _version = configure_database(db_url, name_fleet(var, ["pal-r01", "pal-r02"], 4), note="test")
    p = plan(8)
    export = tmp_path / "slurm.sacct"
    export.write_text(arm_export(finished_arm(p), user=submitting_user()))
    history = [(history_label("t", 1, "slurm"), export)]
    lat = {"visible_after_s": 0.2, "start_latency_s": 0.7, "release_latency_s": 0.05}
    settings = ArmSettings()
    for arm in ("slurm", "pal", "pal+history"):
        stored = {"arm": arm, "latencies_s": lat, "real": {"avg_jct_s": 1000.0, "makespan_s": None},
                  "predicted": {"avg_jct_s": 1.0}, "comparison": [], "rep": 1}
        again = repredicted(stored, p, cluster, settings, db_url=db_url,
                            history=history if arm == "pal+history" else ())
        learned = learned_estimates(db_url, p, settings) if arm == "pal+history" else None
        assert learned is None or len(learned) == len(p.jobs)
        want = predict_mean(p, cluster, arm, replace(settings, latencies={arm: Latencies(**lat)}), learned=learned)
        assert again["predicted"] == want.metrics.as_dict() and again["real"] == stored["real"]
        assert again["prediction"]["copies"] == want.copies
        row = {r["metric"]: r for r in again["comparison"]}
        assert row["avg_jct_s"]["diff"] == pytest.approx((want.metrics.avg_jct_s - 1000.0) / 1000.0)
        assert row["makespan_s"]["real"] != row["makespan_s"]["real"]  # not measured: NaN, no difference
    with pytest.raises(PalError, match="exports its run learned from"):
        repredicted({"arm": "pal+history", "latencies_s": lat}, p, cluster, settings, db_url=db_url)
