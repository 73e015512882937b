"""Drifting fleets (pal_slurm.simulate.drift, .learning, and the event simulator's drift stage):
the drift changes the true pace at its moment and never a belief; a running job's remaining
work follows its GPU's pace; no drift gives the runs of a fleet that never drifts; a re-profile
updates the belief and repairs the fixable GPUs; the passive belief moves only through the jobs
it was told of."""

from __future__ import annotations

import math

import pytest

from pal_slurm.placement.model import Cluster, Decision, JobRequest, Snapshot
from pal_slurm.placement.policies import get_policy
from pal_slurm.simulate.drift import DriftSpec, Drifting, FixedBelief, OracleBelief, Slowdown, TrueFleet, draw
from pal_slurm.simulate.event import EventOptions, simulate_events
from pal_slurm.simulate.fleets import parametric_from_spec
from pal_slurm.simulate.learning import LearnSettings, PassiveBelief
from pal_slurm.simulate.synthetic import generate
from pal_slurm.simulate.traces import Trace, TraceJob

HOUR = 3600.0


def job(jid: str, submit: float, nominal: float, gpus: int = 1, cls: str = "A", name: str = "fp") -> TraceJob:
    return TraceJob(job_id=jid, num_gpus=gpus, submit_time=submit, work=nominal, work_unit="seconds", model=name,
                    job_class=cls, iter_time_s=1.0, line=0, source="test", name=name, limit_s=10 * nominal)


