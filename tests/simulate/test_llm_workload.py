"""The LLM-era job mix (`pal simulate --synthetic N --workload llm`): its kinds, sizes in whole
nodes, durations and offered load are what docs/simulation.md says they are, and the event
simulator runs its whole-node jobs on whole nodes."""

from __future__ import annotations

import json
import random
import statistics
from collections import Counter

import numpy as np
import pytest
from click.testing import CliRunner

from pal_slurm.cli.main import cli
from pal_slurm.errors import InputError
from pal_slurm.simulate.llm_workload import DEFAULT_LOAD, LLM_KINDS, generate_llm, kind_sizes

KINDS = {k.name: k for k in LLM_KINDS}


def test_the_mix_is_deterministic_per_seed_and_differs_between_seeds() -> None:
    a = generate_llm(300, nodes=32, gpus_per_node=8, seed=3)
    assert a == generate_llm(300, nodes=32, gpus_per_node=8, seed=3)
    assert [j.work for j in a.jobs] != [j.work for j in generate_llm(300, nodes=32, gpus_per_node=8, seed=4).jobs]
    assert [j.job_id for j in a.jobs] == [str(i) for i in range(300)]
    assert all(x.submit_time < y.submit_time for x, y in zip(a.jobs, a.jobs[1:]))


def test_kind_shares_classes_and_the_gpu_time_pretraining_holds() -> None:
    trace = generate_llm(20_000, nodes=32, gpus_per_node=8, seed=1)
    count = Counter(j.model for j in trace.jobs)
    for kind in LLM_KINDS:
        assert count[kind.name] / len(trace.jobs) == pytest.approx(kind.share, abs=0.01), kind.name
        assert {j.job_class for j in trace.jobs if j.model == kind.name} == {kind.job_class}
    gpu_s = Counter()
    for j in trace.jobs:
        gpu_s[j.model] += j.num_gpus * j.work
    # a few percent of the jobs, most of the GPU time; the short small jobs the bulk of the count
    assert gpu_s["pretrain"] / sum(gpu_s.values()) > 0.6
    small_short = sum(1 for j in trace.jobs if j.num_gpus <= 8 and j.work <= 3600) / len(trace.jobs)
    assert small_short > 0.75


def test_big_jobs_take_whole_nodes_up_to_half_the_cluster_and_small_ones_fit_a_node() -> None:
    for nodes in (8, 32, 2048):
        trace = generate_llm(5_000, nodes=nodes, gpus_per_node=8, seed=2)
        for j in trace.jobs:
            if KINDS[j.model].whole_nodes:
                assert j.gpus_per_node == 8 and j.num_gpus % 8 == 0, j
                assert j.num_gpus <= max(1, nodes // 2) * 8, j
            else:
                assert j.gpus_per_node is None and j.num_gpus in (1, 2, 4, 8), j
        biggest = max(j.num_gpus for j in trace.jobs)
        if nodes <= 32:  # each size of pretraining is half as likely as the one below: drawn at this count
            assert biggest == nodes // 2 * 8, (nodes, biggest)
        else:  # jobs of thousands of GPUs
            assert biggest >= 1024, (nodes, biggest)


def test_sizes_on_small_and_narrow_clusters() -> None:
    pre, eva = KINDS["pretrain"], KINDS["eval"]
    assert kind_sizes(pre, 1, 8) == [(8, 8, 1.0)]          # one node: the whole cluster, never more
    assert [g for g, _, _ in kind_sizes(pre, 8, 8)] == [32]  # 4 nodes is half of 8
    assert [g for g, _, _ in kind_sizes(pre, 32, 8)] == [32, 64, 128]
    assert [w for _, _, w in kind_sizes(pre, 32, 8)] == [1.0, 0.5, 0.25]
    # on 4-GPU nodes an 8-GPU evaluation becomes a whole node, its weight kept
    four = kind_sizes(eva, 16, 4)
    assert [g for g, _, _ in four] == [1, 2, 4] and four[-1][2] == pytest.approx(0.3)


def test_durations_follow_each_kinds_median_and_range() -> None:
    trace = generate_llm(40_000, nodes=64, gpus_per_node=8, seed=5)
    for kind in LLM_KINDS:
        work = [j.work for j in trace.jobs if j.model == kind.name]
        assert min(work) >= kind.min_s and max(work) <= kind.max_s
        assert statistics.median(work) == pytest.approx(kind.median_s, rel=0.12), kind.name
        assert float(np.percentile(work, 90)) == pytest.approx(kind.p90_s, rel=0.15), kind.name


@pytest.mark.parametrize("load", [0.5, DEFAULT_LOAD, 1.3])
def test_arrivals_give_the_offered_load(load: float) -> None:
    trace = generate_llm(20_000, nodes=16, gpus_per_node=8, seed=7, load=load)
    asked = sum(j.num_gpus * j.work for j in trace.jobs)
    offered = asked / (trace.jobs[-1].submit_time * 16 * 8)
    assert offered == pytest.approx(load, rel=0.03)


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"n_jobs": -1}, "number of jobs"), ({"nodes": 0}, "at least one node"), ({"gpus_per_node": 0}, "one GPU"),
    ({"load": 0.0}, "offered load"), ({"load": float("nan")}, "offered load"), ({"kinds": ()}, "job mix"),
])
def test_bad_parameters_are_refused_by_name(kwargs: dict, words: str) -> None:
    args = {"n_jobs": 10, "nodes": 8, "gpus_per_node": 8, "seed": 1, **kwargs}
    with pytest.raises(InputError, match=words):
        generate_llm(**args)


