"""The replay's pure side: shapes, limits in Slurm's whole minutes, refusals, and the
prediction each arm is compared with (pal_eval.replay.plan / fleet / prediction.predict)."""

from __future__ import annotations

import math

import pytest

from pal_eval.replay.arms import ArmSettings
from pal_eval.replay.fleet import inventory, job_factors, name_fleet, node_name
from pal_eval.replay.harness import sbatch_argv
from pal_eval.replay.plan import first_jobs, job_shape, limit_minutes, plan_replay
from pal_eval.replay.prediction import predict
from pal_slurm.errors import InputError
from pal_slurm.placement.variability import GpuVariability, cluster_from_gpus
from pal_slurm.simulate.estimates import RuntimeEstimate, parse_runtime_estimate
from pal_slurm.simulate.traces import Trace, TraceJob


def job(i: int, gpus: int, submit: float, work: float, cls: str = "A", **kw: object) -> TraceJob:
    return TraceJob(job_id=str(i), num_gpus=gpus, submit_time=submit, work=work, work_unit="seconds", model="m",
                    job_class=cls, iter_time_s=1.0, line=i + 2, source="t.csv", **kw)  # type: ignore[arg-type]


def trace(*jobs: TraceJob) -> Trace:
    return Trace(name="t", jobs=tuple(jobs))


@pytest.mark.parametrize(("gpus", "shape"), [(1, (1, 1)), (3, (1, 3)), (4, (1, 4)), (6, (2, 3)), (8, (2, 4)),
                                            (12, (3, 4)), (5, (5, 1)), (24, (6, 4)), (7, (7, 1))])
def test_a_job_asks_for_one_node_when_it_fits_else_the_fewest_nodes_that_split_it_evenly(gpus, shape):
    assert job_shape(gpus, 4) == shape


@pytest.mark.parametrize(("trace_s", "k", "minutes"), [(1.0, 10, 1), (3600 * 6, 10, 1), (3600 * 6 + 1, 10, 2),
                                                       (3600.0, 60, 1), (7200.0, 60, 2), (90.0, 3600, 2)])
def test_limits_are_whole_real_minutes_at_least_one(trace_s, k, minutes):
    assert limit_minutes(trace_s, k) == minutes


def test_the_plan_compresses_time_and_gives_the_simulator_exactly_the_limits_slurm_gets():
    t = trace(job(0, 1, 0.0, 600.0), job(1, 8, 3600.0, 7200.0, "D"), job(2, 6, 7200.0, 30.0, "B"))
    plan = plan_replay(t, seconds_per_hour=10.0, estimate=parse_runtime_estimate("x2"), nodes=4, gpus_per_node=4)
    assert [j.submit_at_s for j in plan.jobs] == [0.0, 10.0, 20.0]
    assert [j.work_s for j in plan.jobs] == pytest.approx([600 / 360, 20.0, 30 / 360])
    assert [(j.nodes, j.gpus_per_node) for j in plan.jobs] == [(1, 1), (2, 4), (2, 3)]
    # x2 of 2 h = 4 h = 40 real s -> 1 minute = 6 trace hours; every limit is what Slurm keeps
    assert [j.limit_min for j in plan.jobs] == [1, 1, 1]
    assert [j.limit_s for j in plan.trace.jobs] == [6 * 3600.0] * 3
    assert [j.gpus_per_node for j in plan.trace.jobs] == [1, 4, 3]
    # the simulator with `limit` plans with those numbers
    est = RuntimeEstimate(kind="limit")
    assert [est.before_start(j) for j in plan.trace.jobs] == [6 * 3600.0] * 3
    assert plan.to_trace_s(plan.to_real_s(123.0)) == pytest.approx(123.0)


def test_a_job_wider_than_the_cluster_is_refused_naming_the_job_and_the_cluster():
    t = trace(job(0, 1, 0, 60), job(1, 24, 5, 60))
    with pytest.raises(InputError, match=r"t\.csv:3: t: job 1 needs 24 GPUs; the cluster has 4 nodes x 4 GPUs = 16"):
        plan_replay(t, seconds_per_hour=10, estimate=RuntimeEstimate(), nodes=4, gpus_per_node=4)


