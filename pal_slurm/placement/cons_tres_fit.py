"""cons_tres's node choice as a real slurmctld makes it: the tightest run of consecutive nodes.

Why a second chooser beside pal_slurm.placement.first_fit: first fit (the first nodes in
order that have the GPUs) is the pick pal-slurm's policies and the `slurm-backfill` baseline
share, so that a measured difference between them is the variability part alone. A real
slurmctld chooses otherwise, and the replay's runs show it: rebuilding each job's free
GPUs from a plain-Slurm run's own starts and ends, first fit names the GPUs Slurm gave for
57-71 % of the jobs, this rule for 73-85 % (docs/evaluation.md, "The third sitting"). Which
node a job lands on decides, on a fleet with one very slow GPU, whether a long job runs on
it: the makespan the replay predicts for plain Slurm. `slurm-reserving` (the model of plain
Slurm the replay predicts with) picks with this chooser.

The rule (select/cons_tres `_eval_nodes` for nodes of equal weight, the same in 22.05 and
24.11): the nodes that can host the job's GPUs per node form runs of consecutive nodes (in
configuration order; a node that cannot breaks a run). Repeatedly, take the run that
suffices for the nodes still needed with the least free resources (the tightest), or, if
none suffices, the largest; take its first nodes, and for the last node needed the node of
that run with the least free resources (the lowest index on ties). On each node, the lowest
free GPU indices. Slurm measures "free resources" in CPUs; the simulator does not model CPUs,
so free GPUs stand in for them (with CPUs, the same check names 80-88 %).

Slurm 26.05 added a path for a job that may use one node only (`-N1`, as the replay submits
one-node jobs, or `-n`; a bare `--gres` job still goes the way above): the first node by
weight that can run it (select/cons_tres `_get_one_res`), which is first fit
(tests/slurm/test_node_choice.py shows both on a live slurmctld). This model stays the rule of
22.05 - 25.11; on 26.05 it mispredicts such one-node jobs.
"""

from __future__ import annotations

import numpy as np

from pal_slurm.placement.first_fit import FirstFit


def tightest_fit_nodes(counts: np.ndarray, per_node: int, nodes: int) -> np.ndarray | None:
    """cons_tres's `nodes` nodes with at least `per_node` free GPUs each (see the module's rule).

    On arrays (runs as start/end positions, their free GPUs from one cumulative sum): the
    replay predicts every plain-Slurm pass with it, and bench/placement_speed.py times it on
    2,500 nodes."""
    usable = np.flatnonzero(counts >= per_node)
    if usable.size < nodes:
        return None
    breaks = np.flatnonzero(np.diff(usable) != 1) + 1
    starts = np.concatenate(([0], breaks))
    ends = np.concatenate((breaks, [usable.size]))
    cum = np.concatenate(([0], np.cumsum(counts[usable])))
    free = (cum[ends] - cum[starts]).astype(float)
    length = ends - starts
    left = np.ones(starts.size, dtype=bool)  # a run is used once, as Slurm's loop zeroes it
    chosen: list[int] = []
    need = nodes
    while need > 0:
        sufficient = left & (length >= need)
        if sufficient.any():  # the tightest run that suffices (the first on ties)
            r = int(np.argmin(np.where(sufficient, free, np.inf)))
        else:  # none does: the largest (the first on ties)
            r = int(np.argmax(np.where(left, free, -np.inf)))
        left[r] = False
        run = usable[starts[r]:ends[r]]
        if need == 1:  # the last node: the tightest of the run
            chosen.append(int(run[np.argmin(counts[run])]))
            need = 0
        else:
            take = run[:need]
            chosen += take.tolist()
            need -= take.size
    return np.array(sorted(chosen), dtype=np.int64)


def cons_tres_fit(label: str) -> FirstFit:
    """The chooser of `slurm-reserving`: first fit's pick (the lowest free GPU indices on each
    node) on cons_tres's tightest fit of nodes. A job that must span nodes and names no count
    per node still takes the fewest nodes, emptiest first (FirstFit.pick), as before."""
    return FirstFit(label, nodes_for=tightest_fit_nodes, rule="cons_tres's tightest run of consecutive nodes")
