"""A short replay on the real test cluster (docs/evaluation.md), so the harness cannot rot: 20 jobs,
plain Slurm and pal-slurm, each measured by the jobs themselves; and the replay's bad
paths on real Slurm: a job that dies, a job that overruns, and Ctrl-C.

The fleet: class A's GPU minor 3 of every node is 2x slow, everything else is 1.0, stored
as the database's classification (what the placer reads and the jobs sleep by).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from conftest import REPO, harness_env
from pal_eval.replay.arms import ArmSettings
from pal_eval.replay.experiment import ArmReport, ClusterHandle, configure_database, run_arms, submitting_user
from pal_eval.replay.fleet import name_fleet
from pal_eval.replay.harness import run_arm
from pal_eval.replay.plan import ReplayPlan, plan_replay
from pal_slurm.placement.model import Cluster
from pal_slurm.placement.variability import GpuVariability
from pal_slurm.simulate.estimates import parse_runtime_estimate
from pal_slurm.simulate.traces import Trace, TraceJob
from tests.slurm.conftest import SlurmCluster

if TYPE_CHECKING:
    from sqlalchemy import Engine

pytestmark = pytest.mark.slurm

SLOW = 2.0
PENALTY = 1.7


def fleet(nodes: list[str]) -> list[GpuVariability]:
    var = [GpuVariability(perfvar={c: (SLOW if c == "A" and i % 4 == 3 else 1.0) for c in "ABCD"},
                          slowdown={c: (SLOW if c == "A" and i % 4 == 3 else 1.0) for c in "ABCD"})
           for i in range(4 * len(nodes))]
    return name_fleet(var, nodes, 4)


def tj(i: int, gpus: int, submit: float, work: float, cls: str) -> TraceJob:
    return TraceJob(job_id=str(i), num_gpus=gpus, submit_time=submit, work=work, work_unit="seconds", model="m",
                    job_class=cls, iter_time_s=1.0, line=i + 2, source="short-replay")


def short_trace() -> Trace:
    """20 jobs over 12 trace seconds: 1-, 2-, 4- and 8-GPU jobs of every class, 2-6 s of work
    each, enough to queue on 16 GPUs."""
    sizes = [1, 2, 1, 4, 1, 8, 2, 1, 4, 1, 2, 1, 8, 1, 4, 2, 1, 1, 4, 2]
    return Trace(name="short", jobs=tuple(tj(i, g, i * 0.6, 2.0 + (i * 7 % 5), "ABCD"[i % 4])
                                          for i, g in enumerate(sizes)))


@pytest.fixture
def replay_db(tmp_path: Path, slurm_cluster: SlurmCluster):
    gpus = fleet(slurm_cluster.nodes)
    url = f"sqlite:///{tmp_path / 'pal.db'}"
    cluster, factors, _ = configure_database(url, gpus, note="short replay")
    return url, cluster, factors


def handle(c: SlurmCluster) -> ClusterHandle:
    return ClusterHandle(env=c.env, state_file=c.filter_state, kill_switch=c.kill_switch)


def _assert_each_arm_was_measured_by_its_jobs(slurm_filter: SlurmCluster, reports: list[ArmReport],
                                              factors: dict[str, Any]) -> None:
    """Every job of both arms ran on exactly the GPUs of its shape, slept by the slowest of them
    for its class (x the locality penalty across nodes), never shared a GPU with another job;
    each arm's run is complete and its own record agrees."""
    for rep in reports:
        slurm_filter.submitted.extend(t.slurm_id for t in rep.run.jobs)
        assert rep.run.complete, rep.notes
        assert len(rep.run.jobs) == 20 and rep.real.jobs == 20
        used: dict[tuple[str, int], list[tuple[float, float]]] = {}
        for t in rep.run.jobs:
            r = t.record
            gpus = [(n, m) for n, m in r["gpus"]]
            # the job found exactly the GPUs of its shape, on as many nodes as it asked for
            assert len(gpus) == len(set(gpus)) == t.plan.job.num_gpus
            assert len({n for n, _ in gpus}) == t.plan.nodes
            # and slept by the slowest of them for its class, x lambda across nodes
            pv = max(factors[n][str(m)][t.plan.job.job_class] for n, m in gpus)
            assert r["factor"] == pytest.approx(pv * (PENALTY if t.plan.nodes > 1 else 1.0))
            assert r["end"] - r["start"] >= t.plan.work_s * r["factor"] - 0.05
            assert r["start"] >= t.submitted_at
            # Slurm's StartTime for it: a whole second, at allocation, before the script ran
            assert r["slurm_start"] == int(r["slurm_start"]) and 0.0 <= r["start"] - r["slurm_start"] < 5.0
            for g in gpus:
                used.setdefault(g, []).append((r["start"], r["end"]))
        for g, spans in used.items():  # Slurm never gave one GPU to two jobs at once
            spans.sort()
            assert all(a[1] <= b[0] + 0.05 for a, b in zip(spans, spans[1:])), (g, spans)
        assert rep.predicted.metrics.jobs == 20
        lead = rep.as_dict()["run_start_lead_s"]  # the run's own median lead, as stored with the result
        assert lead is not None and 0.0 <= lead < 5.0
        assert rep.real.makespan_s >= 11.4 and rep.real.avg_jct_s > 0  # the last job arrives at 11.4 s


