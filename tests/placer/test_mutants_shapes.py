"""Which held jobs the placer steers and onto which nodes (pal_slurm/placer/shapes.py), on the
cases the rest of the suite leaves open (each found by `make mutation`): the reason each
unsteerable request is released with, requests at the edge of what a node holds, and every
constraint of the nodes a job may use (CPUs per node, memory now and ever, several partitions,
several features, exclusive jobs), which jobs wait rather than start, the nodes usable now and
ever, and what a cycle works out once (a mask per set of constraints, shared read-only; a verdict
per set of constraints and shape)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from pal_slurm.placer import cluster_view, holds, shapes
from tests.support.steering import CLASSES, FOUR, NOW, SF, factors, job, node, place


def _plan(jobs, nodes=FOUR):  # type: ignore[no-untyped-def]
    view = cluster_view.build_view(nodes, jobs, factors(SF), CLASSES)
    held = [shapes.HeldJob(j, *holds.held_class(j)) for j in jobs]
    return shapes.plan_requests(held, view)


# --------------------------------------------------------------------------- what is released, and why


@pytest.mark.parametrize(("kw", "reason"), [
    ({"tpn": "", "tres_per_socket": "gres:gpu:1"},
     "GPUs per task or per socket: placed by Slurm (not expressible as per-slot types)"),
    ({"tpn": "gres:gpu:1", "tpj": "gres:gpu:1"}, "GPUs requested per node and per job: placed by Slurm"),
    ({"tpn": "gres:mps:10"}, "no GPUs requested"),
    ({"tpn": "gres:gpu:1,cpu=4,mem=2"}, "unreadable request 'cpu=4,mem=2': placed by Slurm"),
    ({"tpn": "gres:gpu:a100:1,gres:gpu:v100:1"}, "asks for GPU type a100,v100: not moved"),
    ({"tpn": "", "tpj": "gres:gpu:2", "nodes": 2}, "--gpus=2 over several nodes: placed by Slurm (not expressible "
                                                   "as per-slot types)"),
    ({"required_nodes": "n1"}, "names nodes: not moved"),
])
def test_each_unsteerable_request_is_released_with_its_reason(kw: dict[str, object], reason: str) -> None:
    planned = _plan([job("1", **kw)])
    assert [(s.job.job_id, s.reason) for s in planned.skips] == [("1", reason)] and not planned.requests


def test_a_request_for_every_gpu_of_a_node_is_steered() -> None:
    for kw in ({"tpn": "gres:gpu:4"}, {"tpn": "", "tpj": "gres:gpu:4"}):
        planned = _plan([job("1", **kw)])
        assert not planned.skips and [r.id for r in planned.requests] == ["1"], kw


def test_a_job_that_no_usable_node_could_ever_take_says_how_many_nodes_it_may_use() -> None:
    nodes = [node("n1"), node("n2", partitions=("other",))]
    planned = _plan([job("1", nodes=2)], nodes)
    assert [s.reason for s in planned.skips] == [
        "needs 2 node(s) with 1 steerable GPUs among the nodes it may use (1): placed by Slurm"]


def test_one_released_job_does_not_stop_the_others_from_being_planned() -> None:
    planned = _plan([job("1", required_nodes="n1"), job("2", tpn="gres:gpu:a100:1"), job("3")])
    assert [s.job.job_id for s in planned.skips] == ["1", "2"] and [r.id for r in planned.requests] == ["3"]


# --------------------------------------------------------------------------- the nodes a job may use


def test_a_multi_node_jobs_cpus_are_split_over_its_nodes_rounding_up() -> None:
    """9 CPUs over 2 nodes: 5 on each. Nodes with 4 CPUs free make the job wait; 5 do not."""
    four_free = [node(f"n{i}", alloc_cpus=4) for i in range(1, 5)]
    planned = _plan([job("1", nodes=2, cpus=9)], four_free)
    assert planned.waiting == {"1": "no node it may use has 1 free steerable GPUs"}
    five_free = [node(f"n{i}", alloc_cpus=3) for i in range(1, 5)]
    planned = _plan([job("1", nodes=2, cpus=9)], five_free)
    assert planned.waiting == {} and planned.requests[0].allowed_nodes == frozenset({0, 1, 2, 3})


def test_a_job_in_two_partitions_may_use_the_nodes_of_either() -> None:
    nodes = [node("n1", partitions=("a",)), node("n2", partitions=("b",)), node("n3", partitions=("c",))]
    planned = _plan([job("1", partition="a,b")], nodes)
    assert planned.requests[0].allowed_nodes == frozenset({0, 1})


def test_a_job_asking_for_two_features_may_use_only_nodes_with_both() -> None:
    nodes = [node("n1", features=frozenset({"v100", "nvlink"})), node("n2"), node("n3", features=frozenset({"nvlink"}))]
    planned = _plan([job("1", features="v100&nvlink")], nodes)
    assert planned.requests[0].allowed_nodes == frozenset({0})


def test_an_exclusive_job_may_use_only_idle_nodes_of_its_partition() -> None:
    nodes = [node("n1", partitions=("other",)), node("n2", used=(0,), alloc_cpus=1), node("n3")]
    planned = _plan([job("1", exclusive=True)], nodes)
    assert planned.requests[0].allowed_nodes == frozenset({2})


def test_memory_counts_what_is_free_now_for_now_and_what_a_node_has_for_ever() -> None:
    """A node with 16000 MB, 8000 of them in use: a job needing 10000 MB cannot start there now,
    but could later, so it waits rather than being released; one needing exactly 16000 fits."""
    half = [replace(node(f"n{i}"), alloc_memory_mb=8000) for i in range(1, 5)]
    planned = _plan([job("1", memory_per_node_mb=10000)], half)
    assert not planned.skips and planned.waiting == {"1": "no node it may use has 1 free steerable GPUs"}
    mixed = [half[0], node("n2")]
    planned = _plan([job("1", memory_per_node_mb=10000)], mixed)
    assert planned.requests[0].allowed_nodes == frozenset({1}) and not planned.waiting
    planned = _plan([job("1", memory_per_node_mb=16000)])
    assert not planned.skips and not planned.waiting and planned.requests[0].allowed_nodes == frozenset({0, 1, 2, 3})


# --------------------------------------------------------------------------- waiting, and why


def test_a_job_waits_with_the_reason_it_cannot_start_now() -> None:
    # two nodes it may use, one drained: a two-node job cannot start now
    nodes = [node("n1"), node("n2", flags=frozenset({"DRAIN"})), node("n3", partitions=("other",))]
    planned = _plan([job("1", nodes=2)], nodes)
    assert planned.waiting == {"1": "fewer than 2 node(s) it may use can take it now"}
    # a node with exactly the free GPUs asked for: it can start, nothing waits
    exact = [node("n1", used=(0, 1)), node("n2", used=(0, 1, 2, 3))]
    planned = _plan([job("1", tpn="gres:gpu:2")], exact)
    assert planned.waiting == {} and [r.id for r in planned.requests] == ["1"]
    planned = _plan([job("1", tpn="gres:gpu:4", nodes=2)])
    assert planned.waiting == {} and [r.id for r in planned.requests] == ["1"], "every GPU of two idle nodes"
    busy = [node("n1", used=(0, 1, 2)), node("n2", used=(0, 1, 2))]
    planned = _plan([job("1", tpn="gres:gpu:2")], busy)
    assert planned.waiting == {"1": "no node it may use has 2 free steerable GPUs"}


def test_the_placement_of_steered_jobs_still_works_end_to_end() -> None:
    _view, planned, ups = place([job("1", tpn="gres:gpu:4")])
    assert set(ups) == {"1"} and len(ups["1"].slots) == 4 and NOW > 0


# --------------------------------------------------------------------------- the nodes, now and ever; judged once


def test_allowed_mask_is_the_nodes_usable_now_unless_asked_for_those_usable_ever() -> None:
    """A drained node is not usable now, but could take the job later; a job that names nodes
    gets the reason it is not moved, not a mask."""
    nodes = [node("n1"), node("n2", flags=frozenset({"DRAIN"})), node("n3", partitions=("other",))]
    j = job("1")
    view = cluster_view.build_view(nodes, [j], factors(SF), CLASSES)
    shape = shapes.request_shape(j, 4)
    assert isinstance(shape, shapes.Shape)
    for now in ({}, {"now": True}):
        assert np.flatnonzero(shapes.allowed_mask(j, view, shape, **now)).tolist() == [0], now
    assert np.flatnonzero(shapes.allowed_mask(j, view, shape, now=False)).tolist() == [0, 1]
    assert shapes.allowed_mask(job("2", required_nodes="n1"), view, shape) == "names nodes: not moved"


def test_jobs_with_the_same_constraints_share_one_read_only_mask_a_cycle() -> None:
    """Held jobs share a few sets of constraints: each set's mask is worked out once a cycle and
    shared, so nobody may write into it (a change would reach every job sharing it)."""
    a, b, c = job("1"), job("2"), job("3", excluded_nodes="n1")
    view = cluster_view.build_view(FOUR, [a, b, c], factors(SF), CLASSES)
    shape = shapes.request_shape(a, 4)
    assert isinstance(shape, shapes.Shape)
    mask = shapes.allowed_mask(a, view, shape)
    assert isinstance(mask, np.ndarray) and shapes.allowed_mask(b, view, shape) is mask
    assert not mask.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        mask[0] = False
    other = shapes.allowed_mask(c, view, shape)
    assert other is not mask and other.tolist() == [False, True, True, True] and mask.tolist() == [True] * 4
    ever = shapes.allowed_mask(a, view, shape, now=False)
    assert ever is not mask and shapes.allowed_mask(b, view, shape, now=False) is ever


def test_a_held_queue_is_judged_once_per_constraints_and_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    judged: list[tuple[int, int]] = []
    verdict = shapes._verdict

    def counted(view, constraints, shape):  # type: ignore[no-untyped-def]
        judged.append((shape.per_node, shape.nodes))
        return verdict(view, constraints, shape)

    monkeypatch.setattr(shapes, "_verdict", counted)
    busy = [node(f"n{i}", used=(0, 1, 2)) for i in range(1, 5)]
    planned = _plan([job("1"), job("2", tpn="gres:gpu:2"), job("3"), job("4", tpn="gres:gpu:2"), job("5", nodes=2),
                     job("6", nodes=2)], busy)
    assert sorted(judged) == [(1, 1), (1, 2), (2, 1)]
    assert [r.id for r in planned.requests] == ["1", "2", "3", "4", "5", "6"]
    assert planned.waiting == {"2": "no node it may use has 2 free steerable GPUs",
                               "4": "no node it may use has 2 free steerable GPUs"}
