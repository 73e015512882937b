"""From Slurm's jobs and nodes to a placement problem, and from a decision back to Slurm (pure).

Why pure: every rule that decides whether and how a user's job is touched lives here and
is tested on hand-built and captured inputs, without a cluster. The daemon only feeds it
what Slurm said and carries out what it returns.

Rules (docs/admin-guide.md, "What the placer touches"):
- A job is ours only while it is pending, held, and its admin_comment starts `pal:held`
  (what job_submit.lua writes in enforce mode). Held means a begin time still ahead (or
  Slurm's reason BeginTime): job_submit.lua sets the begin time, because Slurm skips its
  submit-time checks for a job held with priority 0. A job held with priority 0 and the tag
  (what earlier releases of the filter did) still counts, so an upgrade leaves none behind.
- Only requests Slurm can express per GPU slot are steered: `--gres`/`--gpus-per-node`
  (tres_per_node) on one or more nodes, and `--gpus` (tres_per_job) that fits on one node.
  Multi-node requests get the same slots on every node (one per-node GRES request applies
  to every node). Anything else (tres_per_task, tres_per_socket, a multi-node `--gpus`,
  features we cannot evaluate, named or typed GPUs that slipped through) is released
  unchanged, with the reason in admin_comment.
- GPUs promised to jobs we released that have not started yet count as taken, so two
  jobs are never steered onto one slot.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property, lru_cache

import numpy as np
from ClusterShell.NodeSet import NodeSet, NodeSetParseError

from pal_slurm.placement.model import Cluster, GpuRef, JobRequest
from pal_slurm.simulate.variability import GpuVariability
from pal_slurm.slurm.model import SlurmJob, SlurmNode
from pal_slurm.slurm.tres import (
    TresList,
    parse_gres_alloc,
    parse_tres,
    typed_gpu_request,
)

HELD_TAG = "pal:held"
PLACED_TAG = "pal: placed"
RELEASED_TAG = "pal: released"
_SLOT = re.compile(r"^(?P<model>.+)_g(?P<minor>\d+)$")
_CLASS = re.compile(r"\bclass=(?P<cls>[A-Za-z0-9]+)")
_SRC = re.compile(r"\bsrc=(?P<src>\S+)")
_AT = re.compile(r"\bat=(?P<at>\d+)")
_WAS = re.compile(r"\bwas (?P<field>tres_per_(?:node|job)) (?P<value>\S*)\s*$")
_SIMPLE_FEATURES = re.compile(r"^[\w.-]+(&[\w.-]+)*$")

# The same GRES and TRES strings come back for most nodes and jobs, cycle after cycle (one
# node layout per node type, a handful of request forms); the parsers are pure and return
# frozen values, so each distinct string is parsed once (bench/placer_cycle.py).
_gres_alloc = lru_cache(maxsize=16384)(parse_gres_alloc)
_tres = lru_cache(maxsize=16384)(parse_tres)


@dataclass(frozen=True)
class Slot:
    """One steerable GPU: node, device minor, and the GRES type that names exactly it."""

    node: str
    minor: int
    gres_type: str


@dataclass(frozen=True)
class HeldJob:
    """A held job we will place: the job, its class and where the class came from."""

    job: SlurmJob
    job_class: str
    class_source: str


@dataclass(frozen=True)
class Skip:
    """A held job we release unchanged, and why (goes to admin_comment and the audit)."""

    job: SlurmJob
    reason: str


@dataclass(frozen=True)
class View:
    """The placement problem of one cycle."""

    cluster: Cluster
    slots: tuple[Slot, ...]
    free: frozenset[int]
    node_index: Mapping[str, int]
    nodes: Mapping[str, SlurmNode]

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


def slot_of_type(gres_type: str | None) -> int | None:
    m = _SLOT.match(gres_type or "")
    return int(m.group("minor")) if m else None


def is_held_by_pal(job: SlurmJob, now: float) -> bool:
    """A pending job tagged `pal:held` that is held: by its begin time (job_submit.lua, the
    placer's re-plans) or with priority 0 (earlier releases)."""
    if not (job.pending and job.admin_comment.startswith(HELD_TAG)):
        return False
    return job.priority == 0 or job.begins_after(now) or job.state_reason == "BeginTime"


def hold_lapsed(job: SlurmJob, now: float) -> bool:
    """A pending job still tagged `pal:held` whose begin-time hold ran out before we released it
    (placer down or too slow): Slurm schedules it as submitted; only its tag is left to fix."""
    return job.pending and job.admin_comment.startswith(HELD_TAG) and not is_held_by_pal(job, now)


def held_by_priority(job: SlurmJob) -> bool:
    """Which hold a held job has: priority 0 (`scontrol release` ends it) or else a begin
    time (`StartTime=now` ends it)."""
    return job.priority == 0


def is_placed_by_pal(job: SlurmJob) -> bool:
    return job.admin_comment.startswith(PLACED_TAG)


def held_class(job: SlurmJob) -> tuple[str, str]:
    """(class, source) from the filter's tag `pal:held class=X src=Y`."""
    m, s = _CLASS.search(job.admin_comment), _SRC.search(job.admin_comment)
    return (m.group("cls") if m else "auto"), (s.group("src") if s else "default")


def placed_at(job: SlurmJob) -> float | None:
    m = _AT.search(job.admin_comment)
    return float(m.group("at")) if m else None


def original_request(job: SlurmJob) -> tuple[str, str] | None:
    """The request a placed job had before we retyped it (recorded in its admin_comment)."""
    m = _WAS.search(job.admin_comment)
    return (m.group("field"), m.group("value")) if m else None


def expand_nodes(expr: str) -> list[str]:
    """Node names of a Slurm hostlist (`n[1-3],gpu7`), in order."""
    if not expr or expr in ("(null)", "None"):
        return []
    return list(_expand(expr))


@lru_cache(maxsize=4096)
def _expand(expr: str) -> tuple[str, ...]:
    if not any(c in expr for c in "[@ "):
        # a plain list (what a placed job's NodeList reads back as): no NodeSet parse,
        # which costs more than the rest of verifying a placement
        return tuple(sorted(dict.fromkeys(n for n in expr.split(",") if n), key=_natural))
    try:
        return tuple(NodeSet(expr))
    except NodeSetParseError:
        return tuple(n for n in expr.split(",") if n)


def build_view(nodes: Sequence[SlurmNode], jobs: Sequence[SlurmJob],
               factors: Mapping[tuple[str, int], GpuVariability], classes: Sequence[str]) -> View:
    """Steerable GPUs (nodes whose GPUs carry per-slot types), their factors, and which are free."""
    slots: list[Slot] = []
    node_names: list[str] = []
    gpus: list[GpuRef] = []
    free: list[int] = []
    for node in sorted(nodes, key=lambda n: _natural(n.name)):
        mine = _node_slots(node.gres)
        if not mine:
            continue
        idx = len(node_names)
        node_names.append(node.name)
        busy = _used_types(node.gres_used)
        schedulable = node.schedulable
        for k, (minor, gtype) in enumerate(mine):
            if schedulable and gtype not in busy:
                free.append(len(slots))
            gpus.append(GpuRef(id=len(slots), node=idx, slot=k))
            slots.append(Slot(node.name, minor, gtype))
    promised = promised_slots(jobs)
    if promised:
        free = [i for i in free if (slots[i].node, slots[i].gres_type) not in promised]
    # a GPU we know nothing about gets the worst factor of its class: unknown GPUs must not
    # attract sensitive jobs (the rule of simulate.variability.from_classification); worked
    # out only when some GPU needs it (a scan of every factor)
    worst: dict[tuple[str, str], float] = {}

    def fallback(kind: str, c: str) -> float:
        if (kind, c) not in worst:
            worst[(kind, c)] = _worst(factors.values(), kind, c)
        return worst[(kind, c)]

    known = [factors.get((s.node, s.minor)) for s in slots]
    sf = {c: tuple(float(x) if v is not None and (x := v.slowdown.get(c)) is not None else fallback("slowdown", c)
                   for v in known) for c in classes}
    pv = {c: tuple(float(x) if v is not None and (x := v.perfvar.get(c)) is not None else fallback("perfvar", c)
                   for v in known) for c in classes}
    cluster = Cluster(node_names=tuple(node_names), gpus=tuple(gpus), slowdown=sf, perfvar=pv)
    return View(cluster=cluster, slots=tuple(slots), free=frozenset(free),
                node_index={n: i for i, n in enumerate(node_names)}, nodes={n.name: n for n in nodes})


@lru_cache(maxsize=1024)
def _node_slots(gres: str) -> tuple[tuple[int, str], ...]:
    """(minor, GRES type) of a node's per-slot GPU types, by minor (one string per node layout)."""
    return tuple(sorted({(m, str(u.type)) for u in _gres_alloc(gres)
                         if u.name == "gpu" and (m := slot_of_type(u.type)) is not None}))


@lru_cache(maxsize=16384)
def _used_types(gres_used: str) -> frozenset[str]:
    """GPU GRES types in use according to a node's gres_used."""
    return frozenset(str(u.type) for u in _gres_alloc(gres_used) if u.name == "gpu" and u.count > 0)


def _worst(values: Iterable[GpuVariability], kind: str, cls: str) -> float:
    known = [x for v in values if (x := getattr(v, kind).get(cls)) is not None]
    return float(max(known)) if known else 1.0


#: pending reasons of a job that waits for something other than GPUs (a begin time, another
#: job, a hold): it keeps its placement, but its slots are not kept from other jobs meanwhile
NOT_WAITING_FOR_RESOURCES = frozenset({"BeginTime", "Dependency", "DependencyNeverSatisfied", "JobHeldUser",
                                       "JobHeldAdmin"})


def promised_slots(jobs: Iterable[SlurmJob]) -> set[tuple[str, str]]:
    """(node, type) of every pending job we placed and released which waits for its GPUs
    (not for a begin time or a dependency: 16 such jobs would otherwise block 16 GPUs)."""
    out: set[tuple[str, str]] = set()
    for job in jobs:
        if not (job.pending and is_placed_by_pal(job)) or job.state_reason in NOT_WAITING_FOR_RESOURCES:
            continue
        types = [i.type for i in _tres(job.tres_per_node).gpu_items if i.type]
        for node in expand_nodes(job.required_nodes):
            out |= {(node, t) for t in types}
    return out


@lru_cache(maxsize=65536)
def _natural(name: str) -> tuple[object, ...]:
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name))


