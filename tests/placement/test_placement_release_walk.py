"""A reservation's walk through the releases: skipping the releases after which the head
cannot fit yet must never skip the one it first fits after, and must leave the free GPUs
that freeing them one by one does."""

from __future__ import annotations

import random

import numpy as np
import pytest

from pal_slurm.placement.easy import from_enough_gpus
from pal_slurm.placement.index import FreeState
from pal_slurm.placement.model import JobRequest, Snapshot
from tests.support.placement_cases import cluster, job


def random_walk(seed: int) -> tuple[FreeState, JobRequest, list[tuple[float, tuple[int, ...]]]]:
    """A free state on uneven nodes, a head of any shape, and releases that may overlap each
    other and name GPUs already free (as GPUs being given back can)."""
    rng = random.Random(seed)
    sizes = [rng.randint(1, 8) for _ in range(rng.randint(1, 9))]
    n = sum(sizes)
    snap = Snapshot(cluster=cluster(sizes), free=frozenset(g for g in range(n) if rng.random() < 0.3))
    gpus = rng.randint(1, n + 2)
    shape: dict[str, object] = {}
    roll = rng.random()
    if roll < 0.3:
        shape["gpus_per_node"] = rng.choice([d for d in range(1, gpus + 1) if gpus % d == 0])
    elif roll < 0.5:
        shape["max_nodes"] = 1
    if rng.random() < 0.3:
        shape["allowed_nodes"] = frozenset(v for v in range(len(sizes)) if rng.random() < 0.7)
    head = job("head", gpus, **shape)
    releases = [(float(t), tuple(rng.sample(range(n), rng.randint(0, min(n, 5))))) for t in range(rng.randint(0, 40))]
    return FreeState(snap), head, releases


def one_by_one(state: FreeState, head: JobRequest, releases: list[tuple[float, tuple[int, ...]]]) -> int | None:
    """How many releases, freed one at a time, it takes until the head could fit."""
    later = state.copy()
    if later.could_fit(head):
        return 0
    for i, (_, gpus) in enumerate(releases):
        later.release(gpus)
        if later.could_fit(head):
            return i + 1
    return None


@pytest.mark.parametrize("seed", range(500))
def test_from_enough_gpus_skips_only_releases_the_head_cannot_fit_after_and_frees_them(seed: int) -> None:
    state, head, releases = random_walk(seed)
    later = state.copy()
    rest = list(from_enough_gpus(later, head, iter(releases)))
    skipped = len(releases) - len(rest)
    assert rest == releases[skipped:]
    fits = one_by_one(state, head, releases)
    if fits is not None:
        assert skipped <= max(fits, 1) - 1, "skipped the release the head first fits after"
    expected = state.copy()
    for _, gpus in releases[:skipped]:
        expected.release(gpus)
    assert np.array_equal(later.mask, expected.mask) and np.array_equal(later.count, expected.count)
    assert later.n_free == expected.n_free


def test_from_enough_gpus_yields_from_the_release_that_brings_enough_gpus() -> None:
    state = FreeState(Snapshot(cluster=cluster([4, 4, 4]), free=frozenset({0, 1})))
    releases = [(1.0, (2,)), (2.0, (3,)), (3.0, (4, 5)), (4.0, (6, 7)), (5.0, (8, 9, 10, 11))]
    rest = list(from_enough_gpus(state, job("h", 6), iter(releases)))
    assert rest == releases[2:]  # 2 free, 2 more: 4; the 3rd release brings 6
    assert sorted(np.flatnonzero(state.mask).tolist()) == [0, 1, 2, 3]
    # a head that already has enough free is asked about after the first release, as before
    assert list(from_enough_gpus(state, job("h", 2), iter(releases))) == releases
    # one that never has enough sees none, and everything is freed
    state = FreeState(Snapshot(cluster=cluster([4, 4, 4]), free=frozenset({0, 1})))
    assert list(from_enough_gpus(state, job("h", 13), iter(releases))) == [] and state.n_free == 12
