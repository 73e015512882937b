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
from dataclasses import dataclass, field, replace
from functools import cached_property, lru_cache

import numpy as np
from ClusterShell.NodeSet import NodeSet, NodeSetParseError

from pal_slurm.placement.model import Cluster, GpuRef, JobRequest
from pal_slurm.placement.variability import GpuVariability
from pal_slurm.slurm.gresconf import natural_key as _natural
from pal_slurm.slurm.gresconf import slot_of_type
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
    """A held job we will place: the job, its class and where the class came from, and
    what the queue order and the policy need to know of it: its rank in Slurm's order
    (partition PriorityTier, priority as Slurm would see it without our hold) and its
    runtime estimate in seconds (time limit or learned; 0 when unknown)."""

    job: SlurmJob
    job_class: str
    class_source: str
    tier: int = 0
    priority: float = 0.0
    estimate_s: float = 0.0


@dataclass(frozen=True)
class Skip:
    """A held job we release unchanged, and why (goes to admin_comment and the audit)."""

    job: SlurmJob
    reason: str


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
    # attract sensitive jobs (the rule of placement.variability.from_classification); worked
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
    by_slot = {(s.node, s.gres_type): i for i, s in enumerate(slots)}
    return View(cluster=cluster, slots=tuple(slots), free=frozenset(free),
                node_index={n: i for i, n in enumerate(node_names)}, nodes={n.name: n for n in nodes},
                running=running_gpus(jobs, by_slot))


def running_gpus(jobs: Iterable[SlurmJob], by_slot: Mapping[tuple[str, str], int]) -> dict[str, tuple[int, ...]]:
    """Running jobs -> the steerable GPUs they hold, from each job's per-node gres_detail
    (`gpu:v100_g2:1(IDX:2),gpu:v100_g3:0(IDX:)`, one entry per node of its node list)."""
    out: dict[str, tuple[int, ...]] = {}
    for job in jobs:
        if not job.running or not job.gres_detail:
            continue
        held: list[int] = []
        for node, detail in zip(expand_nodes(job.nodes), job.gres_detail):
            for use in _gres_alloc(detail):
                if use.name == "gpu" and use.count > 0 and use.type is not None:
                    g = by_slot.get((node, use.type))
                    if g is not None:
                        held.append(g)
        if held:
            out[job.job_id] = tuple(sorted(held))
    return out


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


@dataclass(frozen=True)
class Shape:
    """How a job's GPU request maps onto the policy layer, and what the user's request allows.

    What we set: `per_node` GPUs on exactly `nodes` nodes (`gpus` in all), as a per-slot
    TresPerNode request and a NodeList of `nodes` names. What Slurm would give the job as
    submitted: `user_per_node` GPUs on each node (None for `--gpus`, which Slurm splits as
    it likes), `user_gpus` in all (None for a per-node request: per node x nodes), on
    `user_nodes` = (fewest, most) nodes (most None: unlimited). `check_update` holds every
    update to this before anything is changed in Slurm.
    """

    field: str  # tres_per_node | tres_per_job
    tres: TresList
    gpus: int
    per_node: int
    nodes: int
    user_nodes: tuple[int, int | None] = (1, 1)
    user_per_node: int | None = None
    user_gpus: int | None = None


def request_shape(job: SlurmJob, max_per_node: int) -> Shape | str:
    """The shape we can steer, or the reason we release the job unchanged.

    Node counts as Slurm gives them: a per-node request (`--gres`, `--gpus-per-node`)
    without `-N` runs on exactly one node (squeue's node_count 1), with `-N N` on N; we
    steer it on its node_count nodes, the fewest Slurm would use. `--gpus=N` (per job)
    may span 1..N nodes without `-N`; we steer only the one-node case (N GPUs on one node,
    within that range). Repeated GRES entries count as Slurm counts them (the last of a
    type wins: `--gres=gpu:1,gpu:1` is one GPU).
    """
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
    lo = max(job.node_count, 1)
    # without -N (squeue's max_nodes 0) a per-node request runs on exactly node_count nodes
    hi = job.max_nodes if job.max_nodes and job.max_nodes >= lo else (lo if fld == "tres_per_node" else None)
    if fld == "tres_per_node":
        if n > max_per_node:
            return f"{n} GPUs per node: no node has that many steerable GPUs; placed by Slurm"
        return Shape(fld, tres, n * lo, n, lo, user_nodes=(lo, hi), user_per_node=n)
    if lo > 1 or n > max_per_node:
        return f"--gpus={n} over several nodes: placed by Slurm (not expressible as per-slot types)"
    return Shape(fld, tres, n, n, 1, user_nodes=(1, min(hi or n, n)), user_gpus=n)


