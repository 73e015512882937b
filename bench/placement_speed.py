#!/usr/bin/env python3
"""Time the placer's decision for a whole cycle: `decide()` over up to 1,000 held jobs on 10,000 GPUs,
on a state that changes from one cycle to the next, for every policy of the table.

Target: the default policy's (pal-guard, placement.model.DEFAULT_POLICY) decision for one cycle
(1,000 held jobs, 10,000 GPUs) under 0.5 s median, wall time. Why: the placer decides once per
cycle for every held job it can steer, a burst holds up to 1,000, and the whole cycle must fit in
1 s (bench/placer_cycle.py times it); the decision gets half of it, the rest is reading Slurm,
writing the updates and the audit. The other policies are timed beside it for comparison, with
no target: the placer runs one of them only when configured to.

What is timed: `pal_slurm.placement.decide.decide` alone, the call the placer's place stage makes
(placer/cycle.py): the queue order (`slurm`, the placer's default), the window a policy can act
on, and `Policy.place`, with the placer's default knobs (lambda, waiting for better GPUs, noise).
Not timed: building the snapshot and the requests from Slurm's output, the updates and the audit
(bench/placer_cycle.py times those, with the decision, as one cycle).

The state: --nodes x --per-node GPUs (2,500 x 4), classes A-D with 4 slowdown levels each,
about half the GPUs free (scattered: nodes have 0-4 free), the busy ones held by running jobs with
known expected ends (what backfilling and waiting for better GPUs look at); --held jobs waiting
(1-4 GPUs on one node, 3 % on two nodes with the same slots on each, as the placer asks; classes
A-D; runtime estimates 30 min to 1 day; Slurm priorities in submit order). Between two cycles
(not timed) the state moves on as it does under the placer: the jobs the decision placed start
on their GPUs (expected end: now + their estimate) and leave the queue, --step seconds pass,
running jobs end (every one whose expected end has passed, then the soonest until --free-share
of the GPUs are free), jobs the placer does not hold take about 1 % of the free GPUs, and new
jobs arrive until --held wait again. So every decision sees other free GPUs, other releases and
a different queue, as the placer's do; none repeats the one before it.
Each policy runs --cycles timed cycles from the same seeded start (cycle 0 warms up and is not
counted: per-class tables, imports).

Prints per policy the median, p95 and slowest decision (wall time) and the median CPU time of
this thread (on a shared machine wall time includes waiting for a core), and what the decisions
saw and did: free GPUs; the window (the held jobs the policy can act on: those that fit and its
lookahead past the first that does not); jobs placed; jobs waiting on purpose for better GPUs.
Then the target, met or missed. Exit status 1 when the default policy's median is over the
target (--target-s); when --policy leaves the default policy out, no target is checked and it
says so.

Usage: bench/placement_speed.py [--nodes 2500] [--per-node 4] [--held 1000] [--cycles 10]
                                [--policy NAME,...] [--target-s 0.5] [--seed 7]
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pal_slurm.config import PlacerConfig  # noqa: E402
from pal_slurm.placement.decide import decide  # noqa: E402
from pal_slurm.placement.index import cluster_index  # noqa: E402
from pal_slurm.placement.model import (  # noqa: E402
    DEFAULT_POLICY,
    JOB_CLASSES,
    Cluster,
    Decision,
    JobRequest,
    PlacementContext,
    Snapshot,
)
from pal_slurm.placement.orders import get_order, queue_window  # noqa: E402
from pal_slurm.placement.policies import get_policy, policy_names  # noqa: E402
from targets import Targets  # noqa: E402

TARGET_S = 0.5
LEVELS = {"A": (0.95, 1.0, 1.06, 1.2), "B": (0.98, 1.0, 1.03, 1.1),
          "C": (0.98, 1.0, 1.03, 1.1), "D": (0.99, 1.0, 1.01, 1.02)}
ONE_NODE_SIZES = (1, 1, 1, 1, 2, 2, 2, 3, 4, 4)


def build_cluster(nodes: int, per_node: int, seed: int) -> Cluster:
    rng = random.Random(seed)
    n = nodes * per_node
    sf = {c: [rng.choice(v) for _ in range(n)] for c, v in LEVELS.items()}
    return Cluster.uniform(nodes, per_node, slowdown=sf)


class State:
    """The cluster between cycles: who runs where until when, and the queue of held jobs."""

    def __init__(self, cluster: Cluster, held: int, free_share: float, seed: int) -> None:
        self.cluster = cluster
        self.rng = random.Random(seed)
        self.held = held
        self.free_share = free_share
        self.now = 1_800_000_000.0
        self.next_id = 0
        self.running: dict[str, tuple[int, ...]] = {}
        self.ends: dict[str, float] = {}
        self.queue: list[JobRequest] = []
        taken = set()
        for ids in cluster.node_gpus:  # about half of each node's GPUs busy, scattered
            busy = [g for g in ids if self.rng.random() >= free_share]
            while busy:
                size = min(self.rng.choice((1, 1, 2)), len(busy))
                self._start(tuple(busy[:size]), self.rng.uniform(60.0, 86_400.0))
                taken.update(busy[:size])
                busy = busy[size:]
        self.free = set(range(cluster.size)) - taken
        self._arrive()

    def _id(self, prefix: str) -> str:
        self.next_id += 1
        return f"{prefix}{self.next_id}"

    def _start(self, gpus: tuple[int, ...], runtime_s: float, job_id: str | None = None) -> None:
        jid = job_id or self._id("r")
        self.running[jid] = gpus
        self.ends[jid] = self.now + runtime_s

    def _arrive(self) -> None:
        per_node = self.cluster.max_gpus_per_node
        while len(self.queue) < self.held:
            jid = self._id("j")
            cls = self.rng.choice(JOB_CLASSES)
            estimate = self.rng.uniform(1_800.0, 86_400.0)
            common = dict(id=jid, job_class=cls, submit_time=self.now - self.rng.uniform(0.0, 60.0),
                          remaining_s=estimate, priority=float(4_000_000_000 - self.next_id))
            if per_node >= 2 and self.rng.random() < 0.03:  # two nodes, the same slots on each
                each = self.rng.choice(sorted({2, per_node}))
                job = JobRequest(gpus=2 * each, gpus_per_node=each, min_nodes=2, max_nodes=2, same_slots=True, **common)
            else:
                job = JobRequest(gpus=min(self.rng.choice(ONE_NODE_SIZES), per_node), max_nodes=1, **common)
            self.queue.append(job)

    def snapshot(self) -> Snapshot:
        return Snapshot(cluster=self.cluster, free=frozenset(self.free), running=dict(self.running), now=self.now,
                        expected_end=dict(self.ends))

    def advance(self, decision: Decision, step_s: float) -> None:
        """The next cycle's state: the placed jobs start, time passes, jobs end, others take
        GPUs, new jobs arrive."""
        placed = decision.as_dict()
        estimates = {j.id: j.remaining_s for j in self.queue if j.id in placed}
        for jid, gpus in placed.items():
            self.free.difference_update(gpus)
            self._start(tuple(gpus), estimates[jid], job_id=jid)
        self.queue = [j for j in self.queue if j.id not in placed]
        self.now += step_s
        want_free = int(self.free_share * self.cluster.size)
        for jid, end in sorted(self.ends.items(), key=lambda kv: kv[1]):
            if end > self.now and len(self.free) >= want_free:
                break
            self.free.update(self.running.pop(jid))
            del self.ends[jid]
        # jobs the placer does not hold (classes it leaves to Slurm, other partitions) take GPUs too
        by_node: dict[int, list[int]] = {}
        for g in self.free:
            by_node.setdefault(self.cluster.node_of[g], []).append(g)
        nodes = sorted(by_node)
        for node in self.rng.sample(nodes, k=min(len(nodes), max(1, len(self.free) // 100 // 2))):
            gpus = sorted(by_node[node])[: self.rng.choice((1, 2))]
            self.free.difference_update(gpus)
            self._start(tuple(gpus), self.rng.uniform(600.0, 86_400.0))
        self._arrive()


def run_policy(name: str, cluster: Cluster, args: argparse.Namespace, cfg: PlacerConfig) -> dict[str, float]:
    policy = get_policy(name)
    order = get_order(cfg.order)
    max_wait = min(cfg.max_wait_s if cfg.max_wait_s is not None else math.inf, cfg.max_hold_s)
    ctx = PlacementContext(locality_penalty=cfg.locality_penalty, wait_fraction=cfg.wait_fraction, noise=cfg.noise,
                           max_wait_s=max_wait, rng=random.Random(1))
    state = State(cluster, args.held, args.free_share, args.seed + 1)
    times: list[float] = []
    cpu: list[float] = []
    window = placed = waits = free = 0.0
    for cycle in range(args.cycles + 1):
        snap = state.snapshot()
        queue = list(state.queue)
        acted_on = len(queue_window(order(queue), len(snap.free), policy.lookahead))  # what decide() windows
        t, c = time.perf_counter(), time.thread_time()
        decision = decide(policy, order, snap, queue, ctx)
        dt, dc = time.perf_counter() - t, time.thread_time() - c
        if decision.refused:
            raise SystemExit(f"placement_speed: {name} broke a job's shape: {decision.refused[:3]}")
        if cycle:  # cycle 0 warms up
            times.append(dt)
            cpu.append(dc)
            window += acted_on
            placed += len(decision.assignments)
            waits += len(decision.waits)
            free += len(snap.free)
        state.advance(decision, args.step)
    n = len(times)
    times.sort()
    return {"median": statistics.median(times), "p95": times[min(n - 1, math.ceil(0.95 * n) - 1)],
            "max": times[-1], "cpu": statistics.median(cpu), "window": window / n, "placed": placed / n, "waits": waits / n, "free": free / n}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=2500)
    ap.add_argument("--per-node", type=int, default=4)
    ap.add_argument("--held", type=int, default=1000, help="held jobs waiting at every decision [1000]")
    ap.add_argument("--cycles", type=int, default=10, help="timed cycles per policy, after one warm-up cycle [10]")
    ap.add_argument("--policy", default=",".join(policy_names()), help="comma-separated policies [all of them]")
    ap.add_argument("--step", type=float, default=60.0, help="seconds between two cycles' states [60]")
    ap.add_argument("--free-share", type=float, default=0.5, help="share of the GPUs free before a decision [0.5]")
    ap.add_argument("--target-s", type=float, default=TARGET_S, help=f"the target, median seconds [{TARGET_S}]")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    policies = [p for p in args.policy.split(",") if p]
    unknown = [p for p in policies if p not in policy_names()]
    if unknown or not policies:
        ap.error(f"unknown policy {unknown}; known: {', '.join(policy_names())}")
    if args.cycles < 1 or args.held < 1 or not 0 < args.free_share < 1 or args.per_node < 1 or args.nodes < 1:
        ap.error("--cycles, --held, --nodes and --per-node must be at least 1, --free-share in (0, 1)")

    cluster = build_cluster(args.nodes, args.per_node, args.seed)
    t0 = time.perf_counter()
    cluster_index(cluster).table("A")
    print(f"cluster: {cluster.size} GPUs on {args.nodes} nodes, {args.held} held jobs at every decision, "
          f"{args.cycles} timed cycles per policy ({args.step:g} s apart); index build "
          f"{1000 * (time.perf_counter() - t0):.1f} ms (once per cluster, not counted)")
    cfg = PlacerConfig()
    print(f"queue order {cfg.order}, lambda {cfg.locality_penalty}, wait fraction {cfg.wait_fraction}, "
          f"noise {cfg.noise} (the placer's defaults; its default policy is {DEFAULT_POLICY})")
    print(f"{'policy':<18}{'median s':>9}{'p95 s':>8}{'max s':>8}{'CPU s':>8}{'free GPUs':>11}{'window':>8}{'placed':>8}"
          f"{'waits':>7}")
    results: dict[str, dict[str, float]] = {}
    for name in policies:
        r = results[name] = run_policy(name, cluster, args, cfg)
        print(f"{name:<18}{r['median']:>9.3f}{r['p95']:>8.3f}{r['max']:>8.3f}{r['cpu']:>8.3f}{r['free']:>11.0f}{r['window']:>8.0f}"
              f"{r['placed']:>8.1f}{r['waits']:>7.1f}", flush=True)
    targets = Targets()
    if DEFAULT_POLICY in results:
        targets.check(f"{DEFAULT_POLICY} (the default policy): median decision for {args.held} held jobs on "
                      f"{cluster.size} GPUs", results[DEFAULT_POLICY]["median"], "<", args.target_s, "s")
    else:
        print(f"no target checked: it is the default policy's ({DEFAULT_POLICY}), which --policy left out")
    return targets.exit_status()


if __name__ == "__main__":
    sys.exit(main())
