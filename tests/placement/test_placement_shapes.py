"""A job keeps its shape: every policy of the table, on fragmented clusters, gives each job
exactly the node count, GPUs per node and total Slurm would give it.

The cases are the ones found on a real 3-node cluster: one-node `--gres=gpu:2` jobs were
split across two nodes (Slurm then ran them with 1 GPU on each, or stranded them), and
pm-first split a job although one node had enough free GPUs.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np
import pytest

from pal_slurm.placement.base import Policy, enforce_shapes
from pal_slurm.placement.index import FreeState
from pal_slurm.placement.chooser import ShapedChooser
from pal_slurm.placement.in_order import InOrder
from pal_slurm.placement.model import Assignment, Decision, JobRequest, PlacementContext, PolicyRow, Snapshot
from pal_slurm.placement.policies import Choice, get_policy, policy_names
from tests.support.placement_cases import cluster, free_only, job

ALL = sorted(policy_names())


def one_node(jid: str, gpus: int, cls: str | None = "A", **kw: object) -> JobRequest:
    """A `--gres=gpu:N` job without -N: exactly one node."""
    return job(jid, gpus, cls, max_nodes=1, **kw)  # type: ignore[arg-type]


def fragmented() -> Snapshot:
    """A fragmented layout: 3 nodes x 4 GPUs; free: gpu1 2 (ids 0, 1), gpu2 1 (4), gpu3 1 (8).
    The slowest GPUs for class A are the two free ones on gpu1, so a variability policy that
    may split would rather take 4 and 8."""
    sf = [1.3, 1.3, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    return free_only(cluster([4, 4, 4], {"A": sf, "D": [1.0] * 12}), [0, 1, 4, 8])


def nodes_of(snap: Snapshot, gpus: Sequence[int]) -> set[int]:
    return {snap.cluster.node_of[g] for g in gpus}


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("cls", ["A", "D"])
def test_one_node_jobs_on_the_fragmented_layout_take_the_node_with_two_free(name: str, cls: str) -> None:
    snap = fragmented()
    d = get_policy(name).place(snap, [one_node("j1", 2, cls), one_node("j2", 2, cls)],
                               PlacementContext(rng=random.Random(1)))
    assert d.refused == ()
    assert d.as_dict() == {"j1": (0, 1)}, "the first job on gpu1, the second waits (never split)"
    assert d.blocked == "j2" or name in ("pal-backfill", "pal-match")


@pytest.mark.parametrize("name", ALL)
def test_a_one_node_job_is_never_split_even_when_splitting_is_faster(name: str) -> None:
    snap = free_only(fragmented().cluster, [4, 8])  # only single GPUs on two nodes
    d = get_policy(name).place(snap, [one_node("j", 2)], PlacementContext())
    assert d.as_dict() == {} and d.refused == ()


@pytest.mark.parametrize("name", ALL)
def test_gpus_per_node_jobs_get_exactly_that_many_on_each_node(name: str) -> None:
    snap = free_only(cluster([4, 4, 4]), [0, 1, 2, 4, 5, 8])
    d = get_policy(name).place(snap, [job("j", 4, gpus_per_node=2)], PlacementContext())
    assert len(d.assignments) == 1 and d.refused == ()
    gpus = d.assignments[0].gpus
    assert sorted(sum(1 for g in gpus if snap.cluster.node_of[g] == v) for v in nodes_of(snap, gpus)) == [2, 2]


def test_request_shape_is_validated() -> None:
    with pytest.raises(ValueError, match="needs gpus_per_node"):
        job("x", 4, min_nodes=2)
    with pytest.raises(ValueError, match="outside"):
        job("x", 4, gpus_per_node=2, max_nodes=1)
    with pytest.raises(ValueError, match="empty"):
        job("x", 4, min_nodes=2, max_nodes=1, gpus_per_node=2)
    assert one_node("x", 2).node_range == (1, 1) and job("x", 3).node_range == (1, 3)
    assert job("x", 4, gpus_per_node=2).node_range == (2, 2)


def test_shape_violation_names_what_is_wrong() -> None:
    c = cluster([2, 2])
    assert one_node("x", 2).shape_violation((0, 2), c.node_of) == "spans 2 node(s), the job may span 1..1"
    assert job("x", 2).shape_violation((0, 0), c.node_of) == "1 distinct GPUs for a job of 2"
    assert job("x", 4, gpus_per_node=2).shape_violation((0, 1, 2, 3), c.node_of) is None
    assert one_node("x", 2, allowed_nodes=frozenset({1})).shape_violation((0, 1), c.node_of) == \
        "uses a node the job may not use"


class _Splitter(ShapedChooser):
    """A deliberately wrong chooser: always the lowest free ids, whatever the shape (and
    without the shape checks a chooser makes before it picks)."""

    def choose(self, job, state, ctx):  # type: ignore[no-untyped-def]
        cand = state.candidates(job.allowed_nodes)
        return self.pick(job, cand, state, ctx) if len(cand) >= job.gpus else None

    def pick(self, job, cand, state, ctx):  # type: ignore[no-untyped-def]
        return Choice(gpus=tuple(int(g) for g in cand[: job.gpus]), why="lowest ids")

    def pick_split(self, job, cand, state, ctx, per_node, nodes):  # type: ignore[no-untyped-def]
        return self.pick(job, cand, state, ctx)

    def pick_one_node(self, job, cand, state, ctx):  # type: ignore[no-untyped-def]
        return self.pick(job, cand, state, ctx)


def test_place_drops_what_a_broken_policy_gets_wrong_and_says_why() -> None:
    snap = fragmented()
    broken: PolicyRow[Policy] = PolicyRow("test-splitter", "test", sticky=True,
                                          build=lambda row: InOrder(row, _Splitter(row.name)))
    d = broken.policy().place(snap, [one_node("ok", 2), one_node("bad", 2)], PlacementContext())
    assert d.as_dict() == {"ok": (0, 1)}
    assert d.refused == (("bad", "spans 2 node(s), the job may span 1..1"),)


def test_enforcement_refuses_busy_and_doubly_given_gpus() -> None:
    snap = fragmented()
    d = Decision(assignments=(Assignment("a", (4,)), Assignment("b", (4,)), Assignment("c", (2,))))
    out = enforce_shapes(snap, [job("a", 1), job("b", 1), job("c", 1)], d)
    assert out.as_dict() == {"a": (4,)}
    assert [r[0] for r in out.refused] == ["b", "c"]


# --------------------------------------------------------------------------- invariants, random fragmented clusters


def random_shaped_case(seed: int) -> tuple[Snapshot, list[JobRequest]]:
    """Random nodes of 1-8 GPUs, a random half or more busy (fragmented), and jobs of every
    Slurm shape: one node (--gres), GPUs per node on several nodes (-N), free splits (--gpus)."""
    rng = random.Random(1000 + seed)
    sizes = [rng.choice([2, 4, 4, 8]) for _ in range(rng.randint(2, 8))]
    n = sum(sizes)
    sf = {k: [rng.choice((0.9, 1.0, 1.1, 1.5)) for _ in range(n)] for k in "ABCD"}
    c = cluster(sizes, sf)
    free = [g for g in range(n) if rng.random() < 0.45]
    snap = Snapshot(cluster=c, free=frozenset(free), now=0.0)
    queue = []
    for i in range(rng.randint(1, 10)):
        kind = rng.choice(["one", "one", "per-node", "free"])
        if kind == "one":
            g = rng.randint(1, max(sizes))
            queue.append(job(f"j{i}", g, rng.choice("ABCD"), submit=float(i), max_nodes=1,
                             remaining_s=rng.choice([0.0, 100.0])))
        elif kind == "per-node":
            per = rng.randint(1, 4)
            k = rng.randint(2, 3)
            queue.append(job(f"j{i}", per * k, rng.choice("ABCD"), submit=float(i), gpus_per_node=per,
                             same_slots=rng.random() < 0.5))
        else:
            queue.append(job(f"j{i}", rng.randint(1, 6), rng.choice("ABCD"), submit=float(i)))
    return snap, queue


@pytest.mark.parametrize("name", ALL)
def test_no_policy_ever_breaks_a_shape_on_fragmented_clusters(name: str) -> None:
    policy = get_policy(name)
    for seed in range(150):
        snap, queue = random_shaped_case(seed)
        d = policy.assign(snap, queue, PlacementContext(rng=random.Random(seed)))
        assert d.refused == ()
        jobs = {j.id: j for j in queue}
        taken: list[int] = []
        for a in d.assignments:
            assert jobs[a.job_id].shape_violation(a.gpus, snap.cluster.node_of) is None, (seed, a)
            taken += a.gpus
        assert len(taken) == len(set(taken)) and set(taken) <= snap.free


@pytest.mark.parametrize("name", [n for n in ALL if get_policy(n).deterministic])
def test_a_higher_ranked_job_that_fits_now_is_never_passed_over(name: str) -> None:
    """Serve in queue order: when a job is left unplaced, no job after it took GPUs that
    it could have used at that moment (checked by replaying the decision: before each
    later assignment, the skipped job must not fit in its shape on what was free). Jobs
    that wait on purpose for better GPUs are the one, bounded, exception."""
    policy = get_policy(name)
    for seed in range(150):
        snap, queue = random_shaped_case(seed)
        ctx = PlacementContext(rng=random.Random(seed))
        d = policy.place(snap, queue, ctx)
        placed = d.as_dict()
        waiting = {w.job_id for w in d.waits}
        state = FreeState(snap)
        order = [j.id for j in queue]
        by_id = {j.id: j for j in queue}
        for a in d.assignments:
            rank = order.index(a.job_id)
            for skipped in order[:rank]:
                if skipped in placed or skipped in waiting:
                    continue
                if policy.backfills and skipped != d.blocked:
                    # EASY backfill: past the head, a job that would delay the head's expected
                    # start is left for a later pass (as sched/backfill does)
                    continue
                fits = policy.chooser.choose(by_id[skipped], state.copy(), ctx)
                assert fits is None, f"seed {seed}: {a.job_id} placed while {skipped} fitted"
            state.take(a.gpus)
        assert int(np.count_nonzero(state.mask)) == len(snap.free) - sum(len(g) for g in placed.values())


@pytest.mark.parametrize(("request_", "fits"), [
    (job("any", 4), True),                                      # four free anywhere: may split freely
    (job("any", 5), False),                                     # more than are free
    (one_node("one", 2), True),                                 # gpu1 has 2 free
    (one_node("one", 3), False),                                # no node has 3 free, though 4 are free
    (job("pn", 2, gpus_per_node=1), True),                      # 1 on each of 2 nodes
    (job("pn", 3, gpus_per_node=1), True),                      # 1 on each of the 3 nodes
    (job("pn", 4, gpus_per_node=2), False),                     # 2 per node on 2 nodes: only gpu1 has 2
    (job("pn", 2, gpus_per_node=2), True),
    (job("pn", 2, allowed_nodes=frozenset({1, 2})), True),      # 4 and 8
    (one_node("one", 2, allowed_nodes=frozenset({1, 2})), False),  # gpu1 not allowed
])
def test_could_fit_is_the_shape_test_a_reservation_runs_after_each_release(request_: JobRequest, fits: bool) -> None:
    """Necessary for every placement (so skipping the chooser where it is False changes no
    decision), and exact for the shapes above."""
    state = FreeState(fragmented())
    assert state.could_fit(request_) is fits
    if not fits:
        from pal_slurm.placement.first_fit import FirstFit

        assert FirstFit("first-fit").choose(request_, state, PlacementContext()) is None