def check_update(shape: Shape, update: Update) -> str | None:
    """Why `update` would give the job another shape than the user asked for (None: same).

    What the update sets is read back from the update itself (node list, per-slot request,
    slots), not from the decision that produced it, so a wrong policy, a wrong plan or a
    wrong rendering are all caught before Slurm sees them."""
    nodes = [n for n in update.node_list.split(",") if n]
    per_slot = _tres(update.tres_per_node).gpu_items
    per_node = sum(i.count for i in per_slot)
    if any(i.type is None for i in per_slot):
        return "the request would not name per-slot types"
    lo, hi = shape.user_nodes
    if len(set(nodes)) != len(nodes) or not lo <= len(nodes) <= (hi or len(nodes)) or len(nodes) != shape.nodes:
        return f"{len(nodes)} node(s) in NodeList, the request allows {lo}..{hi or 'any'}"
    if shape.user_per_node is not None and per_node != shape.user_per_node:
        return f"{per_node} GPU(s) per node, the request asks for {shape.user_per_node}"
    total = per_node * len(nodes)
    if shape.user_gpus is not None and total != shape.user_gpus:
        return f"{total} GPU(s) in all, the request asks for {shape.user_gpus}"
    if len(update.slots) != total:
        return f"{len(update.slots)} slot(s) chosen for {total} GPU(s)"
    wanted = sorted(i.type for i in per_slot if i.type)
    for node in nodes:
        mine = sorted(s.gres_type for s in update.slots if s.node == node)
        if mine != wanted:
            return f"the slots on {node} ({','.join(mine) or 'none'}) are not the requested {','.join(wanted)}"
    return None


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
    """JobRequests for the held jobs we can steer, the rest as Skips (input order kept:
    the queue order is the caller's, see pal_slurm.placement.decide)."""
    out = Planned()
    max_per_node = view.cluster.max_gpus_per_node
    table = view.table
    for h in held:
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
        if not np.any(mask & (table.free_gpus >= shape.per_node)):
            out.waiting[job.job_id] = f"no node it may use has {shape.per_node} free steerable GPUs"
        elif np.count_nonzero(mask & (table.gpus >= shape.per_node)) < shape.nodes:
            out.waiting[job.job_id] = f"fewer than {shape.nodes} node(s) it may use can take it now"
        # every steerable job goes to the policy, also one that cannot start now: in queue
        # order it may be the head a backfilling policy reserves GPUs for. One node: the
        # policy's one-node choice; several: the same slots on each (one per-node request)
        out.requests.append(JobRequest(
            id=job.job_id, gpus=shape.gpus, job_class=h.job_class, submit_time=job.submit_time,
            gpus_per_node=shape.per_node if shape.nodes > 1 else None, min_nodes=shape.nodes, max_nodes=shape.nodes,
            allowed_nodes=table.as_set(mask), same_slots=shape.nodes > 1, remaining_s=h.estimate_s,
            tier=h.tier, priority=h.priority))
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


#: pending reasons under which a job is held by someone on purpose: never ours to release
HELD_BY_SOMEONE = frozenset({"JobHeldUser", "JobHeldAdmin"})
#: node flags that keep a job pinned to the node from ever starting there
_NODE_GONE = frozenset({"DOWN", "DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING", "INVALID", "INVALID_REG",
                        "FUTURE", "MAINTENANCE", "POWERED_DOWN", "POWER_DOWN"})


