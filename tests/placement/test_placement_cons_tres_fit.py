"""cons_tres's node choice (`_eval_nodes` for nodes of equal weight): the tightest run of
consecutive usable nodes, and in it the tightest node for the last one needed -- the pick
`slurm-reserving` makes, set against the first fit the EASY policies share."""

from __future__ import annotations

import numpy as np
import pytest

from pal_slurm.placement.cons_tres_fit import tightest_fit_nodes
from pal_slurm.placement.model import PlacementContext, Snapshot
from pal_slurm.placement.policies import get_policy
from tests.support.placement_cases import cluster, job


def nodes(counts: list[int], per_node: int, n: int) -> list[int] | None:
    got = tightest_fit_nodes(np.array(counts), per_node, n)
    return None if got is None else got.tolist()


@pytest.mark.parametrize(("counts", "per_node", "n", "want", "why"), [
    ([4, 1, 4, 4, 0, 4], 1, 1, [5], "one node: the run with the fewest free GPUs (node 5 alone) beats the 4-node run"),
    ([4, 2, 3, 4], 2, 1, [1], "one run: its node with the fewest free GPUs"),
    ([4, 0, 4, 4, 0, 4], 2, 1, [0], "equally tight runs: the first"),
    ([4, 0, 4, 4, 4, 4, 0, 4, 4], 4, 2, [7, 8], "two nodes: the tightest run that suffices, not the first nodes"),
    ([4, 4, 4, 0, 4, 4], 4, 2, [4, 5], "a run of exactly the nodes needed is tighter than a longer one"),
    ([4, 4, 4, 4], 4, 2, [0, 1], "inside the run, its first nodes"),
    ([4, 0, 4, 4, 0, 4], 4, 4, [0, 2, 3, 5], "no run suffices: the largest first, then the rest"),
    ([4, 0, 4, 0, 4], 4, 4, None, "too few usable nodes"),
    ([0, 4, 3, 0, 2, 2, 0], 2, 1, [4], "runs break at nodes that cannot host the job: [1, 2] holds 7, [4, 5] 4"),
    ([2, 2, 0, 4, 4, 4, 0, 1], 2, 3, [3, 4, 5], "a node with too few GPUs (7) is in no run"),
])
def test_tightest_fit(counts: list[int], per_node: int, n: int, want: list[int] | None, why: str) -> None:
    assert nodes(counts, per_node, n) == want, why


def busy_second_node() -> Snapshot:
    """n0 all free; n1: GPUs 4-6 busy, GPU 7 free; n2 all free."""
    c = cluster([4, 4, 4])
    return Snapshot(cluster=c, free=frozenset({0, 1, 2, 3, 7, 8, 9, 10, 11}), running={"r": (4, 5, 6)}, now=0.0,
                    expected_end={"r": 1000.0})


def test_slurm_reserving_fills_the_busiest_node_where_first_fit_takes_the_first() -> None:
    snap, queue, ctx = busy_second_node(), [job("one", 1, max_nodes=1, remaining_s=100)], PlacementContext()
    assert get_policy("slurm-backfill").place(snap, queue, ctx).as_dict() == {"one": (0,)}
    d = get_policy("slurm-reserving").place(snap, queue, ctx)
    assert d.as_dict() == {"one": (7,)}
    assert "tightest run of consecutive nodes" in d.assignments[0].reason


def test_slurm_reserving_spans_runs_that_each_fall_short() -> None:
    # two whole nodes: usable n0 and n2 are not consecutive (n1 is partly busy), so no run of
    # two exists; the larger (the first, on a tie) is taken, then the next -- the only two
    # usable nodes, so this checks that runs falling short are combined, not refused
    snap = busy_second_node()
    d = get_policy("slurm-reserving").place(snap, [job("two", 8, gpus_per_node=4, remaining_s=100)], PlacementContext())
    assert d.as_dict() == {"two": (0, 1, 2, 3, 8, 9, 10, 11)}
