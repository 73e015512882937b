#!/usr/bin/env python3
"""Time one `place()` call for ONE job on a 10,000-GPU cluster, for every registered policy.

Target: under 5 ms median for every policy and job size (a placer cycle decides for up to 1,000 held jobs).
The cluster: 2,500 nodes x 4 GPUs, every class A-D with 4 distinct slowdown factors,
about half the GPUs free (seeded, scattered, so nodes have 0-4 free GPUs), the busy ones
held by running jobs with known expected ends (what backfilling looks at). Jobs of 1, 2,
4 and 8 GPUs (8 spans nodes). Each cell is `--repeat` calls on the same snapshot (the
policy and the cluster's index are built before timing; the index build is timed once,
separately). Usage: bench/placement_speed.py [--nodes 2500] [--per-node 4] [--repeat 200]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pal_slurm.placement.index import cluster_index  # noqa: E402
from pal_slurm.placement.model import Cluster, JobRequest, PlacementContext, Snapshot  # noqa: E402
from pal_slurm.placement.policies import POLICIES, get_policy  # noqa: E402

SIZES = (1, 2, 4, 8)
TARGET_MS = 5.0


def build_cluster(nodes: int, per_node: int, seed: int) -> Cluster:
    rng = random.Random(seed)
    n = nodes * per_node
    levels = {"A": (0.95, 1.0, 1.06, 1.2), "B": (0.98, 1.0, 1.03, 1.1),
              "C": (0.98, 1.0, 1.03, 1.1), "D": (0.99, 1.0, 1.01, 1.02)}
    sf = {c: [rng.choice(v) for _ in range(n)] for c, v in levels.items()}
    return Cluster.uniform(nodes, per_node, slowdown=sf)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=2500)
    ap.add_argument("--per-node", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=200)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()

    cluster = build_cluster(args.nodes, args.per_node, args.seed)
    rng = random.Random(args.seed + 1)
    free = frozenset(g for g in range(cluster.size) if rng.random() < 0.5)
    # the busy GPUs of each node belong to one running job with a known expected end
    running: dict[str, tuple[int, ...]] = {}
    for node, ids in enumerate(cluster.node_gpus):
        busy = tuple(g for g in ids if g not in free)
        if busy:
            running[f"r{node}"] = busy
    ends = {jid: rng.uniform(60.0, 86400.0) for jid in running}
    snap = Snapshot(cluster=cluster, free=free, running=running, now=0.0, expected_end=ends)
    t0 = time.perf_counter()
    cluster_index(cluster).table("A")
    print(f"cluster: {cluster.size} GPUs on {args.nodes} nodes, {len(free)} free; "
          f"index build {1000 * (time.perf_counter() - t0):.1f} ms (once per cluster)")
    print(f"{'policy':<18}" + "".join(f"{f'{n} GPU median/p95 ms':>24}" for n in SIZES))
    worst = 0.0
    for name in POLICIES:
        policy = get_policy(name)
        cells = []
        for n in SIZES:
            queue = [JobRequest(id="j", gpus=n, job_class="A", submit_time=0.0, remaining_s=3600.0)]
            ctx = PlacementContext(rng=random.Random(1))
            policy.place(snap, queue, ctx)  # warm-up (per-class tables)
            times = []
            for _ in range(args.repeat):
                t = time.perf_counter()
                decision = policy.place(snap, queue, ctx)
                times.append(1000 * (time.perf_counter() - t))
            assert len(decision.assignments) == 1 and len(decision.assignments[0].gpus) == n
            times.sort()
            med, p95 = statistics.median(times), times[int(0.95 * (len(times) - 1))]
            worst = max(worst, med)
            cells.append(f"{med:>11.3f} / {p95:<9.3f}")
        print(f"{name:<18}" + "".join(f"{c:>24}" for c in cells))
    ok = worst < TARGET_MS
    print(f"worst median {worst:.3f} ms: {'OK' if ok else 'OVER'} (target < {TARGET_MS} ms)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
