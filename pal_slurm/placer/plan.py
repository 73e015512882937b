"""From Slurm's jobs and nodes to a placement problem, and from a decision back to Slurm (pure).

Why pure: every rule that decides whether and how a user's job is touched lives here and
is tested on hand-built and captured inputs, without a cluster. The daemon only feeds it
what Slurm said and carries out what it returns.

Rules (docs/admin-guide.md, "What the placer touches"):
- A job is ours only while it is pending with priority 0 and an admin_comment starting
  `pal:held` (what job_submit.lua writes in enforce mode).
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


def slot_of_type(gres_type: str | None) -> int | None:
    m = _SLOT.match(gres_type or "")
    return int(m.group("minor")) if m else None


def is_held_by_pal(job: SlurmJob) -> bool:
    return job.pending and job.priority == 0 and job.admin_comment.startswith(HELD_TAG)


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
    if not expr or expr in ("(null)", "None"):
        return []
    try:
        return list(NodeSet(expr))
    except NodeSetParseError:
        return [n for n in expr.split(",") if n]


def build_view(nodes: Sequence[SlurmNode], jobs: Sequence[SlurmJob],
               factors: Mapping[tuple[str, int], GpuVariability], classes: Sequence[str]) -> View:
    """Steerable GPUs (nodes whose GPUs carry per-slot types), their factors, and which are free."""
    slots: list[Slot] = []
    node_names: list[str] = []
    gpus: list[GpuRef] = []
    used: set[tuple[str, str]] = set()
    for node in sorted(nodes, key=lambda n: _natural(n.name)):
        mine = sorted({(m, u.type) for u in parse_gres_alloc(node.gres)
                       if u.name == "gpu" and (m := slot_of_type(u.type)) is not None})
        if not mine:
            continue
        idx = len(node_names)
        node_names.append(node.name)
        for k, (minor, gtype) in enumerate(mine):
            gpus.append(GpuRef(id=len(slots), node=idx, slot=k))
            slots.append(Slot(node.name, minor, str(gtype)))
        used |= {(node.name, str(u.type)) for u in parse_gres_alloc(node.gres_used) if u.name == "gpu" and u.count > 0}
    used |= promised_slots(jobs)
    by_name = {n.name: n for n in nodes}
    free = frozenset(i for i, s in enumerate(slots)
                     if (s.node, s.gres_type) not in used and by_name[s.node].schedulable)
    sf: dict[str, list[float]] = {c: [] for c in classes}
    pv: dict[str, list[float]] = {c: [] for c in classes}
    # a GPU we know nothing about gets the worst factor of its class: unknown GPUs must not
    # attract sensitive jobs (the rule of simulate.variability.from_classification)
    worst_sf = {c: _worst(factors.values(), "slowdown", c) for c in classes}
    worst_pv = {c: _worst(factors.values(), "perfvar", c) for c in classes}
    for s in slots:
        v = factors.get((s.node, s.minor))
        for c in classes:
            sf[c].append(float(v.slowdown[c]) if v and v.slowdown.get(c) is not None else worst_sf[c])
            pv[c].append(float(v.perfvar[c]) if v and v.perfvar.get(c) is not None else worst_pv[c])
    cluster = Cluster(node_names=tuple(node_names), gpus=tuple(gpus),
                      slowdown={c: tuple(v) for c, v in sf.items()}, perfvar={c: tuple(v) for c, v in pv.items()})
    return View(cluster=cluster, slots=tuple(slots), free=free,
                node_index={n: i for i, n in enumerate(node_names)}, nodes=by_name)


def _worst(values: Iterable[GpuVariability], kind: str, cls: str) -> float:
    known = [x for v in values if (x := getattr(v, kind).get(cls)) is not None]
    return float(max(known)) if known else 1.0


def promised_slots(jobs: Iterable[SlurmJob]) -> set[tuple[str, str]]:
    """(node, type) of every pending job we placed and released but which has not started."""
    out: set[tuple[str, str]] = set()
    for job in jobs:
        if not (job.pending and is_placed_by_pal(job)):
            continue
        types = [i.type for i in parse_tres(job.tres_per_node).gpu_items if i.type]
        for node in expand_nodes(job.required_nodes):
            out |= {(node, t) for t in types}
    return out


def _natural(name: str) -> list[object]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


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
    if parse_tres(job.tres_per_task).gpu_count or parse_tres(job.tres_per_socket).gpu_count:
        return "GPUs per task or per socket: placed by Slurm (not expressible as per-slot types)"
    per_node, per_job = parse_tres(job.tres_per_node), parse_tres(job.tres_per_job)
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
    if job.required_nodes:
        return "names nodes: not moved"
    feats = job.features.strip()
    if feats and not _SIMPLE_FEATURES.match(feats):
        return f"feature expression {feats!r}: placed by Slurm"
    wanted = set(feats.split("&")) if feats else set()
    parts = {p for p in job.partition.split(",") if p}
    excluded = set(expand_nodes(job.excluded_nodes))
    cpus = max(job.min_cpus_per_node, -(-job.cpus // shape.nodes))
    mem = job.memory_on_node_mb()
    out = set()
    for name, i in view.node_index.items():
        node = view.nodes[name]
        if name in excluded or not node.schedulable or (parts and not parts & set(node.partitions)):
            continue
        if wanted and not wanted <= node.active_features:
            continue
        if job.exclusive and node.alloc_cpus > 0:
            continue
        if node.free_cpus < cpus or (mem and node.free_memory_mb < mem):
            continue
        out.add(i)
    return frozenset(out)


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
    free_per_node: dict[int, int] = {}
    for g in view.free:
        node = view.cluster.gpus[g].node
        free_per_node[node] = free_per_node.get(node, 0) + 1
    for h in sorted(held, key=lambda h: (h.job.submit_time, int(h.job.job_id) if h.job.job_id.isdigit() else 0)):
        job = h.job
        shape = request_shape(job, max_per_node)
        if isinstance(shape, str):
            out.skips.append(Skip(job, shape))
            continue
        allowed = allowed_nodes(job, view, shape)
        if isinstance(allowed, str):
            out.skips.append(Skip(job, allowed))
            continue
        capacity = sorted((len(view.cluster.node_gpus[i]) for i in allowed), reverse=True)
        if sum(1 for c in capacity if c >= shape.per_node) < shape.nodes:
            # not even an empty cluster could take it on the nodes it may use
            out.skips.append(Skip(job, f"needs {shape.nodes} node(s) with {shape.per_node} steerable GPUs among "
                                       f"the nodes it may use ({len(allowed)}): placed by Slurm"))
            continue
        if shape.nodes == 1 and not any(free_per_node.get(i, 0) >= shape.per_node for i in allowed):
            # no allowed node has enough free GPUs now: it waits, and takes nothing from others
            out.waiting[job.job_id] = f"no node it may use has {shape.per_node} free steerable GPUs"
            continue
        # one node: the policy's own choice (PAL's within-node walk; with an infinite
        # locality penalty it never splits, see Placer); several nodes: the same slots on each
        out.requests.append(JobRequest(id=job.job_id, gpus=shape.gpus, job_class=h.job_class,
                                       submit_time=job.submit_time,
                                       gpus_per_node=shape.per_node if shape.nodes > 1 else None,
                                       allowed_nodes=allowed, same_slots=shape.nodes > 1))
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
    got = sorted((i.type, i.count) for i in parse_tres(job.tres_per_node).gpu_items)
    want = sorted((i.type, i.count) for i in parse_tres(update.tres_per_node).gpu_items)
    return got == want and set(expand_nodes(job.required_nodes)) == set(update.node_list.split(","))