def test_a_job_that_fits_in_gpus_but_not_in_nodes_is_refused():
    # 7 GPUs split evenly only as 7 x 1: more nodes than the cluster has
    with pytest.raises(InputError, match="job 0 needs 7 nodes of 1 GPUs; the cluster has 4 nodes x 4 GPUs"):
        plan_replay(trace(job(0, 7, 0, 60)), seconds_per_hour=10, estimate=RuntimeEstimate(), nodes=4,
                    gpus_per_node=4)


@pytest.mark.parametrize("bad", [0.0, -1.0, math.inf, math.nan])
def test_a_compression_that_is_not_a_positive_number_is_refused(bad):
    with pytest.raises(InputError, match="seconds per trace hour must be a positive number"):
        plan_replay(trace(job(0, 1, 0, 60)), seconds_per_hour=bad, estimate=RuntimeEstimate(), nodes=1,
                    gpus_per_node=1)


def test_the_limit_model_needs_a_limit_for_every_job():
    with pytest.raises(InputError, match="needs a time limit for every job"):
        plan_replay(trace(job(0, 1, 0, 60)), seconds_per_hour=10, estimate=RuntimeEstimate(kind="limit"), nodes=1,
                    gpus_per_node=1)


def test_first_jobs_takes_the_earliest_submissions():
    t = trace(job(0, 1, 50, 1), job(1, 1, 10, 1), job(2, 1, 30, 1))
    assert [j.job_id for j in first_jobs(t, 2).jobs] == ["1", "2"]


def test_sbatch_is_an_argument_list_with_the_shape_the_limit_and_the_class():
    plan = plan_replay(trace(job(0, 6, 0, 3600, "B")), seconds_per_hour=60, estimate=RuntimeEstimate(), nodes=4,
                       gpus_per_node=4)
    from pathlib import Path

    argv = sbatch_argv(plan.jobs[0], script=Path("/w/s.py"), factors=Path("/w/f.json"), records=Path("/w/r"),
                       logs=Path("/w/l"), locality_penalty=1.7)
    assert argv[:9] == ["sbatch", "--parsable", "--job-name=replay-0", "--nodes=2", "--ntasks-per-node=1",
                        "--gres=gpu:3", "--time=1", "--output=/w/l/%j.out", "--comment=pal:class=B"]
    assert argv[9:] == ["/w/s.py", "/w/f.json", "/w/r", "0", "B", "60.000000", "1.7"]


def fleet(nodes: int = 4, per_node: int = 4) -> list[GpuVariability]:
    """Class A: the last GPU of every node is 2x slow; class D: all equal."""
    var = [GpuVariability(perfvar={"A": 2.0 if i % per_node == per_node - 1 else 1.0, "D": 1.0},
                          slowdown={"A": 2.0 if i % per_node == per_node - 1 else 1.0, "D": 1.0})
           for i in range(nodes * per_node)]
    return name_fleet(var, [node_name("pal-r", i, nodes) for i in range(nodes)], per_node)


def test_the_fleet_is_named_in_slurms_node_order_and_the_jobs_look_perfvar_up_by_slot():
    gpus = fleet()
    assert [g.node for g in gpus[:5]] == ["pal-r01"] * 4 + ["pal-r02"]
    assert [g.minor for g in gpus[:5]] == [0, 1, 2, 3, 0]
    assert gpus[3].uuid == "GPU-replay-pal-r01-3"
    f = job_factors(gpus)
    assert f["pal-r02"]["3"] == {"A": 2.0, "D": 1.0} and f["pal-r02"]["0"]["A"] == 1.0
    cluster = cluster_from_gpus(gpus)
    assert cluster.node_names == ("pal-r01", "pal-r02", "pal-r03", "pal-r04")
    assert cluster.pv("A")[3] == 2.0 and cluster.pv("A")[4] == 1.0
    inv = inventory(12, 4, "pal-r", 17201)
    assert [n["name"] for n in inv["nodes"]][:2] == ["pal-r01", "pal-r02"]
    assert inv["nodes"][11]["slurm"]["Port"] == 17212