def _assert_every_pal_job_went_through_the_placer(url: str, reports: list[ArmReport]) -> Engine:
    """The pal arm's placements as the database recorded them (its engine, for what follows)."""
    from pal_slurm.db.engine import make_engine
    from pal_slurm.placer.audit import placements_for

    engine = make_engine(url, create=False)
    outcomes = {t.slurm_id: (t.plan.job.job_class, {p["outcome"] for p in placements_for(engine, t.slurm_id)})
                for t in reports[1].run.jobs}
    assert all(o & {"applied", "released-unchanged"} for _c, o in outcomes.values()), outcomes
    assert any("applied" in o for _c, o in outcomes.values()), outcomes
    return engine


def _assert_the_history_arm_learns_from_the_slurm_arm(slurm_filter: SlurmCluster, plan: ReplayPlan,
                                                      cluster: Cluster, url: str, factors: dict[str, Any],
                                                      engine: Engine, reports: list[ArmReport],
                                                      tmp_path: Path) -> None:
    """The slurm arm's export imported before a pal+history arm: every placement's estimate
    learned from it."""
    from pal_slurm.placer.audit import placements_for
    from pal_eval.replay.history import history_label
    from pal_eval.replay.repeat import save_export

    export = save_export(tmp_path / "slurm.json", reports[0].as_dict(), submitting_user())
    assert export is not None and len(export.read_text().splitlines()) == 21
    [learned] = run_arms(plan, cluster, handle(slurm_filter), db_url=url, work_dir=tmp_path / "replay",
                         factors=factors, settings=ArmSettings(locality_penalty=PENALTY, placer_interval_s=0.5),
                         say=lambda s: None, arms=["pal+history"], history=[(history_label("short", 1, "slurm"),
                                                                             export)])
    slurm_filter.submitted.extend(t.slurm_id for t in learned.run.jobs)
    assert learned.run.complete, learned.notes
    assert any("learned estimates for 20 of 20 jobs" in n for n in learned.notes), learned.notes
    reasons = [p.get("reason") or "" for t in learned.run.jobs for p in placements_for(engine, t.slurm_id)
               if p["outcome"] == "applied"]
    assert reasons and all("learned from sacct history" in r for r in reasons), reasons


def test_a_short_replay_runs_both_arms_measured_by_the_jobs_themselves(slurm_filter: SlurmCluster, replay_db,
                                                                      tmp_path: Path):
    url, cluster, factors = replay_db
    # 1 trace second = 0.5 real seconds: about 20 s per arm
    plan = plan_replay(short_trace(), seconds_per_hour=1800.0, estimate=parse_runtime_estimate("x2"),
                       nodes=len(slurm_filter.nodes), gpus_per_node=4)
    reports = run_arms(plan, cluster, handle(slurm_filter), db_url=url, work_dir=tmp_path / "replay",
                       factors=factors, settings=ArmSettings(locality_penalty=PENALTY, placer_interval_s=0.5),
                       say=lambda s: None)
    assert [r.arm for r in reports] == ["slurm", "pal"]
    _assert_each_arm_was_measured_by_its_jobs(slurm_filter, reports, factors)
    # every pal-arm job went through the placer (an applied placement, or a multi-node first fit
    # left to Slurm on record): classes B-D have nothing to choose on this fleet (every GPU 1.0)
    # but class A has, so the filter holds them all (all or none: placement.base.unheld_classes)
    engine = _assert_every_pal_job_went_through_the_placer(url, reports)

    # pal+history: the slurm arm's finished jobs as its sacct export, imported before the arm
    # with `pal jobs import-history`; the placer's estimates then come from it
    _assert_the_history_arm_learns_from_the_slurm_arm(slurm_filter, plan, cluster, url, factors, engine, reports,
                                                      tmp_path)
    # a pal arm after it runs without: it removes the replay's histories first
    from pal_eval.replay.experiment import clear_history

    assert clear_history(url) == 20 and clear_history(url) == 0


