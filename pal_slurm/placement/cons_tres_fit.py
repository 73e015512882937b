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
"""

from __future__ import annotations

import numpy as np

from pal_slurm.placement.first_fit import FirstFit


def consecutive_runs(usable: np.ndarray) -> list[list[int]]:
    """Runs of consecutive True indices in `usable`."""
    runs: list[list[int]] = []
    for v in np.flatnonzero(usable).tolist():
        if runs and runs[-1][-1] == v - 1:
            runs[-1].append(v)
        else:
            runs.append([v])
    return runs


def tightest_fit_nodes(counts: np.ndarray, per_node: int, nodes: int) -> np.ndarray | None:
    """cons_tres's `nodes` nodes with at least `per_node` free GPUs each (see the module's rule)."""
    runs = consecutive_runs(counts >= per_node)
    if sum(len(r) for r in runs) < nodes:
        return None
    chosen: list[int] = []
    need = nodes
    while need > 0:
        best: list[int] | None = None
        best_sufficient, best_free = False, 0
        for run in runs:
            if not run:
                continue
            free = int(counts[run].sum())
            sufficient = len(run) >= need
            if (best is None or (sufficient and not best_sufficient)
                    or (sufficient and best_sufficient and free < best_free)
                    or (not sufficient and not best_sufficient and free > best_free)):
                best, best_sufficient, best_free = run, sufficient, free
        assert best is not None  # enough usable nodes remain, checked above
        if need == 1:
            chosen.append(min(best, key=lambda v: (int(counts[v]), v)))
            need = 0
        else:
            take = best[:need]
            chosen += take
            need -= len(take)
        best.clear()  # a run is used once, as Slurm's loop zeroes it
    return np.array(sorted(chosen), dtype=np.int64)


class ConsTresFit(FirstFit):
    """The chooser of `slurm-reserving` (not a registered policy: it has no queue treatment)."""

    name = "cons-tres-fit"
    description = "cons_tres's node choice: the tightest run of consecutive nodes that suffices"
    rule = "cons_tres's tightest run of consecutive nodes"

    def nodes_for(self, counts: np.ndarray, per_node: int, nodes: int) -> np.ndarray | None:
        """cons_tres's tightest fit; a job that must span nodes and names no count per node still takes the
        fewest nodes, emptiest first (FirstFit.pick), as before."""
        return tightest_fit_nodes(counts, per_node, nodes)