def stranded(job: SlurmJob, nodes: Mapping[str, SlurmNode]) -> str | None:
    """Why a job we placed and released cannot start as it stands (None when it can, or
    when it is not ours): Slurm says BadConstraints, it sits at priority 0 without anyone's
    hold, or a node it is pinned to is gone, down or drained, or lacks a slot type we set.
    Such a job gets its request restored and is released (daemon cycle, SIGTERM,
    release-stale): nobody is stranded by a placement."""
    if not (job.pending and is_placed_by_pal(job)) or job.state_reason in HELD_BY_SOMEONE:
        return None
    if job.state_reason == "BadConstraints":
        return "Slurm says BadConstraints"
    if job.priority == 0:
        return "priority 0"
    pinned = expand_nodes(job.required_nodes)
    most = job.max_nodes or max(job.node_count, 1)
    if len(pinned) > most:
        # a placement of another shape (what placers before issue 11 could make): Slurm
        # turns it into a job it will refuse to start (BadConstraints) or runs it reshaped
        return f"pinned to {len(pinned)} nodes, the job may span {most}"
    types = [i.type for i in _tres(job.tres_per_node).gpu_items if i.type]
    for name in pinned:
        node = nodes.get(name)
        if node is None:
            return f"its node {name} no longer exists"
        gone = (node.flags | {node.state}) & _NODE_GONE
        if gone:
            return f"its node {name} is {','.join(sorted(gone)).lower()}"
        have = {t for _m, t in _node_slots(node.gres)}
        missing = [t for t in types if t not in have]
        if missing:
            return f"its node {name} has no GPU slot {','.join(missing)}"
    return None


def as_submitted(job: SlurmJob) -> SlurmJob:
    """The job with the GPU request its user made (recorded in our tag as `was ...`) and no
    node pinned: what a re-plan or a rescue plans from."""
    orig = original_request(job)
    if orig is None:
        return job
    field_name, value = orig
    return replace(job, tres_per_node=value if field_name == "tres_per_node" else "",
                   tres_per_job=value if field_name == "tres_per_job" else "", required_nodes="")


def fallback_update(job: SlurmJob, view: View) -> Update | None:
    """A per-slot request of the user's shape that Slurm can run, for a placed job whose own
    request cannot be put back (Slurm 22.05 refuses an untyped request once a job carried
    typed ones): the first allowed node(s) in name order with enough free slots now (the
    same slots on each), pinned there; else the lowest slot types of the job's first
    allowed node, with no node pinned, so any node with those slots free can take it.
    None when even that cannot be expressed (then the job keeps what it has)."""
    user = as_submitted(job)
    shape = request_shape(user, view.cluster.max_gpus_per_node)
    if isinstance(shape, str):
        return None
    possible = allowed_mask(user, view, shape, now=False)
    if isinstance(possible, str):
        return None
    now_ok = allowed_mask(user, view, shape)
    per_node: dict[int, list[int]] = {}
    for g in sorted(view.free):
        per_node.setdefault(view.cluster.node_of[g], []).append(g)
    if not isinstance(now_ok, str):
        for first in np.flatnonzero(now_ok):
            mine = per_node.get(int(first), [])
            if len(mine) < shape.per_node:
                continue
            types = [view.slots[g].gres_type for g in mine[: shape.per_node]]
            chosen = [first]
            for other in np.flatnonzero(now_ok):
                if len(chosen) == shape.nodes:
                    break
                theirs = {view.slots[g].gres_type for g in per_node.get(int(other), [])}
                if other != first and set(types) <= theirs:
                    chosen.append(other)
            if len(chosen) == shape.nodes:
                gpus = [g for v in chosen for g in per_node[int(v)] if view.slots[g].gres_type in types]
                update = update_for(user, shape, gpus, view)
                if check_update(shape, update) is None:
                    return update
                break
    for node in np.flatnonzero(possible):
        ids = view.cluster.node_gpus[int(node)]
        if len(ids) >= shape.per_node:
            types = [view.slots[g].gres_type for g in ids[: shape.per_node]]
            request = typed_gpu_request(shape.tres.prefix, {t: 1 for t in types},
                                        others=shape.tres.without_gpus().items)
            return Update(job_id=job.job_id, clear_field="TresPerNode", tres_per_node=request, node_list="",
                          slots=(), original=(shape.field, getattr(user, shape.field)))
    return None
