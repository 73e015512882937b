"""Array shortcuts over the free GPUs must give exactly what their one-GPU-at-a-time versions do."""

from __future__ import annotations

import random

import numpy as np
import pytest

from pal_slurm.placement.base import free_on_node
from pal_slurm.placement.first_fit import first_free_slots
from pal_slurm.placement.index import FreeState
from pal_slurm.placement.model import Snapshot
from tests.support.placement_cases import cluster


@pytest.mark.parametrize("seed", range(200))
def test_without_is_taking_the_free_gpus_it_hides_and_leaves_the_original_alone(seed: int) -> None:
    rng = random.Random(seed)
    sizes = [rng.randint(1, 8) for _ in range(rng.randint(1, 9))]
    n = sum(sizes)
    state = FreeState(Snapshot(cluster=cluster(sizes), free=frozenset(g for g in range(n) if rng.random() < 0.6)))
    state.candidates(None)  # a cached answer the copy must not keep
    hidden = np.array([rng.random() < 0.4 for _ in range(n)], dtype=bool)
    before = (state.mask.copy(), state.count.copy(), state.n_free)
    got = state.without(hidden)
    expected = state.copy()
    expected.take(tuple(np.flatnonzero(hidden & state.mask).tolist()))
    assert np.array_equal(got.mask, expected.mask) and np.array_equal(got.count, expected.count)
    assert got.n_free == expected.n_free
    assert np.array_equal(got.candidates(None), np.flatnonzero(expected.mask))
    assert np.array_equal(state.mask, before[0]) and np.array_equal(state.count, before[1])
    assert state.n_free == before[2]


@pytest.mark.parametrize("seed", range(200))
def test_first_free_slots_is_each_nodes_lowest_free_gpus_whole_nodes_included(seed: int) -> None:
    rng = random.Random(seed)
    sizes = [rng.choice([rng.randint(1, 8), 8]) for _ in range(rng.randint(1, 9))]
    c = cluster(sizes)
    state = FreeState(Snapshot(cluster=c, free=frozenset(g for g in range(c.size) if rng.random() < 0.7)))
    per_node = rng.randint(1, max(sizes))
    nodes = [v for v in range(len(sizes)) if state.count[v] >= per_node]
    rng.shuffle(nodes)
    listing = free_on_node(state.index, state)
    expected = [g for v in nodes for g in listing(v)[:per_node]]
    assert first_free_slots(state.index, state, np.array(nodes, dtype=np.int64), per_node).tolist() == expected
