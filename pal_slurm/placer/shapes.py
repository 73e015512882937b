"""Which held jobs are steered and how: request shapes, the nodes a job may use, the cycle's problem (pure).

Why pure: every rule that decides whether and how a user's job is touched lives in the
placer's pure modules (holds, cluster_view, shapes, slurm_updates) and is tested on
hand-built and captured inputs, without a cluster. The daemon only feeds them what Slurm
said and carries out what they return.

Rules (docs/admin-guide.md, "What the placer touches"):
- Only requests Slurm can express per GPU slot are steered: `--gres`/`--gpus-per-node`
  (tres_per_node) on one or more nodes, and `--gpus` (tres_per_job) that fits on one node.
  Multi-node requests get the same slots on every node (one per-node GRES request applies
  to every node). Anything else (tres_per_task, tres_per_socket, a multi-node `--gpus`,
  features we cannot evaluate, named or typed GPUs that slipped through) is released
  unchanged, with the reason in admin_comment.
- A job that no node it may use could ever take (even empty and healthy) is released
  unchanged; one that merely cannot start now stays held and goes to the policy, which may
  reserve GPUs for it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from pal_slurm.jobs.runtimes import SOURCE_FINGERPRINT, SOURCE_HISTORY
from pal_slurm.placement.model import JobRequest
from pal_slurm.placer.cluster_view import View
from pal_slurm.slurm.hostlist import expand_nodes
from pal_slurm.slurm.model import GpuRequestField, SlurmJob
from pal_slurm.slurm.tres import TresList, parsed_tres

_SIMPLE_FEATURES = re.compile(r"^[\w.-]+(&[\w.-]+)*$")


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
    #: where the estimate came from (pal_slurm.jobs.runtimes SOURCE_*; "" when not said)
    estimate_source: str = ""

    @property
    def estimate_note(self) -> str:
        """"; runtime estimate N s learned from ..." for a learned estimate, for a placement's
        reason (a time limit goes unsaid: Slurm shows it anyway)."""
        learned = self.estimate_source in (SOURCE_FINGERPRINT, SOURCE_HISTORY)
        return f"; runtime estimate {self.estimate_s:.0f} s {self.estimate_source}" if learned else ""


@dataclass(frozen=True)
class Skip:
    """A held job we release unchanged, and why (goes to admin_comment and the audit)."""

    job: SlurmJob
    reason: str


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

    field: GpuRequestField  # where the user's GPU request is, and so what a placement clears
    tres: TresList
    gpus: int
    per_node: int
    nodes: int
    user_nodes: tuple[int, int | None] = (1, 1)
    user_per_node: int | None = None
    user_gpus: int | None = None


def request_shape(job: SlurmJob, max_per_node: int) -> Shape | str:
    """The shape we can steer, or the reason we release the job unchanged (see `_shape`;
    a held queue shares a few requests, so each is worked out once)."""
    return _shape(job.tres_per_task, job.tres_per_socket, job.tres_per_node, job.tres_per_job, job.node_count,
                  job.max_nodes, max_per_node)


def _shape_uncached(tres_per_task: str, tres_per_socket: str, tres_per_node: str, tres_per_job: str,
                    node_count: int, max_nodes: int, max_per_node: int) -> Shape | str:
    """The shape we can steer, or the reason we release the job unchanged (`_shape` is this, cached).

    Node counts as Slurm gives them: a per-node request (`--gres`, `--gpus-per-node`)
    without `-N` runs on exactly one node (squeue's node_count 1), with `-N N` on N; we
    steer it on its node_count nodes, the fewest Slurm would use. `--gpus=N` (per job)
    may span 1..N nodes without `-N`; we steer only the one-node case (N GPUs on one node,
    within that range). Repeated GRES entries count as Slurm counts them (the last of a
    type wins: `--gres=gpu:1,gpu:1` is one GPU).
    """
    if parsed_tres(tres_per_task).gpu_count or parsed_tres(tres_per_socket).gpu_count:
        return "GPUs per task or per socket: placed by Slurm (not expressible as per-slot types)"
    per_node, per_job = parsed_tres(tres_per_node), parsed_tres(tres_per_job)
    if per_node.gpu_count and per_job.gpu_count:
        return "GPUs requested per node and per job: placed by Slurm"
    tres, fld = (per_node, GpuRequestField.PER_NODE) if per_node.gpu_count else (per_job, GpuRequestField.PER_JOB)
    if not tres.gpu_count:
        return "no GPUs requested"
    # the per-slot request replaces TresPerNode whole: for `--gpus` too its other entries must be readable
    unread = tres.unparsed + (per_node.unparsed if fld is GpuRequestField.PER_JOB else ())
    if unread:
        return f"unreadable request {','.join(unread)!r}: placed by Slurm"
    if tres.gpu_types:
        return f"asks for GPU type {','.join(tres.gpu_types)}: not moved"
    n = tres.gpu_count
    lo = max(node_count, 1)
    # without -N (squeue's max_nodes 0) a per-node request runs on exactly node_count nodes
    hi = max_nodes if max_nodes and max_nodes >= lo else (lo if fld is GpuRequestField.PER_NODE else None)
    if fld is GpuRequestField.PER_NODE:
        if n > max_per_node:
            return f"{n} GPUs per node: no node has that many steerable GPUs; placed by Slurm"
        return Shape(fld, tres, n * lo, n, lo, user_nodes=(lo, hi), user_per_node=n)
    if lo > 1 or n > max_per_node:
        return f"--gpus={n} over several nodes: placed by Slurm (not expressible as per-slot types)"
    return Shape(fld, tres, n, n, 1, user_nodes=(1, min(hi or n, n)), user_gpus=n)


#: wrapped here rather than decorated: mutmut leaves decorated functions unmutated (docs/mutation.md)
_shape = lru_cache(maxsize=4096)(_shape_uncached)


def allowed_mask(job: SlurmJob, view: View, shape: Shape, *, now: bool = True) -> np.ndarray | str:
    """The nodes the job may use (partition, state, features, exclusions, CPUs, memory) as a
    boolean array over the view's node indices, or why the job is not moved.

    now=False: the nodes that could ever take the job (partition, features, exclusions, the
    node's CPUs and memory), whatever their state and load: a node that is down, still
    registering after a slurmctld restart, or busy makes a job wait, not leave our hands."""
    key = _constraints(job, shape)
    return key if isinstance(key, str) else _mask(view, key, now=now)


def _constraints(job: SlurmJob, shape: Shape) -> tuple[str, str, str, bool, int, int] | str:
    """What limits the nodes a job may use (partition, features, exclusions, exclusive, CPUs
    and memory on each node), or why the job is not moved. Held jobs share a few such sets:
    each set's masks are computed once a cycle."""
    if job.required_nodes:
        return "names nodes: not moved"
    feats = job.features.strip()
    if feats and not _SIMPLE_FEATURES.match(feats):
        return f"feature expression {feats!r}: placed by Slurm"
    cpus = max(job.min_cpus_per_node, -(-job.cpus // shape.nodes))
    return (job.partition, feats, job.excluded_nodes, job.exclusive, cpus, job.memory_on_node_mb())


def _mask(view: View, constraints: tuple[str, str, str, bool, int, int], *, now: bool) -> np.ndarray:
    """`allowed_mask` for one set of constraints (cached on the cycle's table)."""
    partition, feats, excluded_nodes, exclusive, cpus, mem = constraints
    table = view.table
    key = (*constraints, now)
    cached = table._masks.get(key)
    if cached is not None:
        return cached
    mask = table.schedulable.copy() if now else np.ones_like(table.schedulable)
    parts = {p for p in partition.split(",") if p}
    if parts:
        in_part = np.zeros_like(mask)
        for p in parts:
            in_part |= table.partition(p)
        mask &= in_part
    for f in (feats.split("&") if feats else ()):
        mask &= table.feature(f)
    for name in expand_nodes(excluded_nodes):
        i = view.node_index.get(name)
        if i is not None:
            mask[i] = False
    if exclusive and now:
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
    verdicts: dict[tuple[object, ...], _Verdict] = {}  # a held queue shares a few (constraints, shape)
    for h in held:
        job = h.job
        shape = request_shape(job, max_per_node)
        if isinstance(shape, str):
            out.skips.append(Skip(job, shape))
            continue
        constraints = _constraints(job, shape)
        if isinstance(constraints, str):
            out.skips.append(Skip(job, constraints))
            continue
        key = (constraints, shape.per_node, shape.nodes)
        verdict = verdicts.get(key)
        if verdict is None:
            verdict = verdicts[key] = _verdict(view, constraints, shape)
        if verdict.skip:
            out.skips.append(Skip(job, verdict.skip))
            continue
        if verdict.waiting:
            out.waiting[job.job_id] = verdict.waiting
        # every steerable job goes to the policy, also one that cannot start now: in queue
        # order it may be the head a backfilling policy reserves GPUs for. One node: the
        # policy's one-node choice; several: the same slots on each (one per-node request)
        out.requests.append(JobRequest(
            id=job.job_id, gpus=shape.gpus, job_class=h.job_class, submit_time=job.submit_time,
            gpus_per_node=shape.per_node if shape.nodes > 1 else None, min_nodes=shape.nodes, max_nodes=shape.nodes,
            allowed_nodes=verdict.allowed, same_slots=shape.nodes > 1, remaining_s=h.estimate_s,
            tier=h.tier, priority=h.priority))
        out.shapes[job.job_id] = shape
        out.held[job.job_id] = h
    return out


@dataclass(frozen=True)
class _Verdict:
    """What one set of constraints and one shape mean this cycle: `skip` (released unchanged,
    why), else `waiting` (why it cannot start now; "" when it can) and the nodes allowed."""

    skip: str = ""
    waiting: str = ""
    allowed: frozenset[int] = frozenset()


def _verdict(view: View, constraints: tuple[str, str, str, bool, int, int], shape: Shape) -> _Verdict:
    table = view.table
    mask = _mask(view, constraints, now=True)
    possible = _mask(view, constraints, now=False)
    if np.count_nonzero(possible & (table.gpus >= shape.per_node)) < shape.nodes:
        # not even an empty, healthy cluster could take it on the nodes it may use
        return _Verdict(skip=f"needs {shape.nodes} node(s) with {shape.per_node} steerable GPUs among "
                             f"the nodes it may use ({np.count_nonzero(possible)}): placed by Slurm")
    waiting = ""
    if not np.any(mask & (table.free_gpus >= shape.per_node)):
        waiting = f"no node it may use has {shape.per_node} free steerable GPUs"
    elif np.count_nonzero(mask & (table.gpus >= shape.per_node)) < shape.nodes:
        waiting = f"fewer than {shape.nodes} node(s) it may use can take it now"
    return _Verdict(waiting=waiting, allowed=table.as_set(mask))
