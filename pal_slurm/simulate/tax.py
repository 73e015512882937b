"""The variability tax: how much of it a schedule could have avoided, and how much a policy
removes against a baseline, at what cost in waiting.

Why apart from metrics.py: the per-job tax is recorded by the simulators where they charge
a run time, and summed with the other run figures; what lives here needs a whole schedule
(the reassignment below) or two runs (the comparison), and would make the metrics module
about more than one run's outcomes.

Definitions (docs/simulation.md, "Variability tax"): a job's tax = gpus x nominal run time
x max(0, pace - 1), pace = the largest raw PerfVar of its class over its GPUs (1.0 = the
median GPU), locality apart.

Two references put a run's tax in proportion:
- `best_free_tax`: the same schedule with every job on the best GPUs free when it started
  (what a GPU chooser could remove without moving a start; no bound, see its docstring);
- `unavoidable_tax`: the tax every job pays even alone on the empty cluster in its shape,
  a true floor for any schedule that keeps the jobs' shapes: half of any fleet is slower
  than its median, and a job that needs half the nodes takes some of them.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from pal_slurm.placement.model import Cluster
from pal_slurm.simulate.metrics import JobOutcome, variability_gpu_s
from pal_slurm.simulate.result import SimResult


def best_free_tax(outcomes: Sequence[JobOutcome], cluster: Cluster) -> float:
    """The tax the schedule's own timeline allows when every job gets the best GPUs free.

    Every job keeps its start and finish time; jobs are taken in start order (ties in the
    order given) and each is given the GPUs of lowest PerfVar of its class among those no
    job running at that moment holds in this reassignment; the result is the tax those
    GPUs would have charged. A job ending at t frees its GPUs for a job starting at t.

    A reference, not a bound (hence its name), for two reasons:
    - durations are kept from the actual schedule, though a job on other GPUs would have run
      for another time (and so would have freed them at another time);
    - the greedy choice is not an optimum: giving an early job the fastest GPUs can leave a
      later, larger job slower ones than it actually got, so on some schedules this figure
      is above the actual tax (a test shows one). On the schedules of the simulators it is
      normally well below, and the gap is the tax a GPU chooser could still remove without
      moving a single start time.
    Locality and node shapes are ignored, as in the tax itself: the count of GPUs held at any
    moment is the schedule's own, so the free GPUs always suffice.

    Outcomes need `gpus`, `job_class` and `nominal_s`; `gpu_ids` is not read (event-mode
    outcomes carry it; round mode has no one set of GPUs per job and reports no reference).
    """
    pv = {key: cluster.pv(key) for key in {cluster.class_key(o.job_class) for o in outcomes}}
    # one heap of (PerfVar, GPU, version) per class; an entry is current while its GPU is free
    # and has not been freed again since (the version), so taking a GPU needs no search
    heaps = {key: [(v[g], g, 0) for g in range(cluster.size)] for key, v in pv.items()}
    for h in heaps.values():
        heapq.heapify(h)
    free = [True] * cluster.size
    version = [0] * cluster.size
    holding: list[tuple[float, int, tuple[int, ...]]] = []  # (finish, position, GPUs) of jobs given GPUs
    total = 0.0
    for pos in sorted(range(len(outcomes)), key=lambda i: outcomes[i].start_time):
        o = outcomes[pos]
        while holding and holding[0][0] <= o.start_time:
            for g in heapq.heappop(holding)[2]:
                free[g] = True
                version[g] += 1
                for key, h in heaps.items():
                    heapq.heappush(h, (pv[key][g], g, version[g]))
        key = cluster.class_key(o.job_class)
        h = heaps[key]
        taken: list[int] = []
        pace = 1.0
        while len(taken) < o.gpus:
            if not h:
                raise ValueError(f"job {o.job_id} starts at {o.start_time} with {o.gpus} GPUs, more than are "
                                 f"free then on {cluster.size} GPUs: these outcomes are not one schedule")
            pace, g, ver = heapq.heappop(h)
            if free[g] and ver == version[g]:
                free[g] = False
                taken.append(g)
        total += max(0.0, variability_gpu_s(o.gpus, o.nominal_s, pace))
        heapq.heappush(holding, (o.finish_time, pos, tuple(taken)))
    return total


def unavoidable_tax(outcomes: Sequence[JobOutcome], cluster: Cluster,
                    per_node: Mapping[str, int | None]) -> float:
    """The tax no schedule that keeps the jobs' shapes can avoid: each job's tax on the
    fastest GPUs of the *empty* cluster that its shape allows.

    A job of `gpus` GPUs with `per_node[job_id]` = t GPUs on each of k = gpus / t nodes runs
    at the pace of its slowest GPU, so on any k nodes its pace is at least the k-th smallest,
    over nodes, of each node's t-th fastest GPU of its class; with no shape (None, or a
    count t does not divide) at least the gpus-th fastest GPU of the cluster. Summed as
    gpus x nominal x max(0, floor pace - 1), as the tax itself.

    Why a floor and not an optimum: it ignores every other job (the cluster is empty for
    each) and the same-slot rule of steered multi-node jobs (any t GPUs of a node), so it
    is below what any schedule can pay, and it depends only on the jobs and the fleet: two
    policies run on the same jobs in the same shapes share it, so "the tax a policy removed
    of the avoidable part" (baseline tax - floor) compares them on what could be removed at
    all. A job missing from `per_node` counts as shapeless (the weakest floor).
    """
    floors: dict[tuple[str, int, int | None], float] = {}
    matrices: dict[str, np.ndarray] = {}
    total = 0.0
    for o in outcomes:
        if o.gpus <= 0 or o.nominal_s <= 0:
            continue
        key = cluster.class_key(o.job_class)
        t = per_node.get(o.job_id)
        if t is not None and (t <= 0 or o.gpus % min(t, o.gpus)):
            t = None
        memo = (key, o.gpus, t)
        if memo not in floors:
            floors[memo] = _floor_pace(cluster, key, o.gpus, t, matrices)
        if math.isfinite(floors[memo]):  # a job larger than the cluster bounds nothing
            total += max(0.0, variability_gpu_s(o.gpus, o.nominal_s, floors[memo]))
    return total


def _floor_pace(cluster: Cluster, key: str, gpus: int, per_node: int | None,
                matrices: dict[str, np.ndarray]) -> float:
    """The lowest pace a job of this class and shape can have on the empty cluster
    (`unavoidable_tax`); a shape no set of nodes has is taken as shapeless, and inf is a
    job larger than the cluster."""
    pv = np.asarray(cluster.pv(key), dtype=np.float64)
    shapeless = float(np.partition(pv, gpus - 1)[gpus - 1]) if gpus <= pv.size else math.inf
    if per_node is None:
        return shapeless
    t = min(per_node, gpus)
    k = gpus // t
    mat = matrices.get(key)
    if mat is None:  # nodes x slots, sorted fastest first, inf where a node has fewer GPUs
        width = max(cluster.max_gpus_per_node, 1)
        mat = np.full((len(cluster.node_gpus), width), np.inf)
        for v, ids in enumerate(cluster.node_gpus):
            mat[v, :len(ids)] = pv[list(ids)]
        mat.sort(axis=1)
        matrices[key] = mat
    if t > mat.shape[1] or k > mat.shape[0]:
        return shapeless
    per = mat[:, t - 1]  # each node's t-th fastest GPU: the best pace t GPUs there can have
    best = float(np.partition(per, k - 1)[k - 1])
    return best if math.isfinite(best) else shapeless


@dataclass(frozen=True)
class TaxComparison:
    """A policy against the baseline on the same jobs: the tax it removed and the wait it added.

    `tax_removed` is 1 - tax(policy) / tax(baseline), 0.0 when the baseline paid no tax
    (nothing to remove; the policy's own tax is in its run). `avoidable_tax_removed` is the
    same share of the tax above the floor no schedule can go below (`unavoidable_tax`):
    (tax(baseline) - tax(policy)) / (tax(baseline) - floor), None where the baseline runs
    carry no floor (round mode) or paid no more than it. `added_wait_share` is the added
    wait over the baseline's mean wait, None when the baseline's jobs never waited (no share
    of nothing); never NaN, so it serialises as JSON."""

    tax_removed: float
    added_wait_s: float
    added_wait_share: float | None
    avoidable_tax_removed: float | None = None

    def as_dict(self) -> dict[str, float | None]:
        return {"tax_removed": self.tax_removed, "avoidable_tax_removed": self.avoidable_tax_removed,
                "added_wait_s": self.added_wait_s, "added_wait_share": self.added_wait_share}


def compare_tax(policy: SimResult, baseline: SimResult) -> TaxComparison:
    """`policy` against `baseline`, two runs of one trace."""
    if policy.trace != baseline.trace:
        raise ValueError(f"runs of different traces: {policy.trace!r} and {baseline.trace!r}")
    return pooled_comparison([(policy, baseline)])


def pooled_comparison(pairs: Sequence[tuple[SimResult, SimResult]]) -> TaxComparison:
    """(policy run, baseline run) pairs, one per trace, pooled as one population of jobs:
    taxes summed over traces, mean waits over all their jobs. Pooling, not a mean of
    per-trace figures, so that a short trace whose baseline paid almost no tax cannot swing
    the result."""
    tax_p = math.fsum(p.metrics.tax_gpu_s for p, _ in pairs)
    tax_b = math.fsum(b.metrics.tax_gpu_s for _, b in pairs)
    floors = [b.tax_unavoidable_gpu_s for _, b in pairs]
    avoidable = tax_b - math.fsum(f for f in floors if f is not None) if None not in floors else 0.0
    wait_p = _mean_wait([p for p, _ in pairs])
    wait_b = _mean_wait([b for _, b in pairs])
    added = wait_p - wait_b
    return TaxComparison(tax_removed=1.0 - tax_p / tax_b if tax_b > 0 else 0.0, added_wait_s=added,
                         added_wait_share=added / wait_b if wait_b > 0 else None,
                         avoidable_tax_removed=(tax_b - tax_p) / avoidable if avoidable > 0 else None)


def _mean_wait(runs: Sequence[SimResult]) -> float:
    """Mean start - submit over every traced job of `runs` (0.0 with no jobs)."""
    jobs = sum(len(r.outcomes) for r in runs)
    return math.fsum(o.queue_delay for r in runs for o in r.outcomes) / jobs if jobs else 0.0
