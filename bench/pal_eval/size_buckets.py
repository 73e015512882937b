"""Who gains and who pays, by job size: the no-harm matrix's per-size figures (bench/vs_slurm.py).

Why by size: a policy can win on the average while the jobs that hold most of the GPU time (a
few big ones) wait longer, or while the crowd of small jobs pays for the big ones' better
GPUs. The average JCT hides both, so each run is also cut into GPU-count buckets (1, 2-8,
9-64, more), each bucket's mean JCT compared arm against arm, and two figures are kept that
the issue of today's clusters asks about:

- **slow multi-node share**: of the jobs that span nodes, the share that held at least one
  GPU at or above `SLOW_PERFVAR` (1.3x the model's median, raw PerfVar of the job's class).
  A synchronous job runs at its slowest GPU's pace, so this is what variability-aware
  placement should drive down for big jobs;
- **largest job's wait**: the queue wait of the biggest job of the trace (the first of them
  when several share the size), the job most likely to be starved by backfilling past it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

#: (label, fewest GPUs, most GPUs) of each bucket, in order
BUCKETS: tuple[tuple[str, int, float], ...] = (("1", 1, 1), ("2-8", 2, 8), ("9-64", 9, 64), (">64", 65, math.inf))
#: a GPU this much slower than its model's median is an outlier a big job should not hold
SLOW_PERFVAR = 1.3


def bucket_of(gpus: int) -> str:
    """The bucket label of a job of `gpus` GPUs."""
    return next(label for label, lo, hi in BUCKETS if lo <= gpus <= hi)


def run_sizes(outcomes: Iterable[Any], cluster: Any) -> dict[str, Any]:
    """One run's per-bucket JCT sums and counts, its slow multi-node share and its largest job's
    wait, from the run's outcomes (`JobOutcome`s with gpu_ids and job_class) on `cluster`."""
    sums: dict[str, list[float]] = {label: [0.0, 0] for label, _, _ in BUCKETS}
    multi = slow = 0
    largest: tuple[int, float, float] = (0, 0.0, 0.0)  # (GPUs, -submit, wait) of the biggest, first arrived
    node_of = cluster.node_of
    for o in outcomes:
        s = sums[bucket_of(o.gpus)]
        s[0] += o.jct
        s[1] += 1
        if len({node_of[g] for g in o.gpu_ids}) > 1:
            multi += 1
            pv = cluster.perfvar.get(o.job_class or "A", ())
            slow += any(pv[g] >= SLOW_PERFVAR for g in o.gpu_ids) if pv else 0
        if (o.gpus, -o.submit_time) > largest[:2]:
            largest = (o.gpus, -o.submit_time, o.queue_delay)
    return {"buckets": sums, "multi_node": multi, "slow_multi_node": slow, "largest_wait_s": largest[2]}


def cell_bucket_ratios(policy_runs: Sequence[Mapping[str, Any]], base_runs: Sequence[Mapping[str, Any]]
                       ) -> dict[str, float]:
    """Per bucket, the mean over the shaken copies of the bucket's mean JCT, policy over base
    (buckets without jobs left out)."""
    out: dict[str, float] = {}
    for label, _, _ in BUCKETS:
        p = [r["sizes"]["buckets"][label] for r in policy_runs]
        b = [r["sizes"]["buckets"][label] for r in base_runs]
        if all(n for _, n in p) and all(n for _, n in b):
            out[label] = (sum(s / n for s, n in p) / len(p)) / (sum(s / n for s, n in b) / len(b))
    return out


def slow_share(runs: Sequence[Mapping[str, Any]]) -> tuple[int, int]:
    """(multi-node jobs that held a slow GPU, multi-node jobs) over the runs."""
    return sum(r["sizes"]["slow_multi_node"] for r in runs), sum(r["sizes"]["multi_node"] for r in runs)


def fleet_sizes(cells: Iterable[Mapping[str, Any]], policy: str, base: str) -> dict[str, Any]:
    """One fleet's per-size row: each bucket's geomean over the cells of its ratio, the slow
    multi-node shares of both arms, and the largest job's mean wait in each."""
    from pal_slurm.simulate.metrics import geomean

    per: dict[str, list[float]] = {label: [] for label, _, _ in BUCKETS}
    slow = {policy: [0, 0], base: [0, 0]}
    largest = {policy: [], base: []}
    for r in cells:
        for label, q in cell_bucket_ratios(r["runs"][policy], r["runs"][base]).items():
            per[label].append(q)
        for arm in (policy, base):
            s, m = slow_share(r["runs"][arm])
            slow[arm][0] += s
            slow[arm][1] += m
            largest[arm].extend(x["sizes"]["largest_wait_s"] for x in r["runs"][arm])
    return {
        "buckets": {label: geomean(v) for label, v in per.items() if v},
        "slow_multi_node_share": {arm: (s / m if m else None) for arm, (s, m) in slow.items()},
        "multi_node_jobs": {arm: m for arm, (_, m) in slow.items()},
        "largest_job_wait_s": {arm: (sum(v) / len(v) if v else None) for arm, v in largest.items()},
    }
