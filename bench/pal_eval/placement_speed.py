"""The placer's decision for a whole cycle timed for every policy of the table, on a state that
moves on between cycles as it does under the placer (bench/placement_speed.py)."""

from __future__ import annotations

import argparse
import math
import random
import statistics
import time

from pal_eval.targets import Targets
from pal_slurm.config import PlacerConfig
from pal_slurm.placement.decide import decide
from pal_slurm.placement.index import cluster_index
from pal_slurm.placement.model import (
    DEFAULT_POLICY,
    JOB_CLASSES,
    Cluster,
    Decision,
    JobRequest,
    PlacementContext,
    Snapshot,
)
from pal_slurm.placement.orders import get_order, queue_window
from pal_slurm.placement.policies import get_policy

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


def run(args: argparse.Namespace, policies: list[str]) -> int:
    """args: bench/placement_speed.py's options; `policies` the ones to time."""
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