def test_the_prediction_of_each_arm_uses_slurms_model_or_the_placers_policy_on_the_same_inputs():
    # four 1-GPU class-A jobs at once on one node whose last GPU is slow: Slurm's first fit
    # takes all four (one lands on the slow GPU); the placer's policy is told the same limits
    gpus = fleet(nodes=1)
    cluster = cluster_from_gpus(gpus)
    t = trace(*(job(i, 1, 0.0, 3600.0) for i in range(4)))
    plan = plan_replay(t, seconds_per_hour=3600.0, estimate=parse_runtime_estimate("x1"), nodes=1, gpus_per_node=4)
    slurm = predict(plan, cluster, "slurm", ArmSettings())
    assert slurm.policy == "slurm-reserving"
    assert sorted(o.finish_time for o in slurm.outcomes) == [3600.0, 3600.0, 3600.0, 7200.0]
    pal = predict(plan, cluster, "pal", ArmSettings(placer_policy="pal-match"))
    assert pal.policy == "pal-match"
    # pal-match either runs the fourth job on the slow GPU or waits for a fast one: never worse
    assert max(o.finish_time for o in pal.outcomes) <= 7200.0
    with pytest.raises(Exception, match="unknown arm"):
        predict(plan, cluster, "other", ArmSettings())


def test_the_real_cluster_is_checked_against_the_widest_job():
    from pal_eval.replay.plan import check_cluster

    plan = plan_replay(trace(job(0, 1, 0, 60), job(1, 8, 1, 60), job(2, 6, 2, 60)), seconds_per_hour=10,
                       estimate=RuntimeEstimate(), nodes=4, gpus_per_node=4)
    check_cluster(plan, {"a": 4, "b": 4, "c": 2})
    with pytest.raises(InputError, match=r"job 1 needs 2 nodes with 4 GPUs each; the cluster has 3 schedulable "
                                         r"nodes with 4, 2, 2 GPUs"):
        check_cluster(plan, {"a": 4, "b": 2, "c": 2})
    with pytest.raises(InputError, match="no schedulable GPU node"):
        check_cluster(plan, {})


def test_capped_runtimes_cut_only_the_long_jobs_and_keep_shapes_and_arrivals():
    from pal_eval.replay.plan import capped_runtimes

    t = trace(job(1, 8, 0.0, 3600.0), job(2, 16, 5.0, 40 * 3600.0), job(3, 1, 9.0, 8 * 3600.0))
    c = capped_runtimes(t, 8)
    assert c.name == "t-cap8h"
    assert [(j.job_id, j.num_gpus, j.submit_time) for j in c.jobs] == [(j.job_id, j.num_gpus, j.submit_time)
                                                                       for j in t.jobs]
    assert [j.nominal_runtime_s for j in c.jobs] == [3600.0, 8 * 3600.0, 8 * 3600.0]
    with pytest.raises(ValueError, match="runtime cap"):
        capped_runtimes(t, 0)


def test_start_misses_name_the_first_jobs_whose_real_start_left_the_prediction() -> None:
    """Job by job against the prediction, in trace hours (k = 10 real s per trace hour): only
    starts more than an hour off count, first by submission."""
    from pal_eval.replay.prediction import start_misses
    from pal_slurm.simulate.metrics import JobOutcome, run_metrics
    from pal_slurm.simulate.result import SimResult

    plan = plan_replay(trace(job(1, 1, 0, 100), job(2, 4, 3600, 100), job(3, 1, 7200, 100)), seconds_per_hour=10.0,
                       estimate=parse_runtime_estimate("x2"), nodes=2, gpus_per_node=4)
    outs = (JobOutcome("1", 1, 0, 0, 100), JobOutcome("2", 4, 3600, 3600, 3700), JobOutcome("3", 1, 7200, 7200, 7300))
    pred = SimResult(trace="t", policy="p", mode="event", order="fifo", outcomes=outs,
                     metrics=run_metrics(outs, busy_gpu_seconds=600, cluster_gpus=8), busy_timeline=(), cluster_gpus=8)
    # real seconds: job 1 on time, job 2 three trace hours late, job 3 half an hour late, a 4th never started
    run = {"jobs": [{"trace_id": "1", "class": "A", "gpus": 1, "submitted": 0.0, "start": 0.0},
                    {"trace_id": "2", "class": "A", "gpus": 4, "submitted": 10.0, "start": 40.0},
                    {"trace_id": "3", "class": "A", "gpus": 1, "submitted": 20.0, "start": 25.0},
                    {"trace_id": "4", "class": "A", "gpus": 1, "submitted": 30.0}]}
    got = start_misses(run, pred, plan)
    assert (got["count"], got["of"], got["beyond_h"]) == (1, 3, 1.0)
    assert got["first"] == [{"trace_id": "2", "class": "A", "gpus": 4, "submitted_h": 1.0, "real_start_h": 4.0,
                             "predicted_start_h": 1.0}]
    assert start_misses(None, pred, plan)["count"] == 0