def test_a_job_that_dies_is_reported_and_the_arm_is_incomplete(slurm_cluster: SlurmCluster, tmp_path: Path):
    trace = Trace(name="die", jobs=(tj(0, 1, 0.0, 1.0, "A"),))
    plan = plan_replay(trace, seconds_per_hour=3600.0, estimate=parse_runtime_estimate("x1"),
                       nodes=len(slurm_cluster.nodes), gpus_per_node=4)
    slurm_cluster.kill_switch.touch()
    run = run_arm(plan, arm="slurm", work_dir=tmp_path, factors={"elsewhere": {}}, locality_penalty=PENALTY,
                  env=slurm_cluster.env)
    slurm_cluster.submitted.extend(t.slurm_id for t in run.jobs)
    assert not run.complete
    assert len(run.problems) == 1 and run.problems[0].startswith(f"job 0 (Slurm {run.jobs[0].slurm_id}): KeyError")
    assert run.outcomes(plan) == []  # nothing fabricated


def test_a_job_that_overruns_is_cancelled_and_reported(slurm_cluster: SlurmCluster, tmp_path: Path):
    trace = Trace(name="overrun", jobs=(tj(0, 1, 0.0, 120.0, "D"),))
    plan = plan_replay(trace, seconds_per_hour=3600.0, estimate=parse_runtime_estimate("x1"),
                       nodes=len(slurm_cluster.nodes), gpus_per_node=4)
    factors = {n: {str(m): {"D": 1.0} for m in range(4)} for n in slurm_cluster.nodes}
    slurm_cluster.kill_switch.touch()
    t0 = time.time()
    # 3 x its expected length would be 6 minutes; a factor of 0.02 makes it 2.4 s
    run = run_arm(plan, arm="slurm", work_dir=tmp_path, factors=factors, locality_penalty=PENALTY,
                  env=slurm_cluster.env, overrun=0.02, overrun_slack_s=0.0, squeue_every_s=0.5)
    sid = run.jobs[0].slurm_id
    slurm_cluster.submitted.append(sid)
    assert time.time() - t0 < 60
    assert not run.complete and "cancelled" in run.problems[0]
    state = slurm_cluster.job(sid).get("JobState")
    assert state in (None, "CANCELLED", "COMPLETING"), state


