"""Both simulators on hand-made traces with answers worked out by hand, the runner's summary,
the CLI's errors, and (with the PAL artifact's data) the fidelity to the artifact's results."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import ARTIFACT_CONFIG, ARTIFACT_DIR
from pal_slurm.cli.main import cli
from pal_slurm.placement.model import Cluster
from pal_slurm.placement.policies import get_policy, policy_names
from pal_slurm.simulate.event import EventOptions, simulate_events
from pal_slurm.simulate.metrics import geomean_ratios
from pal_slurm.simulate.round import RoundOptions, simulate_rounds
from pal_slurm.simulate.traces import Trace, TraceJob


def job(jid: str, gpus: int, submit: float, iters: float, cls: str = "A", iter_time: float = 1.0) -> TraceJob:
    return TraceJob(job_id=jid, num_gpus=gpus, submit_time=submit, work=iters, work_unit="iterations",
                    model="m", job_class=cls, iter_time_s=iter_time, line=1, source="test")


def two_node_cluster(slow: float = 1.5) -> Cluster:
    """2 nodes x 2 GPUs; GPU 3 is slow (PerfVar and slowdown `slow`) for every class."""
    pv = [1.0, 1.0, 1.0, slow]
    table = {c: pv for c in "ABCD"}
    return Cluster.uniform(2, 2, slowdown=table, perfvar=table)


def test_event_mode_by_hand() -> None:
    # a: 2 GPUs for 100 s at t=0 on one node; b: 2 GPUs at t=10 -> node 1 with the slow GPU: 150 s
    trace = Trace("t", (job("a", 2, 0, 100), job("b", 2, 10, 100)))
    res = simulate_events(trace, two_node_cluster(), get_policy("packed-sticky"), EventOptions())
    by = {o.job_id: o for o in res.outcomes}
    assert (by["a"].start_time, by["a"].finish_time) == (0, 100)
    assert (by["b"].start_time, by["b"].finish_time) == (10, 160)
    assert res.metrics.avg_jct_s == pytest.approx((100 + 150) / 2)
    assert res.metrics.makespan_s == 160
    assert res.metrics.utilization == pytest.approx((2 * 100 + 2 * 150) / (4 * 160))


def test_event_mode_queues_and_never_preempts() -> None:
    trace = Trace("t", (job("big", 4, 0, 100), job("small", 1, 1, 10), job("next", 4, 2, 10)))
    res = simulate_events(trace, two_node_cluster(slow=1.0), get_policy("pal"), EventOptions())
    by = {o.job_id: o for o in res.outcomes}
    assert by["big"].finish_time == pytest.approx(170)  # 4 GPUs on 2 nodes: 100 s x lambda 1.7
    assert by["small"].start_time == pytest.approx(170) and by["next"].start_time == pytest.approx(180)


def test_event_mode_models_a_real_schedulers_latencies() -> None:
    """visible_after (the placer's hold), start latency (dispatch; GPUs held meanwhile) and
    release latency (epilog; GPUs still held after the end), as a replay measures them."""
    trace = Trace("t", (job("big", 4, 0, 100), job("small", 1, 1, 10), job("next", 4, 2, 10)))
    opts = EventOptions(visible_after_s=3.0, start_latency_s=2.0, release_latency_s=5.0)
    res = simulate_events(trace, two_node_cluster(slow=1.0), get_policy("pal"), opts)
    by = {o.job_id: o for o in res.outcomes}
    # big: seen at 3, starts at 5, runs 170 s, ends 175, GPUs free at 180
    assert (by["big"].submit_time, by["big"].start_time, by["big"].finish_time) == (0, 5, 175)
    # small: seen at 4, placed when the GPUs free at 180, starts 182, ends 192; next the same way
    assert (by["small"].start_time, by["small"].finish_time) == (182, 192)
    assert by["next"].start_time == pytest.approx(192 + 5 + 2)
    assert res.metrics.avg_jct_s == pytest.approx((175 + (192 - 1) + (by["next"].finish_time - 2)) / 3)
    ideal = simulate_events(trace, two_node_cluster(slow=1.0), get_policy("pal"), EventOptions())
    assert res.metrics.avg_jct_s > ideal.metrics.avg_jct_s


def test_event_mode_a_job_may_wait_for_the_gpus_of_one_completing() -> None:
    """After its end a job holds its GPUs for the release latency (COMPLETING), and is expected
    back at that moment, as the placer's `expected_end` sees a COMPLETING job: a long job seen
    meanwhile waits for the fast GPU instead of starting on the slow one."""
    table = {c: [1.0, 2.0] for c in "ABCD"}
    cluster = Cluster.uniform(1, 2, slowdown=table, perfvar=table)
    trace = Trace("t", (job("x", 1, 0, 100), job("y", 1, 102, 1000)))
    seen: list[tuple[float, float]] = []
    for name in ("pal-backfill", "pal-guard"):
        res = simulate_events(trace, cluster, get_policy(name), EventOptions(release_latency_s=5.0),
                              on_decision=lambda snap, _q, _bf, _d: seen.append((snap.now, snap.expected_end.get("x"))))
        by = {o.job_id: o for o in res.outcomes}
        assert by["x"].gpu_ids == (0,) and by["x"].finish_time == 100
        assert (by["y"].gpu_ids, by["y"].start_time) == ((0,), 105), name  # not GPU 1 at 102
        assert (102, 105) in seen
    ideal = simulate_events(trace, cluster, get_policy("pal-backfill"), EventOptions())
    assert {o.job_id: o.gpu_ids for o in ideal.outcomes} == {"x": (0,), "y": (0,)}


def test_event_mode_unheld_classes_are_seen_at_submit_and_keep_their_rank() -> None:
    """A class the filter does not hold pays no hold (visible_after_s), and a job seen
    earlier for that reason still queues behind older jobs, as Slurm ranks by age."""
    trace = Trace("t", (job("big", 4, 0, 100, cls="D"), job("held", 4, 1, 10, cls="A"),
                        job("free", 4, 2, 10, cls="D")))
    opts = EventOptions(visible_after_s=3.0, unheld_classes=frozenset({"D"}))
    res = simulate_events(trace, two_node_cluster(slow=1.0), get_policy("pal"), opts)
    by = {o.job_id: o for o in res.outcomes}
    assert by["big"].start_time == 0.0 and by["big"].finish_time == pytest.approx(170)  # not held
    # both wait for big's GPUs; "free" was seen first (at 2, "held" at 4) but "held" is older
    assert by["held"].start_time == pytest.approx(170)
    assert by["free"].start_time == pytest.approx(by["held"].finish_time)
    lone = simulate_events(Trace("t", (job("free", 2, 2, 10, cls="D"),)), two_node_cluster(slow=1.0),
                           get_policy("pal"), opts)
    assert lone.outcomes[0].start_time == 2.0  # no hold at all
    held = simulate_events(Trace("t", (job("held", 2, 1, 10, cls="A"),)), two_node_cluster(slow=1.0),
                           get_policy("pal"), opts)
    assert held.outcomes[0].start_time == 4.0


def test_event_mode_locality_penalty_applies_across_nodes() -> None:
    trace = Trace("t", (job("x", 4, 0, 100),))
    res = simulate_events(trace, two_node_cluster(slow=1.0), get_policy("packed-sticky"),
                          EventOptions(locality_penalty=2.5))
    assert res.outcomes[0].finish_time == pytest.approx(250)


def test_round_mode_by_hand() -> None:
    # 360 s rounds; a: 1 GPU, 720 iterations of 1 s, arrives at 0 -> placed at 0, done at 720.
    # b arrives at 10 -> joins at 360 -> 360 iterations -> done at 720; JCT 710.
    trace = Trace("t", (job("a", 1, 0, 720), job("b", 1, 10, 360)))
    res = simulate_rounds(trace, two_node_cluster(), get_policy("packed-sticky"), RoundOptions(extra_jobs=False))
    by = {o.job_id: o for o in res.outcomes}
    assert by["a"].finish_time == 720 and by["a"].jct == 720
    assert by["b"].start_time == 360 and by["b"].finish_time == 720 and by["b"].jct == 710


def test_round_mode_slow_gpu_and_rounding_up() -> None:
    # 1 job on 4 GPUs over both nodes: pm = 1.5 (GPU 3), loc = 1.7 -> 1 / 2.55 it/s; 360 iterations
    # need 918 s -> finishes at the third boundary, 1080 s.
    trace = Trace("t", (job("a", 4, 0, 360),))
    res = simulate_rounds(trace, two_node_cluster(), get_policy("packed-nonsticky"), RoundOptions(extra_jobs=False))
    assert res.outcomes[0].finish_time == 1080


def test_round_mode_extra_jobs_take_gpus_but_are_not_counted() -> None:
    trace = Trace("t", (job("a", 1, 0, 3600),))
    with_extra = simulate_rounds(trace, two_node_cluster(), get_policy("pal"), RoundOptions())
    assert [o.job_id for o in with_extra.outcomes] == ["a"]
    assert with_extra.metrics.jobs == 1


@pytest.mark.parametrize("name", sorted(policy_names()))
def test_every_policy_finishes_every_job_in_both_modes(name: str) -> None:
    rng = random.Random(7)
    jobs = tuple(job(f"j{i}", rng.choice([1, 1, 2, 3, 4]), rng.uniform(0, 3000), rng.uniform(100, 2000),
                     cls=rng.choice("ABCD")) for i in range(40))
    trace = Trace("mix", jobs)
    cluster = two_node_cluster()
    for res in (simulate_events(trace, cluster, get_policy(name), EventOptions()),
                simulate_rounds(trace, cluster, get_policy(name), RoundOptions(), rng=random.Random(1))):
        assert res.metrics.jobs == 40
        assert all(o.finish_time > o.start_time >= o.submit_time for o in res.outcomes)
        assert 0 < res.metrics.utilization <= 1
        assert max(b for _, b in res.busy_timeline) <= cluster.size  # capacity never exceeded


def test_geomean_ratios() -> None:
    table = {"t1": {"base": 100.0, "x": 50.0}, "t2": {"base": 100.0, "x": 200.0}, "t3": {"base": 10.0, "x": 5.0}}
    assert geomean_ratios(table, "base")["x"] == pytest.approx(math.exp((math.log(0.5) * 2 + math.log(2)) / 3))


def _philly(tmp_path: Path, rows: list[str]) -> Path:
    p = tmp_path / "trace.csv"
    p.write_text("job_id,num_gpus,submit_time,duration,model\n" + "\n".join(rows) + "\n")
    return p


def _profiles(tmp_path: Path) -> Path:
    src = Path(__file__).parents[1] / "data" / "traces" / "variability"
    d = tmp_path / "prof"
    d.mkdir()
    for name in ("resnet", "bert", "pagerank"):
        (d / f"{name}-longhorn-agg.csv").write_text((src / f"{name}-longhorn-agg.csv").read_text())
    return d


def test_a_cluster_too_large_to_simulate_is_refused_at_once(tmp_path: Path) -> None:
    trace = _philly(tmp_path, ["0,1,0,100,resnet50"])
    res = CliRunner().invoke(cli, ["simulate", "--trace", str(trace), "--variability", str(_profiles(tmp_path)),
                                   "--cluster", "100000x8"])
    assert res.exit_code == 2
    assert "'100000x8': 800,000 GPUs; the simulator takes at most 16,384" in res.output


def test_cli_json_and_bad_input(tmp_path: Path) -> None:
    runner = CliRunner()
    trace = _philly(tmp_path, ["0,1,0,100,resnet50", "1,2,5,50,BERT", "2,4,20,10,vgg19"])
    prof = _profiles(tmp_path)
    result = runner.invoke(cli, ["simulate", "--trace", str(trace), "--variability", str(prof), "--cluster", "2x4",
                                 "--policy", "pal,pm-first", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    # the baseline is Slurm as shipped unless told otherwise
    assert {r["policy"] for r in data["runs"]} == {"pal", "pm-first", "slurm-backfill"}
    assert all({"trace", "policy", "jobs", "avg_jct_s", "makespan_s", "utilization"} <= r.keys() for r in data["runs"])
    assert data["summary"]["slurm-backfill"]["avg_jct_ratio"] == pytest.approx(1.0)
    assert data["baseline"] == "slurm-backfill" and data["runtime_estimate"] == "exact"
    bad = runner.invoke(cli, ["simulate", "--trace", str(trace), "--variability", str(prof), "--policy", "best"])
    assert bad.exit_code == 2 and "valid: " in bad.output and "pal" in bad.output
    big = _philly(tmp_path, ["0,1,0,100,resnet50", "1,99,5,50,BERT", "2,0,9,5,BERT", "3,1,9,5,alexnet"])
    res = runner.invoke(cli, ["simulate", "--trace", str(big), "--variability", str(prof), "--cluster", "2x4"])
    assert res.exit_code == 1 and f"{big}:3:" in res.output and "Traceback" not in res.output
    res = runner.invoke(cli, ["simulate", "--trace", str(big), "--variability", str(prof), "--cluster", "2x4",
                              "--skip-invalid", "--json", "--policy", "pal"])
    assert res.exit_code == 0, res.output
    assert {r["skipped"] for r in json.loads(res.stdout)["runs"]} == {3}


def test_cli_plot_and_event_mode(tmp_path: Path) -> None:
    trace = _philly(tmp_path, [f"{i},{1 + i % 4},{i * 30},{200 + 10 * i},resnet50" for i in range(12)])
    plot = tmp_path / "p.png"
    res = CliRunner().invoke(cli, ["simulate", "--trace", str(trace), "--variability", str(_profiles(tmp_path)),
                                   "--cluster", "2x4", "--mode", "event", "--plot", str(plot), "--format", "csv"])
    assert res.exit_code == 0, res.output
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert res.stdout.splitlines()[0].startswith("trace,policy,mode,order,jobs,avg_jct_s")


@pytest.mark.artifact
def test_round_mode_reproduces_the_artifact_on_workload_1() -> None:
    """Every artifact policy within 2 % of the artifact's own average JCT (workload-1; bench/fidelity.py does all six)."""
    from conftest import require_artifact

    require_artifact("reference")
    from pal_slurm.simulate.runner import ArtifactVariability, SimulationSpec, run_one
    from pal_slurm.simulate.trace_files import read_trace_file
    from pal_slurm.simulate.artifact_draw import load_artifact_profiles

    ref = json.loads((ARTIFACT_DIR / "reference" / "sia-philly-fifo.json").read_text())["avg_jct_s"]["workload-1"]
    trace = read_trace_file(ARTIFACT_DIR / "traces/sia-philly/workload-1.csv", max_gpus=64)
    spec = SimulationSpec(traces=(trace,), policies=tuple(ref),
                          variability=ArtifactVariability(load_artifact_profiles(ARTIFACT_DIR / "variability/longhorn"),
                                                          16, 4))
    for policy, expected in ref.items():
        got = run_one(trace, policy, spec).metrics.avg_jct_s
        assert got == pytest.approx(expected, rel=0.02), policy


def test_cli_variability_from_the_database(tmp_path: Path) -> None:
    """--variability db: the real GPUs of the latest classification are the cluster."""
    from tests.support.fleetgen import records, two_tier_fleet
    from pal_slurm.ingest.jsonl import dump_jsonl

    fleet = two_tier_fleet()
    nodes = {u: f"node{i // 4}" for i, u in enumerate(sorted(fleet))}
    recs = [r for b, tag in (("resnet50", "a"), ("bert", "b"), ("pagerank", "d"))
            for r in records(fleet, benchmark=b, tag=tag, node_of=nodes)]
    (tmp_path / "f.jsonl").write_text(dump_jsonl(recs))
    url = f"sqlite:///{tmp_path / 'pal.db'}"
    runner = CliRunner()
    for args in (["db", "upgrade"], ["profile", "import", str(tmp_path / "f.jsonl")], ["classify", "--allow-partial"]):
        assert runner.invoke(cli, ["--db", url, *args], env={"PAL_CONFIG": ARTIFACT_CONFIG}).exit_code == 0
    trace = _philly(tmp_path, [f"{i},{1 + i % 4},{i * 20},{500 + 50 * i},resnet50" for i in range(10)])
    res = runner.invoke(cli, ["--db", url, "simulate", "--trace", str(trace), "--variability", "db",
                              "--mode", "event", "--policy", "pal", "--json"], env={"PAL_CONFIG": ARTIFACT_CONFIG})
    assert res.exit_code == 0, res.output
    runs = json.loads(res.stdout)["runs"]
    assert {r["jobs"] for r in runs} == {10}
    bad = runner.invoke(cli, ["--db", url, "simulate", "--trace", str(trace), "--variability", "db",
                              "--cluster", "2x4"], env={"PAL_CONFIG": ARTIFACT_CONFIG})
    assert bad.exit_code == 2 and "--cluster" in bad.output


def test_cli_sacct_trace(tmp_path: Path) -> None:
    sacct = Path(__file__).parents[1] / "data" / "traces" / "sacct-small.txt"
    res = CliRunner().invoke(cli, ["simulate", "--trace", str(sacct), "--variability", str(_profiles(tmp_path)),
                                   "--cluster", "4x4", "--mode", "event", "--policy", "pal", "--json"])
    assert res.exit_code == 0, res.output
    assert all(r["jobs"] > 0 for r in json.loads(res.stdout)["runs"])


def test_event_mode_keeps_the_releases_a_backfilling_policy_would_sort_itself() -> None:
    """The simulator hands its sorted (end, GPUs) list to the policy (Snapshot.known_releases)
    instead of letting it sort every running job per decision: at every decision that list
    equals what Snapshot.releases computes, and the run is the same as without it."""
    from dataclasses import replace

    from pal_slurm.placement.model import Snapshot
    from pal_slurm.simulate.synthetic import generate

    trace = generate(300, seed=3, mean_interarrival_s=20.0, max_gpus=16)
    cluster = Cluster.uniform(4, 4, slowdown={c: [1.0 + 0.05 * (g % 5) for g in range(16)] for c in "ABCD"},
                              perfvar={c: [1.0 + 0.04 * (g % 7) for g in range(16)] for c in "ABCD"})
    from pal_slurm.placement.easy import EasyBackfill

    inner = get_policy("pal-backfill")
    assert isinstance(inner, EasyBackfill)
    checked: list[int] = []

    class Checking(EasyBackfill):
        def place(self, snapshot: Snapshot, queue, ctx):  # type: ignore[no-untyped-def]
            assert snapshot.known_releases is not None
            recomputed = replace(snapshot, known_releases=None).releases
            assert snapshot.known_releases == recomputed
            checked.append(len(recomputed))
            return super().place(replace(snapshot, known_releases=None), queue, ctx)

    kept = simulate_events(trace, cluster, inner, EventOptions())
    sorted_each_time = simulate_events(trace, cluster, Checking(inner.row, inner.chooser, inner.estimate, inner.wait,
                                                                inner.lookahead), EventOptions())
    assert len(checked) > 50 and max(checked) > 3  # decisions with several running jobs were checked
    assert [(o.job_id, o.start_time, o.finish_time) for o in kept.outcomes] == \
        [(o.job_id, o.start_time, o.finish_time) for o in sorted_each_time.outcomes]