@dataclass(frozen=True)
class Shape:
    """How a job's GPU request maps onto the policy layer: total GPUs, per node, field."""

    field: str  # tres_per_node | tres_per_job
    tres: TresList
    gpus: int
    per_node: int
    nodes: int


def request_shape(job: SlurmJob, max_per_node: int) -> Shape | str:
    """The shape we can steer, or the reason we release the job unchanged."""
    if _tres(job.tres_per_task).gpu_count or _tres(job.tres_per_socket).gpu_count:
        return "GPUs per task or per socket: placed by Slurm (not expressible as per-slot types)"
    per_node, per_job = _tres(job.tres_per_node), _tres(job.tres_per_job)
    if per_node.gpu_count and per_job.gpu_count:
        return "GPUs requested per node and per job: placed by Slurm"
    tres, fld = (per_node, "tres_per_node") if per_node.gpu_count else (per_job, "tres_per_job")
    if not tres.gpu_count:
        return "no GPUs requested"
    if tres.unparsed:
        return f"unreadable request {','.join(tres.unparsed)!r}: placed by Slurm"
    if tres.gpu_types:
        return f"asks for GPU type {','.join(tres.gpu_types)}: not moved"
    n = tres.gpu_count
    if fld == "tres_per_node":
        nodes = max(job.node_count, 1)
        if n > max_per_node:
            return f"{n} GPUs per node: no node has that many steerable GPUs; placed by Slurm"
        return Shape(fld, tres, n * nodes, n, nodes)
    if job.node_count > 1 or n > max_per_node:
        return f"--gpus={n} over several nodes: placed by Slurm (not expressible as per-slot types)"
    return Shape(fld, tres, n, n, 1)


