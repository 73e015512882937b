"""One belief about running jobs: the event simulator and the placement daemon expect a running
job to end when placement/belief.py says, and so at the same moment.

The first test pins the wiring (both reach the same functions: a copy of the rule in either
would not); the second the values (each running job at each of a simulated run's decisions,
rendered as Slurm shows it, is expected by the placer exactly where the simulator expected it).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace

import pytest

from pal_slurm.jobs.runtimes import LEARNED_END_GRACE_S, LearnedRuntimes
from pal_slurm.placement import belief
from pal_slurm.placement.model import Decision, JobRequest, Snapshot
from pal_slurm.placement.policies import get_policy
from pal_slurm.placer import problem
from pal_slurm.simulate.estimates import RuntimeEstimate
from pal_slurm.simulate.event import EventOptions, simulate_events
from pal_slurm.simulate.traces import Trace, TraceJob
from pal_slurm.slurm.model import SlurmJob
from tests.support.placement_cases import fleet


def trace(n: int = 40) -> Trace:
    """Jobs of 1-8 GPUs with time limits 1-3 x their work, arriving from t=5 s."""
    import random

    rng = random.Random(11)
    jobs, t = [], 5.0
    for i in range(n):
        t += rng.choice([0.0, 20.0, 90.0, 400.0])
        gpus = rng.choice([1, 1, 2, 4, 8])
        work = rng.uniform(200, 5000)
        jobs.append(TraceJob(job_id=str(100 + i), num_gpus=gpus, submit_time=t, work=work, work_unit="seconds",
                             model="m", job_class=rng.choice("ABCD"), iter_time_s=1.0, line=i + 1, source="belief",
                             gpus_per_node=min(gpus, 4), limit_s=60.0 * round(work * rng.uniform(1.0, 3.0) / 60.0 + 1)))
    return Trace(name="belief", jobs=tuple(jobs))


def learned(t: Trace) -> dict[str, float]:
    """Runtimes learned for most jobs: some short of the truth (outlived while running), some
    over the limit (never the expected end), none for the rest (expected at the limit)."""
    return {j.job_id: j.work * f for j, f in zip(t.jobs, [0.5, 0.9, 1.2, 3.0, 0.0] * len(t.jobs)) if f}


def running_as_slurm_shows(job_id: str, start: float, limit_s: float) -> SlurmJob:
    return SlurmJob(job_id=job_id, name=f"job-{job_id}", user="u", state="RUNNING", state_reason="None", priority=1,
                    partition="gpu", submit_time=1.0, start_time=start, end_time=start + limit_s)


def test_the_simulator_and_the_placer_reach_the_same_belief(monkeypatch: pytest.MonkeyPatch) -> None:
    callers: dict[str, set[str]] = {"expected_end": set(), "completing_end": set()}
    expected_end, completing_end = belief.Running.expected_end, belief.completing_end

    def spy_expected(self: belief.Running, now: float) -> float | None:
        callers["expected_end"].add(sys._getframe(1).f_globals["__name__"])
        return expected_end(self, now)

    def spy_completing(*args: float | None) -> float | None:
        callers["completing_end"].add(sys._getframe(1).f_globals["__name__"])
        return completing_end(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(belief.Running, "expected_end", spy_expected)
    monkeypatch.setattr(belief, "completing_end", spy_completing)
    t = trace(12)
    opts = EventOptions(runtime_estimate=RuntimeEstimate.from_learned(learned(t), grace_s=LEARNED_END_GRACE_S),
                        release_latency_s=300.0)  # long enough for events while jobs are COMPLETING
    simulate_events(t, fleet(), get_policy("slurm-backfill"), opts)
    run = running_as_slurm_shows("1", 100.0, 3600.0)
    problem.expected_end(run, LearnedRuntimes(by_name={("u", "job-1"): 50.0}), 120.0)
    problem.expected_end(replace(run, state="COMPLETING", end_time=130.0), None, 140.0)
    assert callers == {"expected_end": {"pal_slurm.simulate.running", "pal_slurm.placer.problem"},
                       "completing_end": {"pal_slurm.simulate.running", "pal_slurm.placer.problem"}}


@dataclass(frozen=True)
class Moment:
    now: float
    ends: dict[str, float]


@pytest.mark.parametrize("lead", [0.0, 0.5, 3.0])
def test_the_placer_expects_each_running_job_when_the_simulator_did(lead: float) -> None:
    """Learned runtimes with the placer's grace, a start latency, Slurm's StartTime `lead` before
    the work starts (3 s: longer than the grace, so a job running its learned runtime is overdue
    for its last second and expected at its limit from then on)."""
    t = trace()
    known = learned(t)
    opts = EventOptions(runtime_estimate=RuntimeEstimate.from_learned(known, grace_s=LEARNED_END_GRACE_S),
                        start_latency_s=1.0, start_lead_s=lead, backfill_interval_s=0.0)
    moments: list[Moment] = []

    def keep(snap: Snapshot, _q: list[JobRequest], _bf: bool, _d: Decision) -> None:
        moments.append(Moment(snap.now or 0.0, dict(snap.expected_end)))

    res = simulate_events(t, fleet(), get_policy("pal-guard"), opts, on_decision=keep)
    starts = {o.job_id: o.start_time - lead for o in res.outcomes}  # as Slurm shows them
    limits = {j.job_id: j.limit_s for j in t.jobs}
    table = LearnedRuntimes(by_name={("u", f"job-{jid}"): s for jid, s in known.items()})
    compared = overdue = 0
    for m in moments:
        for jid, end in m.ends.items():
            run = running_as_slurm_shows(jid, starts[jid], limits[jid])
            assert problem.expected_end(run, table, m.now) == end, (m.now, jid)
            compared += 1
            overdue += jid in known and end == run.end_time and starts[jid] + known[jid] < run.end_time
    assert compared > 100 and overdue > 0