def fleet_of(pv: list[float], nodes: int = 1) -> Cluster:
    table = {c: list(pv) for c in "ABCD"}
    return Cluster.uniform(nodes, len(pv) // nodes, slowdown=table, perfvar=table)


# -- the spec and the truth --------------------------------------------------------------------
def test_draw_picks_the_share_its_moments_and_the_fixable_ones() -> None:
    spread = draw(DriftSpec(share=0.1, span_hours=100, recover_share=0.5, seed=3), 200)
    assert len(spread) == 20 and len({d.gpu for d in spread}) == 20
    assert sum(d.recovers for d in spread) == 10
    assert all(0 <= d.at_s <= 100 * HOUR for d in spread)
    assert [d.at_s for d in spread] == sorted(d.at_s for d in spread)
    assert spread == draw(DriftSpec(share=0.1, span_hours=100, recover_share=0.5, seed=3), 200)  # seeded
    fixed = draw(DriftSpec(share=0.02, at_hours=(5.0, 7.0), seed=1), 200)
    assert sorted(d.at_s for d in fixed) == [5 * HOUR, 5 * HOUR, 7 * HOUR, 7 * HOUR]
    assert draw(DriftSpec(share=0.0), 200) == ()
    with pytest.raises(ValueError, match="share"):
        DriftSpec(share=1.5)


def test_the_truth_changes_at_the_drift_and_a_repair_undoes_only_a_fixable_one() -> None:
    base = fleet_of([1.0, 1.1, 0.9, 1.0])
    fleet = TrueFleet(base, (Slowdown(gpu=1, at_s=100.0, factor=1.3, recovers=True),
                             Slowdown(gpu=2, at_s=200.0, factor=1.5, recovers=False)))
    fleet.advance(99.0)
    assert list(fleet.pv("A")) == [1.0, 1.1, 0.9, 1.0] and fleet.next_change == 100.0
    fleet.advance(100.0)
    assert fleet.pv("A")[1] == pytest.approx(1.43) and fleet.pv("C")[1] == pytest.approx(1.43)
    assert fleet.pv("D")[1] == 1.1  # memory-bound: the drift is the compute classes'
    assert fleet.take_changed() == {1} and fleet.take_changed() == frozenset()
    fleet.advance(250.0)
    assert fleet.pv("A")[2] == pytest.approx(1.35)
    assert fleet.repair(1, 300.0) and fleet.pv("A")[1] == 1.1 and not fleet.slow(1)
    assert not fleet.repair(2, 300.0) and fleet.pv("A")[2] == pytest.approx(1.35)  # stays slow
    assert not fleet.repair(0, 300.0)  # never drifted
    assert base.perfvar["A"] == (1.0, 1.1, 0.9, 1.0)  # the snapshot is never touched


# -- the simulator -----------------------------------------------------------------------------
def one_job_run(drift: Drifting) -> tuple:  # type: ignore[type-arg]
    trace = Trace("t", (job("a", 0.0, 100.0),))
    res = simulate_events(trace, drift.fleet.base, get_policy("slurm-backfill"), EventOptions(), drift=drift)
    return res.outcomes[0], res


def test_a_running_job_runs_its_remaining_work_at_the_new_pace() -> None:
    base = fleet_of([1.0])
    fleet = TrueFleet(base, (Slowdown(gpu=0, at_s=50.0, factor=2.0, recovers=True),))
    o, res = one_job_run(Drifting(fleet, FixedBelief(base)))
    assert (o.start_time, o.finish_time) == (0.0, 150.0)  # 50 s of work, then the other 50 at half speed
    assert o.tax_gpu_s == pytest.approx(50.0) and o.variability_gpu_s_signed == pytest.approx(50.0)
    assert res.metrics.utilization == pytest.approx(1.0)  # the GPU time it held moved with its end


def test_a_repair_mid_job_brings_the_pace_back() -> None:
    base = fleet_of([1.0])
    fleet = TrueFleet(base, (Slowdown(gpu=0, at_s=20.0, factor=2.0, recovers=True),))
    o, _ = one_job_run(Drifting(fleet, OracleBelief(fleet, reprofile_delay_s=40.0)))
    # 20 s of work at 1.0, 20 s of work in 40 s at 2.0 (repaired at 60 s), the last 60 s at 1.0
    assert o.finish_time == pytest.approx(120.0) and o.tax_gpu_s == pytest.approx(20.0)


def decisions(cluster: Cluster, drift: Drifting | None, policy: str = "pal-guard") -> tuple[list[Cluster], object]:
    seen: list[Cluster] = []

    def hook(snap: Snapshot, queue: list[JobRequest], backfill: bool, d: Decision) -> None:
        seen.append(snap.cluster)

    trace = generate(120, seed=4, mean_interarrival_s=200.0, max_gpus=8)
    res = simulate_events(trace, cluster, get_policy(policy), EventOptions(), on_decision=hook, drift=drift)
    return seen, res


@pytest.mark.parametrize("policy", ["slurm-backfill", "pal-guard"])
def test_no_drift_gives_the_runs_of_a_fleet_that_never_drifts(policy: str) -> None:
    cluster = parametric_from_spec("wide", 4, 4, 1).fleet
    _, plain = decisions(cluster, None, policy)
    for arm in (lambda f: FixedBelief(cluster), OracleBelief):
        fleet = TrueFleet.of(cluster, DriftSpec(share=0.0))
        _, drifting = decisions(cluster, Drifting(fleet, arm(fleet)), policy)
        assert drifting.outcomes == plain.outcomes and drifting.metrics == plain.metrics  # type: ignore[attr-defined]


def test_the_drift_slows_jobs_but_never_moves_the_snapshot_belief() -> None:
    cluster = parametric_from_spec("wide", 4, 4, 1).fleet
    spec = DriftSpec(share=0.25, factor=1.5, at_hours=(0.5,), seed=2)
    seen, res = decisions(cluster, Drifting(TrueFleet.of(cluster, spec), FixedBelief(cluster)))
    assert seen and all(c is cluster for c in seen)
    _, plain = decisions(cluster, None)
    assert res.metrics.tax_gpu_s > plain.metrics.tax_gpu_s  # type: ignore[attr-defined]


def test_the_oracle_ranks_by_the_truth_from_the_moment_it_changes() -> None:
    cluster = parametric_from_spec("wide", 4, 4, 1).fleet
    spec = DriftSpec(share=0.25, factor=1.5, at_hours=(0.5,), seed=2, recover_share=0.0)
    fleet = TrueFleet.of(cluster, spec)
    seen, _ = decisions(cluster, Drifting(fleet, OracleBelief(fleet)))
    slow = [d.gpu for d in fleet.slowdowns]
    assert seen[0].perfvar == cluster.perfvar
    assert seen[-1].perfvar["A"][slow[0]] == pytest.approx(1.5 * cluster.perfvar["A"][slow[0]])
    assert seen[-1].perfvar["D"] == cluster.perfvar["D"]


def test_a_drifting_fleet_refuses_a_release_latency() -> None:
    base = fleet_of([1.0])
    with pytest.raises(ValueError, match="release latency"):
        simulate_events(Trace("t", (job("a", 0.0, 10.0),)), base, get_policy("slurm-backfill"),
                        EventOptions(release_latency_s=1.0), drift=Drifting(TrueFleet(base, ()), FixedBelief(base)))


# -- the passive belief ------------------------------------------------------------------------
PACE = [1.0, 1.04, 0.96, 1.0]  # the truth of 4 one-GPU nodes; GPU 3 turns 1.3x slow


def feed(belief: PassiveBelief, hours: range, slow_from_h: float = math.inf, fleet: TrueFleet | None = None) -> None:
    """Each of `hours`: two fingerprints, each run once on every GPU (run time = base x the GPU's
    pace, x 1.3 on GPU 3 from `slow_from_h`), the belief advanced at the end of the hour."""
    for h in hours:
        end = (h + 1) * HOUR - 1.0
        for g in range(4):
            for fp, base in (("fp1", 600.0), ("fp2", 900.0)):
                t = base * PACE[g] * (1.3 if g == 3 and h >= slow_from_h else 1.0)
                belief.observe(job(f"{fp}-{h}-{g}", 0.0, base, name=fp), (g,), end - t, end)
        belief.advance((h + 1) * HOUR, fleet or TrueFleet(belief.base, ()))


@pytest.mark.parametrize("use", ["paced", "disagree"])
def test_passive_factors_replace_the_snapshot_only_where_a_gpu_paced_enough_jobs(use: str) -> None:
    snapshot = fleet_of([1.0, 1.0, 1.0, 1.005], nodes=4)  # GPU 3 within the noise of its truth
    belief = PassiveBelief(snapshot, LearnSettings(use_min_paced=10, use=use))  # type: ignore[arg-type]
    feed(belief, range(4))  # 8 paced runs per GPU: not yet
    assert belief.cluster is snapshot
    feed(belief, range(4, 6))  # 12
    believed = belief.cluster.perfvar["A"]
    assert believed[:3] == pytest.approx(PACE[:3], abs=0.005)  # 1.04 and 0.96 disagree beyond the noise
    assert believed[3] == (pytest.approx(PACE[3], abs=0.005) if use == "paced" else 1.005)
    assert belief.cluster.perfvar["B"] == snapshot.perfvar["B"]  # no class-B job ran


def test_the_passive_belief_moves_only_through_the_jobs_it_was_told_of() -> None:
    snapshot = fleet_of([1.0, 1.0, 1.0, 1.0], nodes=4)
    slow = TrueFleet(snapshot, (Slowdown(gpu=3, at_s=0.0, factor=1.3, recovers=False),))
    slow.advance(0.0)
    quiet = PassiveBelief(snapshot)
    for h in range(1, 48):  # the truth drifted, no job ended: nothing to learn from
        assert not quiet.advance(h * HOUR, slow)
    assert quiet.cluster is snapshot and not quiet.flags
    a, b = PassiveBelief(snapshot), PassiveBelief(snapshot)
    feed(a, range(8), fleet=TrueFleet(snapshot, ()))
    feed(b, range(8), fleet=slow)  # the same runs, another truth
    assert a.cluster.perfvar == b.cluster.perfvar


@pytest.mark.parametrize("recovers", [True, False])
def test_a_flag_is_reprofiled_the_belief_measures_the_gpu_and_a_fixable_one_recovers(recovers: bool) -> None:
    snapshot = fleet_of(PACE, nodes=4)
    fleet = TrueFleet(snapshot, (Slowdown(gpu=3, at_s=20 * HOUR, factor=1.3, recovers=recovers),))
    belief = PassiveBelief(snapshot, LearnSettings(reprofile_delay_s=2 * HOUR, use_min_paced=10_000))
    fleet.advance(20 * HOUR)
    feed(belief, range(20), fleet=fleet)
    assert not belief.flags
    feed(belief, range(20, 23), slow_from_h=20, fleet=fleet)  # GPU 3's runs are 1.3x slow from hour 20
    assert [f.gpu for f in belief.flags] == [3]  # three slow jobs of its class suffice
    flagged_at = belief.flags[0].at
    assert belief.cluster.perfvar["A"][3] == PACE[3]  # not yet re-profiled
    assert belief.next_change() == flagged_at + 2 * HOUR  # its re-profile (and a learning pass)
    belief.advance(flagged_at + 2 * HOUR, fleet)
    assert belief.flags[0].reprofiled_at == flagged_at + 2 * HOUR
    measured = PACE[3] * (1.0 if recovers else 1.3)
    assert fleet.pv("A")[3] == pytest.approx(measured)
    assert belief.cluster.perfvar["A"][3] == pytest.approx(measured)
    assert belief.cluster.perfvar["D"][3] == PACE[3]  # D never drifted