def allowed_nodes(job: SlurmJob, view: View, shape: Shape) -> frozenset[int] | str:
    """Node indices the job may use (partition, state, features, exclusions, CPUs, memory)."""
    mask = allowed_mask(job, view, shape)
    return mask if isinstance(mask, str) else view.table.as_set(mask)


def allowed_mask(job: SlurmJob, view: View, shape: Shape, *, now: bool = True) -> np.ndarray | str:
    """`allowed_nodes` as a boolean array over the view's node indices, or why the job is not moved.

    now=False: the nodes that could ever take the job (partition, features, exclusions, the
    node's CPUs and memory), whatever their state and load: a node that is down, still
    registering after a slurmctld restart, or busy makes a job wait, not leave our hands."""
    if job.required_nodes:
        return "names nodes: not moved"
    feats = job.features.strip()
    if feats and not _SIMPLE_FEATURES.match(feats):
        return f"feature expression {feats!r}: placed by Slurm"
    table = view.table
    cpus = max(job.min_cpus_per_node, -(-job.cpus // shape.nodes))
    mem = job.memory_on_node_mb()
    # held jobs share a few constraint sets (partition, features, CPUs, memory): compute each once
    key = (job.partition, feats, job.excluded_nodes, job.exclusive, cpus, mem, now)
    cached = table._masks.get(key)
    if cached is not None:
        return cached
    mask = table.schedulable.copy() if now else np.ones_like(table.schedulable)
    parts = {p for p in job.partition.split(",") if p}
    if parts:
        in_part = np.zeros_like(mask)
        for p in parts:
            in_part |= table.partition(p)
        mask &= in_part
    for f in (feats.split("&") if feats else ()):
        mask &= table.feature(f)
    for name in expand_nodes(job.excluded_nodes):
        i = view.node_index.get(name)
        if i is not None:
            mask[i] = False
    if job.exclusive and now:
        mask &= ~table.busy
    mask &= (table.free_cpus if now else table.cpus) >= cpus
    if mem:
        mask &= (table.free_memory_mb if now else table.memory_mb) >= mem
    mask.flags.writeable = False  # shared by every job with the same constraints
    table._masks[key] = mask
    return mask


@dataclass
class Planned:
    """The cycle's placement problem: requests for the policy, and jobs to release unchanged."""

    requests: list[JobRequest] = field(default_factory=list)
    shapes: dict[str, Shape] = field(default_factory=dict)
    held: dict[str, HeldJob] = field(default_factory=dict)
    skips: list[Skip] = field(default_factory=list)
    waiting: dict[str, str] = field(default_factory=dict)  # job id -> why it cannot start now


def plan_requests(held: Sequence[HeldJob], view: View) -> Planned:
    """JobRequests for the held jobs we can steer, the rest as Skips; FIFO by submit time."""
    out = Planned()
    max_per_node = view.cluster.max_gpus_per_node
    table = view.table
    for h in sorted(held, key=lambda h: (h.job.submit_time, int(h.job.job_id) if h.job.job_id.isdigit() else 0)):
        job = h.job
        shape = request_shape(job, max_per_node)
        if isinstance(shape, str):
            out.skips.append(Skip(job, shape))
            continue
        mask = allowed_mask(job, view, shape)
        if isinstance(mask, str):
            out.skips.append(Skip(job, mask))
            continue
        possible = allowed_mask(job, view, shape, now=False)
        assert not isinstance(possible, str)  # the same reasons as `mask` above
        if np.count_nonzero(possible & (table.gpus >= shape.per_node)) < shape.nodes:
            # not even an empty, healthy cluster could take it on the nodes it may use
            out.skips.append(Skip(job, f"needs {shape.nodes} node(s) with {shape.per_node} steerable GPUs among "
                                       f"the nodes it may use ({np.count_nonzero(possible)}): placed by Slurm"))
            continue
        if shape.nodes == 1 and not np.any(mask & (table.free_gpus >= shape.per_node)):
            # no allowed node has enough free GPUs now: it waits, and takes nothing from others
            out.waiting[job.job_id] = f"no node it may use has {shape.per_node} free steerable GPUs"
            continue
        if np.count_nonzero(mask & (table.gpus >= shape.per_node)) < shape.nodes:
            # enough such nodes exist, but not enough of them are up and have the CPUs/memory now
            out.waiting[job.job_id] = f"fewer than {shape.nodes} node(s) it may use can take it now"
            continue
        # one node: the policy's own choice (PAL's within-node walk; with an infinite
        # locality penalty it never splits, see Placer); several nodes: the same slots on each
        out.requests.append(JobRequest(id=job.job_id, gpus=shape.gpus, job_class=h.job_class,
                                       submit_time=job.submit_time,
                                       gpus_per_node=shape.per_node if shape.nodes > 1 else None,
                                       allowed_nodes=table.as_set(mask), same_slots=shape.nodes > 1))
        out.shapes[job.job_id] = shape
        out.held[job.job_id] = h
    return out


@dataclass(frozen=True)
class Update:
    """What to do to one job in Slurm: clear its GPU field, set the typed request and nodes."""

    job_id: str
    clear_field: str  # TresPerNode | TresPerJob
    tres_per_node: str
    node_list: str
    slots: tuple[Slot, ...]
    original: tuple[str, str]  # (field, value) to restore on failure


FIELD_KEY = {"tres_per_node": "TresPerNode", "tres_per_job": "TresPerJob"}


def update_for(job: SlurmJob, shape: Shape, gpus: Sequence[int], view: View) -> Update:
    """The per-slot request for the chosen GPUs (the same slots on every node)."""
    chosen = [view.slots[g] for g in sorted(gpus)]
    nodes = sorted({s.node for s in chosen}, key=_natural)
    first = [s for s in chosen if s.node == nodes[0]]
    request = typed_gpu_request(shape.tres.prefix, {s.gres_type: 1 for s in first},
                                others=shape.tres.without_gpus().items)
    original_value = getattr(job, shape.field)
    return Update(job_id=job.job_id, clear_field=FIELD_KEY[shape.field], tres_per_node=request,
                  node_list=",".join(nodes), slots=tuple(chosen), original=(shape.field, original_value))


def summary(update: Update, job_class: str, policy: str, version: int | None, factors: Sequence[float],
            now: float) -> str:
    """The one-line admin_comment of a placed job; also carries what to restore on re-planning."""
    where = ";".join(f"{n}:" + ",".join(str(s.minor) for s in update.slots if s.node == n)
                     for n in dict.fromkeys(s.node for s in update.slots))
    sf = ",".join(f"{f:.3f}" for f in factors)
    ver = f" v{version}" if version is not None else ""
    return (f"{PLACED_TAG} class={job_class} gpus={where} sf={sf} policy={policy}{ver} at={int(now)} "
            f"was {update.original[0]} {update.original[1]}")


def matches(job: SlurmJob, update: Update) -> bool:
    """Did Slurm take the update? (its request and required nodes read back as we set them)."""
    got = sorted((i.type, i.count) for i in _tres(job.tres_per_node).gpu_items)
    want = sorted((i.type, i.count) for i in _tres(update.tres_per_node).gpu_items)
    return got == want and set(expand_nodes(job.required_nodes)) == set(update.node_list.split(","))
