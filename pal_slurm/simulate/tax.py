"""The variability tax: how much of it a schedule could have avoided, and how much a policy
removes against a baseline, at what cost in waiting.

Why apart from metrics.py: the per-job tax is recorded by the simulators where they charge
a run time, and summed with the other run figures; what lives here needs a whole schedule
(the reassignment below) or two runs (the comparison), and would make the metrics module
about more than one run's outcomes.

Definitions (docs/simulation.md, "Variability tax"): a job's tax = gpus x nominal run time
x max(0, pace - 1), pace = the largest raw PerfVar of its class over its GPUs (1.0 = the
median GPU), locality apart.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass

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


@dataclass(frozen=True)
class TaxComparison:
    """A policy against the baseline on the same jobs: the tax it removed and the wait it added.

    `tax_removed` is 1 - tax(policy) / tax(baseline), 0.0 when the baseline paid no tax
    (nothing to remove; the policy's own tax is in its run). `added_wait_share` is the added
    wait over the baseline's mean wait, None when the baseline's jobs never waited (no share
    of nothing); never NaN, so it serialises as JSON."""

    tax_removed: float
    added_wait_s: float
    added_wait_share: float | None

    def as_dict(self) -> dict[str, float | None]:
        return {"tax_removed": self.tax_removed, "added_wait_s": self.added_wait_s,
                "added_wait_share": self.added_wait_share}


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
    wait_p = _mean_wait([p for p, _ in pairs])
    wait_b = _mean_wait([b for _, b in pairs])
    added = wait_p - wait_b
    return TaxComparison(tax_removed=1.0 - tax_p / tax_b if tax_b > 0 else 0.0, added_wait_s=added,
                         added_wait_share=added / wait_b if wait_b > 0 else None)


def _mean_wait(runs: Sequence[SimResult]) -> float:
    """Mean start - submit over every traced job of `runs` (0.0 with no jobs)."""
    jobs = sum(len(r.outcomes) for r in runs)
    return math.fsum(o.queue_delay for r in runs for o in r.outcomes) / jobs if jobs else 0.0
