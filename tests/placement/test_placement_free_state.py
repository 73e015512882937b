"""FreeState's shortcuts must leave exactly the state its one-GPU-at-a-time operations do."""

from __future__ import annotations

import random

import numpy as np
import pytest

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
