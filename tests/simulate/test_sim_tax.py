"""The variability tax on hand-built clusters and traces whose schedules are worked out by hand:
what each job pays in both simulators, the best-free reassignment reference, the unavoidable
floor, the comparison against a baseline, and the CLI's output of them (JSON without NaN)."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from pal_slurm.cli.main import cli
from pal_slurm.placement.model import Cluster
from pal_slurm.placement.policies import get_policy
from pal_slurm.simulate.event import EventOptions, _shaper, simulate_events
from pal_slurm.simulate.metrics import JobOutcome, run_metrics
from pal_slurm.simulate.result import SimResult
from pal_slurm.simulate.round import RoundOptions, simulate_rounds
from pal_slurm.simulate.runner import FixedVariability, SimulationSpec, run_simulations
from pal_slurm.placement.policies import policy_names
from pal_slurm.simulate.fleets import parametric_from_spec
from pal_slurm.simulate.synthetic import generate
from pal_slurm.simulate.tax import best_free_tax, compare_tax, pooled_comparison, unavoidable_tax
from pal_slurm.simulate.traces import Trace, TraceJob


def job(jid: str, gpus: int, submit: float, nominal: float) -> TraceJob:
    return TraceJob(job_id=jid, num_gpus=gpus, submit_time=submit, work=nominal, work_unit="iterations",
                    model="m", job_class="A", iter_time_s=1.0, line=1, source="test")


def cluster(pv: list[float], nodes: int = 2, per_node: int = 2) -> Cluster:
    table = {c: pv for c in "ABCD"}
    return Cluster.uniform(nodes, per_node, slowdown=table, perfvar=table)


SLOW_LAST = [1.0, 1.0, 1.0, 1.5]  # 2 nodes x 2 GPUs, GPU 3 (node 1) slow


def backfill_run() -> SimResult:
    """slurm-backfill's first fit, by hand: a (1 GPU) takes GPU 0; b (2 GPUs) does not fit on
    node 0's one free GPU, so it takes node 1 (GPUs 2, 3): pace 1.5, 150 s; c (1 GPU) takes
    GPU 1 on node 0 (pace 1.0)."""
    trace = Trace("t", (job("a", 1, 0, 300), job("b", 2, 10, 100), job("c", 1, 20, 100)))
    return simulate_events(trace, cluster(SLOW_LAST), get_policy("slurm-backfill"), EventOptions())


def test_event_mode_charges_the_slowest_gpu_of_each_job() -> None:
    res = backfill_run()
    by = {o.job_id: o for o in res.outcomes}
    assert {j: o.gpu_ids for j, o in by.items()} == {"a": (0,), "b": (2, 3), "c": (1,)}
    assert (by["b"].start_time, by["b"].finish_time) == (10, 160)
    assert by["b"].tax_gpu_s == pytest.approx(2 * 100 * 0.5)
    assert by["a"].tax_gpu_s == 0 and by["c"].tax_gpu_s == 0  # median GPUs pay nothing
    assert (by["b"].nominal_s, by["b"].job_class) == (100, "A")
    assert res.metrics.tax_gpu_s == pytest.approx(100)
    assert res.metrics.variability_gpu_s_signed == pytest.approx(100)
    assert res.metrics.tax_share == pytest.approx(100 / (300 + 2 * 150 + 100))
    # the existing figures are untouched: a 300 s, b 150 s, c 100 s, nobody waited
    assert res.metrics.avg_queue_delay_s == 0
    assert res.metrics.avg_jct_s == pytest.approx((300 + 150 + 100) / 3)


def test_a_job_on_faster_than_median_gpus_pays_no_tax_but_is_kept_signed() -> None:
    trace = Trace("t", (job("x", 1, 0, 100),))
    res = simulate_events(trace, cluster([0.8, 1.0, 1.0, 1.5]), get_policy("slurm-backfill"), EventOptions())
    assert res.outcomes[0].gpu_ids == (0,) and res.outcomes[0].finish_time == pytest.approx(80)
    assert res.metrics.tax_gpu_s == 0 and res.metrics.tax_share == 0
    assert res.metrics.variability_gpu_s_signed == pytest.approx(-20)


def test_locality_is_not_part_of_the_tax() -> None:
    # 4 GPUs over 2 nodes: runs 100 x 1.5 x 1.7, but only the pace counts: 4 x 100 x 0.5
    res = simulate_events(Trace("t", (job("x", 4, 0, 100),)), cluster(SLOW_LAST), get_policy("slurm-backfill"),
                          EventOptions())
    assert res.outcomes[0].finish_time == pytest.approx(255)
    assert res.metrics.tax_gpu_s == pytest.approx(200)


def test_the_best_free_reference_gives_each_job_the_best_free_gpus() -> None:
    # a at 0 gets GPU 0; b at 10 the best of 1, 2, 3: GPUs 1 and 2 (no tax); c at 20 only GPU 3 is
    # left: 1 x 100 x 0.5. The actual schedule paid 100.
    res = backfill_run()
    assert best_free_tax(res.outcomes, cluster(SLOW_LAST)) == pytest.approx(50)
    assert res.tax_best_free_gpu_s == pytest.approx(50)
    assert res.tax_best_free_gpu_s <= res.metrics.tax_gpu_s


def test_the_best_free_reference_frees_gpus_at_a_jobs_finish() -> None:
    # one node of two GPUs, one slow: each job in turn gets the fast one back
    outs = tuple(JobOutcome(f"j{i}", 1, 0, 100 * i, 100 * (i + 1), job_class="A", nominal_s=100) for i in range(3))
    assert best_free_tax(outs, cluster([1.0, 2.0], nodes=1)) == 0
    overlapping = outs + (JobOutcome("k", 1, 0, 50, 150, job_class="A", nominal_s=100),)
    assert best_free_tax(overlapping, cluster([1.0, 2.0], nodes=1)) == pytest.approx(100)


def test_the_greedy_bound_is_not_always_below_the_actual_tax() -> None:
    """Why its docstring calls it an approximation: the actual schedule put the short job on the
    slow GPU; the greedy gives the fast one to whoever starts first."""
    slow = cluster([1.0, 2.0], nodes=1)
    early = JobOutcome("early", 1, 0, 0, 100, gpu_ids=(1,), job_class="A", nominal_s=10, tax_gpu_s=10)
    late = JobOutcome("late", 1, 1, 1, 50, gpu_ids=(0,), job_class="A", nominal_s=100)
    actual = run_metrics((early, late), busy_gpu_seconds=150, cluster_gpus=2).tax_gpu_s
    assert actual == 10
    assert best_free_tax((early, late), slow) == pytest.approx(100)


def test_outcomes_holding_more_gpus_than_the_cluster_are_refused() -> None:
    outs = (JobOutcome("a", 2, 0, 0, 10, job_class="A", nominal_s=10), JobOutcome("b", 1, 0, 5, 10))
    with pytest.raises(ValueError, match="job b starts at 5"):
        best_free_tax(outs, cluster([1.0, 1.0], nodes=1))


FLOOR_FLEET = [1.0, 1.2, 1.1, 1.5]  # 2 nodes x 2 GPUs: node 0 = (1.0, 1.2), node 1 = (1.1, 1.5)


@pytest.mark.parametrize(("gpus", "per_node", "expected"), [
    (1, 1, 0.0),                # the fastest GPU is at 1.0: nothing unavoidable
    (2, 2, 2 * 100 * 0.2),      # one node: node 0's second GPU (1.2) beats node 1's (1.5)
    (4, 2, 4 * 100 * 0.5),      # both nodes: node 1's 1.5 cannot be avoided
    (2, None, 2 * 100 * 0.1),   # no shape: the two fastest GPUs anywhere, 1.0 and 1.1
    (3, 2, 3 * 100 * 0.2),      # 3 GPUs do not split 2 per node: taken as shapeless (1.0, 1.1, 1.2)
])
def test_the_unavoidable_floor_is_the_jobs_best_pace_on_the_empty_cluster(gpus: int, per_node: int | None,
                                                                         expected: float) -> None:
    o = JobOutcome("x", gpus, 0, 0, 500, job_class="A", nominal_s=100)
    assert unavoidable_tax((o,), cluster(FLOOR_FLEET), {"x": per_node}) == pytest.approx(expected)


def test_a_job_without_a_known_shape_gets_the_weakest_floor() -> None:
    o = JobOutcome("x", 2, 0, 0, 500, job_class="A", nominal_s=100)
    assert unavoidable_tax((o,), cluster(FLOOR_FLEET), {}) == pytest.approx(2 * 100 * 0.1)
    # and a job larger than the cluster bounds nothing rather than everything
    huge = JobOutcome("h", 8, 0, 0, 500, job_class="A", nominal_s=100)
    assert unavoidable_tax((huge,), cluster(FLOOR_FLEET), {"h": 2}) == 0.0


def test_the_floor_is_below_every_jobs_tax_under_every_policy_and_the_same_for_all() -> None:
    """The floor is a bound, not an estimate: on a wide fleet and a loaded synthetic trace, no
    job of any registered policy pays less than its own floor, and the run's floor depends
    only on the jobs and the fleet (every policy of a run shares it)."""
    fleet = parametric_from_spec("wide", 4, 4, 3).cluster(random.Random(0))
    trace = generate(80, seed=5, mean_interarrival_s=120.0, max_gpus=16)
    shaper = _shaper(fleet)
    floors = set()
    for name in policy_names():
        res = simulate_events(trace, fleet, get_policy(name), EventOptions())
        for o in res.outcomes:
            alone = unavoidable_tax((o,), fleet, {o.job_id: shaper(o.gpus)})
            assert alone <= o.tax_gpu_s + 1e-6, (name, o.job_id, o.gpu_ids)
        assert res.tax_unavoidable_gpu_s is not None and res.tax_unavoidable_gpu_s <= res.metrics.tax_gpu_s + 1e-6
        floors.add(round(res.tax_unavoidable_gpu_s, 6))
    assert len(floors) == 1 and floors.pop() > 0  # a wide fleet has a floor, and one for all


def test_round_mode_charges_the_work_done_not_the_rounded_up_time() -> None:
    every_slow = cluster([1.5] * 4)
    opts = RoundOptions(extra_jobs=False)
    # 100 nominal s at pace 1.5: done within the first 360 s round, which would hold 240 s of work
    one = simulate_rounds(Trace("t", (job("x", 1, 0, 100),)), every_slow, get_policy("slurm-backfill"), opts)
    assert one.outcomes[0].finish_time == 360
    assert one.metrics.tax_gpu_s == pytest.approx(50)
    assert one.metrics.tax_share == pytest.approx(50 / 360)
    assert one.tax_best_free_gpu_s is None and one.tax_unavoidable_gpu_s is None
    # 1000 nominal s over 5 rounds (240 + 240 + 240 + 240 + 40): 2 GPUs x 1000 x 0.5
    many = simulate_rounds(Trace("t", (job("y", 2, 0, 1000),)), every_slow, get_policy("slurm-backfill"), opts)
    assert many.outcomes[0].finish_time == 5 * 360
    assert many.metrics.tax_gpu_s == pytest.approx(1000)


def result(trace: str, policy: str, waits: list[float], tax: float, floor: float | None = None) -> SimResult:
    outs = tuple(JobOutcome(f"j{i}", 1, 0, w, w + 10) for i, w in enumerate(waits))
    metrics = run_metrics(outs, busy_gpu_seconds=10 * len(outs), cluster_gpus=1)
    metrics = replace(metrics, tax_gpu_s=tax)
    return SimResult(trace=trace, policy=policy, mode="event", order="fifo", outcomes=outs, metrics=metrics,
                     busy_timeline=(), cluster_gpus=1, tax_unavoidable_gpu_s=floor)


def test_tax_removed_and_added_wait_against_the_baseline() -> None:
    cmp = compare_tax(result("t", "p", [10, 30], tax=25), result("t", "base", [0, 10], tax=100))
    assert cmp.tax_removed == pytest.approx(0.75)
    assert cmp.added_wait_s == pytest.approx(20 - 5)
    assert cmp.added_wait_share == pytest.approx(15 / 5)
    # a policy paying more than the baseline removed a negative share
    assert compare_tax(result("t", "p", [0], 150), result("t", "b", [0], 100)).tax_removed == pytest.approx(-0.5)


def test_the_share_of_the_avoidable_tax_is_taken_above_the_baselines_floor() -> None:
    # the baseline paid 100, of which 40 no schedule can avoid: removing 45 is 75 % of the 60 avoidable
    cmp = compare_tax(result("t", "p", [0], tax=55, floor=40), result("t", "b", [0], tax=100, floor=40))
    assert cmp.tax_removed == pytest.approx(0.45)
    assert cmp.avoidable_tax_removed == pytest.approx(0.75)
    # pooled: floors summed like the taxes
    pairs = [(result("t", "p", [0], 10, 10), result("t", "b", [0], 50, 10)),
             (result("u", "p", [0], 30, 20), result("u", "b", [0], 50, 20))]
    assert pooled_comparison(pairs).avoidable_tax_removed == pytest.approx((100 - 40) / (100 - 30))
    # no floor (round mode) or nothing above it: no share, not NaN
    assert compare_tax(result("t", "p", [0], 5), result("t", "b", [0], 10)).avoidable_tax_removed is None
    assert compare_tax(result("t", "p", [0], 5, 10), result("t", "b", [0], 10, 10)).avoidable_tax_removed is None


def test_a_baseline_without_tax_or_wait_gives_no_nan() -> None:
    cmp = compare_tax(result("t", "p", [10], tax=5), result("t", "base", [0], tax=0))
    assert cmp.tax_removed == 0.0  # nothing to remove
    assert cmp.added_wait_s == 10 and cmp.added_wait_share is None
    with pytest.raises(ValueError, match="different traces"):
        compare_tax(result("t", "p", [0], 1), result("u", "base", [0], 1))


def test_pooled_over_traces_sums_taxes_and_averages_waits_over_all_jobs() -> None:
    pairs = [(result("t", "p", [10], 0), result("t", "b", [0], 90)),
             (result("u", "p", [0, 0, 20], 30), result("u", "b", [0, 0, 0], 10))]
    cmp = pooled_comparison(pairs)
    assert cmp.tax_removed == pytest.approx(1 - 30 / 100)
    assert cmp.added_wait_s == pytest.approx(30 / 4) and cmp.added_wait_share is None


def test_a_zero_tax_run_on_a_uniform_fleet_serialises_without_nan() -> None:
    trace = Trace("t", (job("a", 2, 0, 100), job("b", 4, 10, 50), job("c", 1, 20, 10)))
    spec = SimulationSpec(traces=(trace,), policies=("pal",), variability=FixedVariability(Cluster.uniform(2, 2)),
                          mode="event")
    report = run_simulations(spec)
    text = json.dumps(report.as_dict(), allow_nan=False)  # raises on a NaN
    data = json.loads(text)
    assert {r["tax_gpu_s"] for r in data["runs"]} == {0.0}
    assert {r["tax_best_free_gpu_s"] for r in data["runs"]} == {0.0}
    assert {r["tax_unavoidable_gpu_s"] for r in data["runs"]} == {0.0}
    assert data["summary"]["pal"]["tax_removed"] == 0.0
    assert data["summary"]["pal"]["avoidable_tax_removed"] is None
    base = data["summary"]["slurm-backfill"]
    assert base["added_wait_s"] == 0.0 and base["added_wait_share"] == pytest.approx(0.0)


def _cli_inputs(tmp_path: Path) -> tuple[Path, Path]:
    trace = tmp_path / "trace.csv"
    trace.write_text("job_id,num_gpus,submit_time,duration,model\n"
                     + "".join(f"{i},{1 + i % 4},{i * 30},{2000 + 10 * i},resnet50\n" for i in range(12)))
    src = Path(__file__).parents[1] / "data" / "traces" / "variability"
    prof = tmp_path / "prof"
    prof.mkdir()
    for name in ("resnet", "bert", "pagerank"):
        (prof / f"{name}-longhorn-agg.csv").write_text((src / f"{name}-longhorn-agg.csv").read_text())
    return trace, prof


def _no_nan(token: str) -> float:
    raise AssertionError(f"{token} in the JSON output")


def test_cli_reports_the_tax_in_table_json_and_csv(tmp_path: Path) -> None:
    trace, prof = _cli_inputs(tmp_path)
    base = ["simulate", "--trace", str(trace), "--variability", str(prof), "--cluster", "2x4", "--mode", "event",
            "--policy", "pm-first"]
    runner = CliRunner()
    res = runner.invoke(cli, [*base, "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout, parse_constant=_no_nan)
    runs = {r["policy"]: r for r in data["runs"]}
    for r in runs.values():
        assert r["tax_gpu_s"] >= 0 and 0 <= r["tax_share"] < 1 and r["tax_best_free_gpu_s"] is not None
        assert 0 <= r["tax_unavoidable_gpu_s"] <= r["tax_gpu_s"] + 1e-6
        assert r["variability_gpu_s_signed"] <= r["tax_gpu_s"]
    summary = data["summary"]["pm-first"]
    tax_p, tax_b = runs["pm-first"]["tax_gpu_s"], runs["slurm-backfill"]["tax_gpu_s"]
    assert summary["tax_removed"] == pytest.approx(1 - tax_p / tax_b if tax_b else 0.0)
    assert summary["added_wait_s"] == pytest.approx(runs["pm-first"]["avg_queue_delay_s"]
                                                    - runs["slurm-backfill"]["avg_queue_delay_s"])
    table = runner.invoke(cli, base)
    assert table.exit_code == 0, table.output
    lines = table.stdout.splitlines()
    assert lines[0].startswith("cluster simulated: ")  # what was simulated, then the title, then the header
    header = lines[3]  # the second of the header's two lines
    assert header.rstrip().endswith("tax")
    assert f"{runs['pm-first']['tax_share'] * 100:.1f} %" in table.stdout
    assert "tax" in table.stdout and "removed" in table.stdout and "added" in table.stdout
    csv = runner.invoke(cli, [*base, "--format", "csv"])
    assert csv.stdout.splitlines()[0].endswith(",skipped,tax_gpu_s,variability_gpu_s_signed,tax_share,"
                                               "tax_best_free_gpu_s,tax_unavoidable_gpu_s")
