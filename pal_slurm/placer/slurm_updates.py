"""From a placement decision back to Slurm (pure): the update a job gets, the check that it keeps the
user's shape, the tag it carries, and the rescue of placements that cannot start.

Why apart: what Slurm is told is the one place a wrong policy, a wrong plan or a wrong
rendering would reshape a user's job; here it is read back from the update itself and
checked against the user's request before Slurm sees it, and checked again once Slurm took
it. Pure like the placer's other rules (see pal_slurm.placer.shapes).

Rules (docs/admin-guide.md, "What the placer touches"):
- An update never gives a job another shape than its user asked for (node count, GPUs per
  node, GPUs in all), and sets the same slots on every node.
- A placed job's admin_comment records the request its user made (`was=tres_per_node:...`,
  pal_slurm.placer.tag), so a re-plan or a rescue can put it back.
- Nobody is stranded by a placement: a job we placed that cannot start as it stands
  (BadConstraints, priority 0 without anyone's hold, a pinned node gone, down or drained,
  or lacking a slot type we set) gets its request restored and is released; where Slurm
  will not take the untyped request back (22.05), a per-slot request of the user's shape does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from pal_slurm.placer.cluster_view import Slot, View, node_slots
from pal_slurm.placer.holds import HELD_BY_SOMEONE, is_placed_by_pal
from pal_slurm.placer.shapes import Shape, allowed_mask, request_shape
from pal_slurm.placer.tag import PLACED, Tag
from pal_slurm.slurm.gresconf import natural_key as _natural
from pal_slurm.slurm.hostlist import expand_nodes
from pal_slurm.slurm.model import GpuRequestField, SlurmJob, SlurmNode
from pal_slurm.slurm.tres import GresItem, parsed_tres, typed_gpu_request


@dataclass(frozen=True)
class Update:
    """What to do to one job in Slurm: clear its GPU field, set the typed request and nodes."""

    job_id: str
    clear_field: str  # TresPerNode | TresPerJob
    tres_per_node: str
    node_list: str
    slots: tuple[Slot, ...]
    original: tuple[str, str]  # (field, value) to restore on failure


def _others(job: SlurmJob, shape: Shape) -> tuple[GresItem, ...]:
    """The non-GPU GRES the per-slot request keeps: the steered field's, and for a `--gpus`
    request (TresPerJob) also the per-node ones (`--gres=mps:10`) that TresPerNode holds now,
    which setting TresPerNode would otherwise drop."""
    others = shape.tres.without_gpus().items
    if shape.field is GpuRequestField.PER_NODE:
        return others
    per_node = parsed_tres(job.tres_per_node).without_gpus().items
    return per_node + tuple(i for i in others if (i.name, i.type) not in {(p.name, p.type) for p in per_node})


def update_for(job: SlurmJob, shape: Shape, gpus: Sequence[int], view: View) -> Update:
    """The per-slot request for the chosen GPUs (the same slots on every node)."""
    chosen = [view.slots[g] for g in sorted(gpus)]
    nodes = sorted({s.node for s in chosen}, key=_natural)
    first = [s for s in chosen if s.node == nodes[0]]
    request = typed_gpu_request(shape.tres.prefix, {s.gres_type: 1 for s in first}, others=_others(job, shape))
    return Update(job_id=job.job_id, clear_field=shape.field.scontrol_key, tres_per_node=request,
                  node_list=",".join(nodes), slots=tuple(chosen), original=(shape.field, shape.field.of(job)))


def summary(update: Update, job_class: str, policy: str, version: int | None, factors: Sequence[float],
            now: float) -> Tag:
    """The tag of a placed job (the writer adds the user's request and the site's comment)."""
    where = ";".join(f"{n}:" + ",".join(str(s.minor) for s in update.slots if s.node == n)
                     for n in dict.fromkeys(s.node for s in update.slots))
    return Tag(head=PLACED, job_class=job_class, intent=update.tres_per_node, nodes=update.node_list, gpus=where,
               sf=",".join(f"{f:.3f}" for f in factors), policy=policy, version=version, at=int(now))


def matches(job: SlurmJob, update: Update) -> bool:
    """Did Slurm take the update? (its request and required nodes read back as we set them)."""
    got = sorted((i.type, i.count) for i in parsed_tres(job.tres_per_node).gpu_items)
    want = sorted((i.type, i.count) for i in parsed_tres(update.tres_per_node).gpu_items)
    return got == want and set(expand_nodes(job.required_nodes)) == set(update.node_list.split(","))


def check_update(shape: Shape, update: Update) -> str | None:
    """Why `update` would give the job another shape than the user asked for (None: same).

    What the update sets is read back from the update itself (node list, per-slot request,
    slots), not from the decision that produced it, so a wrong policy, a wrong plan or a
    wrong rendering are all caught before Slurm sees them."""
    nodes = [n for n in update.node_list.split(",") if n]
    per_slot = parsed_tres(update.tres_per_node).gpu_items
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
        # a placement of another shape (what earlier placers made of a `--gpus=N -N1` job: one
        # per-slot GPU on each of N nodes): Slurm turns it into a job it will refuse to start
        # (BadConstraints, on 22.05) or runs it reshaped (24.11)
        return f"pinned to {len(pinned)} nodes, the job may span {most}"
    types = [i.type for i in parsed_tres(job.tres_per_node).gpu_items if i.type]
    for name in pinned:
        node = nodes.get(name)
        if node is None:
            return f"its node {name} no longer exists"
        gone = node.out_of_service
        if gone:
            return f"its node {name} is {','.join(sorted(gone)).lower()}"
        have = {t for _m, t in node_slots(node.gres)}
        missing = [t for t in types if t not in have]
        if missing:
            return f"its node {name} has no GPU slot {','.join(missing)}"
    return None


def as_submitted(job: SlurmJob) -> SlurmJob:
    """The job with the request its user made (recorded in our tag, `was=...`), and the
    user's node list: what a re-plan or a rescue plans from."""
    tag = Tag.parse(job.admin_comment)
    req = tag.user_request() if tag is not None else None
    if req is None:
        return job
    return replace(job, tres_per_node=req["tres_per_node"], tres_per_job=req["tres_per_job"],
                   required_nodes=req["required_nodes"])


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
            request = typed_gpu_request(shape.tres.prefix, {t: 1 for t in types}, others=_others(user, shape))
            return Update(job_id=job.job_id, clear_field="TresPerNode", tres_per_node=request, node_list="",
                          slots=(), original=(shape.field, shape.field.of(user)))
    return None