def test_ctrl_c_cancels_the_replays_jobs(slurm_cluster: SlurmCluster, tmp_path: Path):
    slurm_cluster.kill_switch.touch()
    script = tmp_path / "arm.py"
    script.write_text(textwrap.dedent(f"""
        import signal
        import sys
        from pathlib import Path
        from pal_eval.replay.harness import run_arm, ReplayInterrupted
        # a terminal's Ctrl-C, even when the test run itself was started with SIGINT ignored
        # (in the background of a non-interactive shell, as CI may)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        from pal_eval.replay.plan import plan_replay
        from pal_slurm.simulate.estimates import parse_runtime_estimate
        from pal_slurm.simulate.traces import Trace, TraceJob
        nodes = {slurm_cluster.nodes!r}
        trace = Trace(name="ctrl-c", jobs=tuple(
            TraceJob(job_id=str(i), num_gpus=1, submit_time=i * 1.0, work=300.0, work_unit="seconds", model="m",
                     job_class="D", iter_time_s=1.0, line=i + 2, source="ctrl-c") for i in range(3)))
        plan = plan_replay(trace, seconds_per_hour=3600.0, estimate=parse_runtime_estimate("x1"), nodes=len(nodes),
                           gpus_per_node=4)
        factors = {{n: {{str(m): {{"D": 1.0}} for m in range(4)}} for n in nodes}}
        try:
            run_arm(plan, arm="slurm", work_dir=Path({str(tmp_path / 'w')!r}), factors=factors, locality_penalty=1.7)
        except ReplayInterrupted as exc:
            print(exc)
            sys.exit(130)
        """), encoding="utf-8")
    proc = subprocess.Popen([sys.executable, str(script)], cwd=REPO,
                            env=harness_env({**os.environ, **slurm_cluster.env}),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    records = tmp_path / "w" / "logs"
    deadline = time.time() + 60
    ids: list[str] = []
    while time.time() < deadline and len(ids) < 2:
        time.sleep(0.5)
        ids = sorted(p.stem for p in records.glob("*.out")) if records.exists() else []
    if len(ids) < 2:
        proc.kill()
        pytest.fail(f"the replay's jobs did not start: {proc.communicate()[0]}")
    proc.send_signal(signal.SIGINT)
    try:
        out, _ = proc.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        proc.kill()
        slurm_cluster.cancel(sorted(p.stem for p in records.glob("*.out")))
        pytest.fail(f"the replay did not stop within 90 s of SIGINT: {proc.communicate()[0]}")
    assert proc.returncode == 130, out
    assert "interrupted: cancelled" in out
    # nothing of the replay's runs on: a job whose sbatch the signal met is cancelled too
    active = slurm_cluster.run(["squeue", "--noheader", "--format=%i %T %o"]).stdout.splitlines()
    left = [line for line in active if str(tmp_path) in line and line.split()[1] in ("PENDING", "RUNNING")]
    assert not left, f"the replay's jobs still queued or running after Ctrl-C: {left}"
    doc = slurm_cluster.squeue_json()
    mine = [j for j in doc["jobs"] if str(j.get("name", "")).startswith("replay-")
            and str(j.get("job_id")) in ids]
    assert {str(j["job_id"]) for j in mine} == set(ids), "Slurm should still list the cancelled jobs (MinJobAge)"
    states = {str(j["job_id"]): j["job_state"] for j in mine}
    assert all(("CANCELLED" in s) if isinstance(s, list) else s == "CANCELLED" for s in states.values()), states


def test_a_submission_slurm_refuses_stops_the_arm_and_cancels_what_it_submitted(slurm_cluster: SlurmCluster,
                                                                             tmp_path: Path):
    from dataclasses import replace

    from pal_slurm.errors import PalError

    trace = Trace(name="refused", jobs=(tj(0, 1, 0.0, 300.0, "D"), tj(1, 1, 1.0, 300.0, "D")))
    plan = plan_replay(trace, seconds_per_hour=3600.0, estimate=parse_runtime_estimate("x1"),
                       nodes=len(slurm_cluster.nodes), gpus_per_node=4)
    # the second job asks for 99 GPUs on a node: sbatch refuses it at submit
    plan = replace(plan, jobs=(plan.jobs[0], replace(plan.jobs[1], gpus_per_node=99)))
    factors = {n: {str(m): {"D": 1.0} for m in range(4)} for n in slurm_cluster.nodes}
    slurm_cluster.kill_switch.touch()
    with pytest.raises(PalError, match=r"replay arm 'slurm' stopped after 1 of 2 submissions \(sbatch.*\); "
                                       r"cancelled 1 submitted jobs; no result"):
        run_arm(plan, arm="slurm", work_dir=tmp_path, factors=factors, locality_penalty=PENALTY,
                env=slurm_cluster.env)
    doc = slurm_cluster.squeue_json()
    newest = max((j for j in doc["jobs"] if j.get("name") == "replay-0"), key=lambda j: int(j["job_id"]))
    state = newest["job_state"]
    assert ("CANCELLED" in state) if isinstance(state, list) else state == "CANCELLED", state


def test_a_job_that_can_never_start_is_cancelled_and_reported(slurm_cluster: SlurmCluster, tmp_path: Path):
    from dataclasses import replace

    trace = Trace(name="never", jobs=(tj(0, 1, 0.0, 5.0, "D"),))
    plan = plan_replay(trace, seconds_per_hour=3600.0, estimate=parse_runtime_estimate("x1"),
                       nodes=len(slurm_cluster.nodes), gpus_per_node=4)
    # more nodes than the partition: 22.05's sbatch takes it and Slurm pends it for ever (PartitionConfig)
    plan = replace(plan, jobs=(replace(plan.jobs[0], nodes=99),))
    factors = {n: {str(m): {"D": 1.0} for m in range(4)} for n in slurm_cluster.nodes}
    slurm_cluster.kill_switch.touch()
    from pal_slurm.errors import PalError

    t0 = time.time()
    try:
        run = run_arm(plan, arm="slurm", work_dir=tmp_path, factors=factors, locality_penalty=PENALTY,
                      env=slurm_cluster.env, squeue_every_s=1.0, never_starts_grace_s=4.0)
    except PalError as exc:
        # 24.11 refuses such a job at submit instead: the arm stops, nothing was left (the other path)
        assert "stopped after 0 of 1 submissions" in str(exc) and "Requested node configuration" in str(exc)
        return
    slurm_cluster.submitted.append(run.jobs[0].slurm_id)
    assert time.time() - t0 < 90
    assert not run.complete
    assert re.search(r"can never start here \(pending: Partition(Config|NodeLimit)\); cancelled", run.problems[0])
    assert slurm_cluster.wait_state(run.jobs[0].slurm_id, "CANCELLED") == "CANCELLED"  # by Slurm's own word
