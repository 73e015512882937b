"""The cluster as the placer sees it in one cycle: the steerable GPU slots, which are free, and which
running jobs hold the others (pure).

Why apart: the view is built once per cycle from what Slurm said about nodes and jobs, and
everything after it reads it (request shapes, the policy, the updates). Its per-node arrays
and parse caches are what keep a cycle over 1,000 held jobs and 1,250 nodes fast
(bench/placer_cycle.py). Pure like the placer's other rules (see pal_slurm.placer.shapes).

Rules (docs/admin-guide.md, "What the placer touches"):
- Only GPUs whose GRES carries per-slot types are steerable; a node without them is not in the view.
- GPUs promised to jobs we released that have not started yet count as taken, so two
  jobs are never steered onto one slot; so do GPUs a holder job waits for (a GPU going out of
  service: `pal gpus quarantine`). A job that waits for something other than GPUs
  (a begin time, a dependency, a hold) keeps its placement, but not its slots.
- A GPU we know nothing about gets the worst factor of its class: unknown GPUs must not
  attract sensitive jobs (placement.variability.worst_factor, the rule the simulator's
  loader applies too).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property, lru_cache

import numpy as np

from pal_slurm.placement.model import Cluster, GpuRef
from pal_slurm.placement.variability import GpuVariability, worst_factor
from pal_slurm.placer.holds import is_placed_by_pal
from pal_slurm.slurm.gresconf import natural_key as _natural
from pal_slurm.slurm.gresconf import slot_of_type
from pal_slurm.slurm.hostlist import expand_nodes
from pal_slurm.slurm.model import Slot, SlurmJob, SlurmNode
from pal_slurm.slurm.quarantine_model import is_holder
from pal_slurm.slurm.tres import parsed_gres_alloc, parsed_tres


@dataclass(frozen=True)
class View:
    """The placement problem of one cycle: the steerable GPUs, which are free, and which
    running jobs hold the others (job id -> GPU ids, for the policy's expected releases)."""

    cluster: Cluster
    slots: tuple[Slot, ...]
    free: frozenset[int]
    node_index: Mapping[str, int]
    nodes: Mapping[str, SlurmNode]
    running: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    #: GPUs busy in the nodes' read that no running job in the (later) jobs' read holds, nor
    #: a job we placed is promised: being given back, mostly (see `ProblemBuilder.releasing`)
    orphaned: frozenset[int] = frozenset()

    @cached_property
    def table(self) -> NodeTable:
        """The per-node facts as arrays, built once per cycle (see NodeTable)."""
        return NodeTable(self)


class NodeTable:
    """A view's nodes as arrays (index = the cluster's node index), so each held job's
    allowed nodes are a few vector operations instead of a Python loop over every node:
    1,000 held jobs x 1,250 nodes took seconds per cycle that way (bench/placer_cycle.py).

    Equal allowed sets come back as one frozenset object, so the policy layer's per-set
    caches (FreeState.node_mask) find them by identity instead of comparing big sets."""

    def __init__(self, view: View) -> None:
        cluster = view.cluster
        nodes = [view.nodes[n] for n in cluster.node_names]
        self._nodes = nodes
        self.schedulable = np.array([n.schedulable for n in nodes], dtype=bool)
        self.busy = np.array([n.alloc_cpus > 0 for n in nodes], dtype=bool)
        self.free_cpus = np.array([n.free_cpus for n in nodes], dtype=np.int64)
        self.free_memory_mb = np.array([n.free_memory_mb for n in nodes], dtype=np.int64)
        self.cpus = np.array([n.cpus for n in nodes], dtype=np.int64)
        self.memory_mb = np.array([n.real_memory_mb for n in nodes], dtype=np.int64)
        self.gpus = np.array([len(ids) for ids in cluster.node_gpus], dtype=np.int64)
        node_of = np.asarray(cluster.node_of, dtype=np.int64)
        free = np.fromiter(view.free, dtype=np.int64, count=len(view.free))
        self.free_gpus = np.bincount(node_of[free], minlength=len(nodes)).astype(np.int64)
        self._partition: dict[str, np.ndarray] = {}
        self._feature: dict[str, np.ndarray] = {}
        self._sets: dict[bytes, frozenset[int]] = {}
        self._masks: dict[tuple[object, ...], np.ndarray] = {}

    def partition(self, name: str) -> np.ndarray:
        m = self._partition.get(name)
        if m is None:
            m = self._partition[name] = np.array([name in n.partitions for n in self._nodes], dtype=bool)
        return m

    def feature(self, name: str) -> np.ndarray:
        m = self._feature.get(name)
        if m is None:
            m = self._feature[name] = np.array([name in n.active_features for n in self._nodes], dtype=bool)
        return m

    def as_set(self, mask: np.ndarray) -> frozenset[int]:
        key = np.packbits(mask).tobytes()
        out = self._sets.get(key)
        if out is None:
            out = self._sets[key] = frozenset(np.flatnonzero(mask).tolist())
        return out


def build_view(nodes: Sequence[SlurmNode], jobs: Sequence[SlurmJob],
               factors: Mapping[tuple[str, int], GpuVariability], classes: Sequence[str],
               now: float | None = None) -> View:
    """Steerable GPUs (nodes whose GPUs carry per-slot types), their factors, and which are free.

    Free is what the nodes' gres_used leaves, less the GPUs of every running job (the nodes are
    read before the jobs: a job that started in between shows in one read only) and the slots
    promised to the jobs we placed (`promised_slots`, as of `now`). A job that ended in between
    leaves its GPUs busy and held by nobody: `orphaned`."""
    slots: list[Slot] = []
    node_names: list[str] = []
    gpus: list[GpuRef] = []
    free: list[int] = []
    busy_ids: list[int] = []  # GPUs the nodes' read shows in use
    for node in sorted(nodes, key=lambda n: _natural(n.name)):
        mine = node_slots(node.gres)
        if not mine:
            continue
        idx = len(node_names)
        node_names.append(node.name)
        busy = _used_types(node.gres_used)
        schedulable = node.schedulable
        for k, (minor, gtype) in enumerate(mine):
            if schedulable and gtype not in busy:
                free.append(len(slots))
            elif schedulable and gtype in busy:  # a drained node's GPUs come back to nobody
                busy_ids.append(len(slots))
            gpus.append(GpuRef(id=len(slots), node=idx, slot=k))
            slots.append(Slot(node.name, minor, gtype))
    promised = promised_slots(jobs, now)
    if promised:
        free = [i for i in free if (slots[i].node, slots[i].gres_type) not in promised]
    by_slot = {(s.node, s.gres_type): i for i, s in enumerate(slots)}
    running = running_gpus(jobs, by_slot)
    taken = {g for held in running.values() for g in held}
    if running:
        free = [i for i in free if i not in taken]
    orphaned = frozenset(g for g in busy_ids if g not in taken
                         and (slots[g].node, slots[g].gres_type) not in promised)
    # a GPU we know nothing about gets the worst factor of its class (worst_factor); worked out
    # only when some GPU needs it (a scan of every factor)
    worst: dict[tuple[str, str], float] = {}

    def fallback(kind: str, c: str) -> float:
        if (kind, c) not in worst:
            worst[(kind, c)] = worst_factor(getattr(v, kind).get(c) for v in factors.values())
        return worst[(kind, c)]

    known = [factors.get((s.node, s.minor)) for s in slots]
    sf = {c: tuple(float(x) if v is not None and (x := v.slowdown.get(c)) is not None else fallback("slowdown", c)
                   for v in known) for c in classes}
    pv = {c: tuple(float(x) if v is not None and (x := v.perfvar.get(c)) is not None else fallback("perfvar", c)
                   for v in known) for c in classes}
    cluster = Cluster(node_names=tuple(node_names), gpus=tuple(gpus), slowdown=sf, perfvar=pv)
    return View(cluster=cluster, slots=tuple(slots), free=frozenset(free),
                node_index={n: i for i, n in enumerate(node_names)}, nodes={n.name: n for n in nodes},
                running=running, orphaned=orphaned)


def running_gpus(jobs: Iterable[SlurmJob], by_slot: Mapping[tuple[str, str], int]) -> dict[str, tuple[int, ...]]:
    """Running jobs -> the steerable GPUs they hold, from each job's per-node gres_detail
    (`gpu:v100_g2:1(IDX:2),gpu:v100_g3:0(IDX:)`, one entry per node of its node list)."""
    out: dict[str, tuple[int, ...]] = {}
    for job in jobs:
        if not job.running or not job.gres_detail:
            continue
        held: list[int] = []
        for node, detail in zip(expand_nodes(job.nodes), job.gres_detail):
            for use in parsed_gres_alloc(detail):
                if use.name == "gpu" and use.count > 0 and use.type is not None:
                    g = by_slot.get((node, use.type))
                    if g is not None:
                        held.append(g)
        if held:
            out[job.job_id] = tuple(sorted(held))
    return out


@lru_cache(maxsize=1024)
def node_slots(gres: str) -> tuple[tuple[int, str], ...]:
    """(minor, GRES type) of a node's per-slot GPU types, by minor (one string per node layout)."""
    return tuple(sorted({(m, str(u.type)) for u in parsed_gres_alloc(gres)
                         if u.name == "gpu" and (m := slot_of_type(u.type)) is not None}))


@lru_cache(maxsize=16384)
def _used_types(gres_used: str) -> frozenset[str]:
    """GPU GRES types in use according to a node's gres_used."""
    return frozenset(str(u.type) for u in parsed_gres_alloc(gres_used) if u.name == "gpu" and u.count > 0)


#: pending reasons of a job that waits for something other than GPUs (a begin time, another
#: job, a hold): it keeps its placement, but its slots are not kept from other jobs meanwhile
NOT_WAITING_FOR_RESOURCES = frozenset({"BeginTime", "Dependency", "DependencyNeverSatisfied", "JobHeldUser",
                                       "JobHeldAdmin"})


def promised_slots(jobs: Iterable[SlurmJob], now: float | None = None) -> set[tuple[str, str]]:
    """(node, type) of every pending job we placed and released which waits for its GPUs
    (not for a begin time or a dependency: 16 such jobs would otherwise block 16 GPUs), and of
    every holder job waiting to take its GPU out of service (`pal gpus quarantine`: it takes the
    slot before any other job once the job on it ends).

    A job we released shows reason BeginTime until slurmctld's next pass looks at it, although
    its begin time (now, at the release) has passed: with `now`, such a job is taken as waiting
    for its GPUs, since Slurm is about to start it there. (Without this, the next cycle gave
    the same GPUs to another job, which then could not start until it was re-planned.)"""
    out: set[tuple[str, str]] = set()
    for job in jobs:
        if not (job.pending and (is_placed_by_pal(job) or is_holder(job))):
            continue
        if job.state_reason in NOT_WAITING_FOR_RESOURCES and not (
                job.state_reason == "BeginTime" and now is not None and job.begin_time is not None
                and job.begin_time <= now):
            continue
        types = [i.type for i in parsed_tres(job.tres_per_node).gpu_items if i.type]
        for node in expand_nodes(job.required_nodes):
            out |= {(node, t) for t in types}
    return out


def same_slots(view: View, gpus: Sequence[int]) -> bool:
    """Whether `gpus` are the same slots (device minors) on every node they lie on: what one
    per-node GRES request can name."""
    per_node: dict[str, set[int]] = {}
    for g in gpus:
        per_node.setdefault(view.slots[g].node, set()).add(view.slots[g].minor)
    return len({frozenset(m) for m in per_node.values()}) == 1