def test_the_event_simulator_runs_whole_node_jobs_on_whole_nodes() -> None:
    from pal_slurm.placement.policies import get_policy
    from pal_slurm.simulate.event import EventOptions, simulate_events
    from pal_slurm.simulate.fleets import parametric_from_spec

    cluster = parametric_from_spec("wide", 8, 8, 1).cluster(random.Random(0))
    trace = generate_llm(150, nodes=8, gpus_per_node=8, seed=11)
    by_id = {j.job_id: j for j in trace.jobs}
    node_of = {g.id: g.node for g in cluster.gpus}
    for policy in ("slurm-backfill", "pal-guard"):
        result = simulate_events(trace, cluster, get_policy(policy), EventOptions(locality_penalty=1.0))
        assert len(result.outcomes) == len(trace.jobs), policy
        for o in result.outcomes:
            job = by_id[o.job_id]
            per_node = Counter(node_of[g] for g in o.gpu_ids)
            if job.gpus_per_node:
                assert set(per_node.values()) == {8} and len(per_node) == job.num_gpus // 8, (policy, o)
            else:
                assert len(per_node) == 1, (policy, o)


def test_pal_simulate_runs_the_llm_mix_and_says_so() -> None:
    res = CliRunner().invoke(cli, ["simulate", "--synthetic", "120", "--workload", "llm", "--load", "0.7",
                                   "--cluster", "8x8", "--variability", "parametric:wide", "--mode", "event",
                                   "--policy", "pal-guard", "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    names = {r["trace"] for r in data["runs"]}
    assert names == {"llm-120-8x8-seed42"}, names
    assert data["cluster"]["gpus_per_node"] == 8


@pytest.mark.parametrize(("args", "words"), [
    (["--workload", "llm"], "give --synthetic N"),
    (["--load", "0.5"], "give --synthetic N"),
    (["--synthetic", "5", "--load", "0.5"], "--load applies to --workload llm"),
    (["--synthetic", "5", "--workload", "llm", "--load", "0"], "--load"),
    (["--synthetic", "5", "--workload", "gpt"], "--workload"),
])
def test_pal_simulate_refuses_a_mix_it_cannot_draw(tmp_path, args: list[str], words: str) -> None:  # type: ignore[no-untyped-def]
    trace = tmp_path / "w.csv"
    trace.write_text("job_id,num_gpus,submit_time,duration,model\n0,1,0,100,vgg19\n")
    res = CliRunner().invoke(cli, ["simulate", "--trace", str(trace), "--variability", "parametric:wide",
                                   "--cluster", "8x8", *args])
    assert res.exit_code == 2, res.output
    assert words in res.stderr and "Traceback" not in res.output