def test_a_pal_arm_whose_placer_holds_no_job_is_predicted_as_slurm_itself():
    # class D's GPUs are all equal: pal-guard has nothing to choose for any class of this
    # trace, so the filter holds nothing and Slurm schedules every job; with a class A
    # that has a 2x GPU, the placer schedules them
    gpus = [GpuVariability(perfvar={"A": 1.0, "D": 1.0}, slowdown={"A": 1.0, "D": 1.0}) for _ in range(8)]
    quiet = cluster_from_gpus(name_fleet(gpus, [node_name("pal-r", i, 2) for i in range(2)], 4))
    t = trace(*(job(i, 2, 0.0, 3600.0, cls="D") for i in range(6)))
    plan = plan_replay(t, seconds_per_hour=3600.0, estimate=parse_runtime_estimate("x1"), nodes=2, gpus_per_node=4)
    assert predict(plan, quiet, "pal", ArmSettings(placer_policy="pal-guard")).policy == "slurm-reserving"
    varied = cluster_from_gpus(fleet(nodes=2))
    assert predict(plan, varied, "pal", ArmSettings(placer_policy="pal-guard")).policy == "pal-guard"


def _replay_args(**kw: object) -> "argparse.Namespace":
    import argparse

    base = {"trace": None, "llm": [], "llm_jobs": 300, "nodes": 8, "gpus_per_node": 8}
    return argparse.Namespace(**{**base, **kw})


def test_the_llm_mix_is_replayed_whole_nodes_on_the_replay_clusters_shape(tmp_path):
    """bench/replay.py --llm SEED: the LLM-era mix drawn for --nodes x --gpus-per-node, one trace per
    seed; every multi-node job of it asks Slurm for whole nodes of that shape."""
    from pal_eval.replay.sitting import input_traces

    traces = list(input_traces(_replay_args(llm=[1, 2], llm_jobs=200), tmp_path))
    assert [len(t.jobs) for t in traces] == [200, 200]
    assert traces[0].name != traces[1].name and "8x8" in traces[0].name
    plan = plan_replay(traces[0], seconds_per_hour=30, estimate=parse_runtime_estimate("uniform:1:5:42"),
                       nodes=8, gpus_per_node=8)
    wide = [r for r in plan.jobs if r.job.num_gpus > 8]
    assert wide and all(r.gpus_per_node == 8 and r.nodes * 8 == r.job.num_gpus for r in wide)


@pytest.mark.parametrize(("kw", "match"), [({"llm": [1], "trace": ["x.csv"]}, "not both"),
                                           ({"llm": [1], "llm_jobs": 0}, "--llm-jobs")])
def test_llm_replay_inputs_that_make_no_sense_are_refused(tmp_path, kw, match):
    from pal_eval.replay.sitting import input_traces

    with pytest.raises(ValueError, match=match):
        list(input_traces(_replay_args(**kw), tmp_path))


@pytest.mark.parametrize(("bf", "k", "extra"), [(None, 30, "bf_resolution=1"), (None, 300, "bf_resolution=5"),
                                               (60, 30, "bf_resolution=60"), (3600, 30, "bf_resolution=3600")])
def test_the_replay_cluster_plans_on_slurms_grid_compressed_unless_told(bf, k, extra):
    """Without --bf-resolution the replay cluster's SchedulerParameters get Slurm's 60 s compressed like
    every other time (60 x k / 3600, at least 1); with it, what was asked for."""
    from pal_eval.replay.sitting import _sched_extra, checked_arms

    args = _replay_args(bf_resolution=bf, seconds_per_hour=k, fleet="wide", arms="slurm", history=None, reps=1,
                        cap_hours=None)
    assert _sched_extra(args) == extra
    assert [a.value for a in checked_arms(args, ["slurm"], 0.0)] == ["slurm"]


@pytest.mark.parametrize("bf", [0, -5, 3601])
def test_a_bf_resolution_outside_slurms_range_is_refused_before_a_cluster_starts(bf):
    from pal_eval.replay.sitting import checked_arms

    args = _replay_args(bf_resolution=bf, fleet="wide", arms="slurm", history=None, reps=1, cap_hours=None)
    with pytest.raises(ValueError, match="--bf-resolution must be 1-3600"):
        checked_arms(args, ["slurm"], 0.0)
