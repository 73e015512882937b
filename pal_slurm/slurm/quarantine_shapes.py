"""Whether taking a GPU slot out of service leaves a pending job with nowhere to run (pure).

Why: a holder job keeps its slot from every other job, so a pending job that needs every GPU
of that node, more GPUs per node than are left there, that node whole (`--exclusive`: the holder
takes a CPU of it) or that slot by its type would wait until the slot is released, and a job
that needs N such nodes when only N had room would too. `pal gpus quarantine` refuses such a
quarantine (naming the jobs) unless told `--force`.

The check is about capacity, not about now: a node counts with every GPU it has configured
(running jobs end), less the slots held out of service; a job counts as placeable when enough
of the nodes it may use (its partitions, less its excluded nodes, with its required nodes and
simple `&` feature constraints) could hold its shape. A job is blocked by the new quarantine
only when it was placeable before it and is not after it: what was already unplaceable is not
this quarantine's doing. GPUs per task or per socket are not modelled: such jobs are named as
not checked.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from pal_slurm.slurm.hostlist import expand_nodes
from pal_slurm.slurm.model import SlurmJob, SlurmNode
from pal_slurm.slurm.quarantine_model import Partition, Slot, gpu_count, node_slots
from pal_slurm.slurm.tres import parsed_tres

_COMPLEX_FEATURES = set("|[]*(),")


@dataclass(frozen=True)
class Need:
    """What one pending job asks of the nodes it runs on."""

    per_node: int = 0                               # GPUs on each node (typed ones included)
    typed: tuple[tuple[str, int], ...] = ()         # (type, count) on each node
    per_job: int = 0                                # GPUs in all (--gpus)
    typed_per_job: tuple[tuple[str, int], ...] = ()
    whole: bool = False                             # every CPU of a node, or --exclusive
    nodes: int = 1                                  # how many nodes at least
    max_nodes: int | None = None

    def describe(self) -> str:
        parts = []
        if self.whole:
            parts.append("whole nodes")
        if self.typed:
            parts.append(", ".join(f"gpu:{t}:{c}" for t, c in self.typed) + " on each node")
        if self.per_node:
            parts.append(f"{self.per_node} GPU(s) on each node")
        if self.per_job:
            parts.append(f"{self.per_job} GPU(s) in all")
        return f"{' and '.join(parts) or 'nothing of a GPU'} on {self.nodes} node(s)"


def need_of(job: SlurmJob, cpus_of: Mapping[str, int]) -> Need | None:
    """A pending job's need; None when it asks for GPUs per task or per socket (not modelled)."""
    if any(parsed_tres(v).gpu_items for v in (job.tres_per_task, job.tres_per_socket)):
        return None
    node_items = parsed_tres(job.tres_per_node).gpu_items
    job_items = parsed_tres(job.tres_per_job).gpu_items
    largest = max(cpus_of.values(), default=0)
    whole = job.exclusive or (largest > 0 and job.min_cpus_per_node >= largest)
    return Need(per_node=sum(i.count for i in node_items),
                typed=tuple((i.type, i.count) for i in node_items if i.type),
                per_job=sum(i.count for i in job_items),
                typed_per_job=tuple((i.type, i.count) for i in job_items if i.type),
                whole=whole, nodes=max(job.node_count, 1), max_nodes=job.max_nodes)


@dataclass(frozen=True)
class Blocked:
    """A pending job the quarantine would leave with nowhere to run, and why."""

    job_id: str
    why: str


@dataclass(frozen=True)
class ShapeCheck:
    blocked: tuple[Blocked, ...]
    #: pending jobs whose GPU request is not modelled (per task, per socket)
    unchecked: tuple[str, ...]


def check(jobs: Iterable[SlurmJob], nodes: Sequence[SlurmNode], partitions: Sequence[Partition],
          held_out: Collection[Slot], new: Slot, skip: Collection[str] = ()) -> ShapeCheck:
    """The pending jobs (`skip`: the holders' own) the new quarantine would block, given the
    slots already held out."""
    world = _World(nodes, partitions)
    before = _by_node(held_out)
    after = _by_node([*held_out, new])
    blocked: list[Blocked] = []
    unchecked: list[str] = []
    for job in jobs:
        if not job.pending or job.job_id in skip:
            continue
        need = need_of(job, world.cpus)
        if need is None:
            unchecked.append(job.job_id)
            continue
        if not (need.per_node or need.per_job or need.whole):
            continue
        if world.fits(job, need, before) and not world.fits(job, need, after):
            blocked.append(Blocked(job.job_id, world.why(job, need, after, new)))
    return ShapeCheck(tuple(blocked), tuple(unchecked))


def _by_node(slots: Iterable[Slot]) -> dict[str, frozenset[str]]:
    out: dict[str, set[str]] = {}
    for s in slots:
        out.setdefault(s.node, set()).add(s.gres_type)
    return {n: frozenset(t) for n, t in out.items()}


class _World:
    """The nodes and partitions a check reads, indexed once."""

    def __init__(self, nodes: Sequence[SlurmNode], partitions: Sequence[Partition]) -> None:
        self.nodes = {n.name: n for n in nodes}
        self.cpus = {n.name: n.cpus for n in nodes}
        self.partitions = {p.name: p.nodes for p in partitions}

    def candidates(self, job: SlurmJob) -> list[str]:
        parts = [p for p in job.partition.split(",") if p in self.partitions]
        names = set().union(*(self.partitions[p] for p in parts)) if parts else set(self.nodes)
        names -= set(expand_nodes(job.excluded_nodes))
        wanted = job.features.strip()
        if wanted and not (_COMPLEX_FEATURES & set(wanted)):
            need = {f for f in wanted.split("&") if f}
            names = {n for n in names if n in self.nodes and need <= self.nodes[n].active_features}
        return sorted(n for n in names if n in self.nodes)

    def room(self, name: str, held: Mapping[str, frozenset[str]]) -> int:
        return gpu_count(self.nodes[name]) - len(held.get(name, ()))

    def node_fits(self, name: str, need: Need, held: Mapping[str, frozenset[str]]) -> bool:
        out = held.get(name, frozenset())
        if need.whole and out:
            return False
        if need.per_node > self.room(name, held):
            return False
        types = list(node_slots(self.nodes[name]).values())
        return all(sum(1 for t in types if t == typed and t not in out) >= count for typed, count in need.typed)

    def fits(self, job: SlurmJob, need: Need, held: Mapping[str, frozenset[str]]) -> bool:
        required = expand_nodes(job.required_nodes)
        if any(n not in self.nodes or not self.node_fits(n, need, held) for n in required):
            return False
        usable = [n for n in self.candidates(job) if self.node_fits(n, need, held)]
        usable += [n for n in required if n not in usable]
        if len(usable) < max(need.nodes, len(required)):
            return False
        if need.per_job:  # its required nodes, and the roomiest others up to its most nodes
            most = max(need.max_nodes or len(usable), len(required))
            rooms = sorted((self.room(n, held) for n in usable if n not in required), reverse=True)
            if sum(self.room(n, held) for n in required) + sum(rooms[:most - len(required)]) < need.per_job:
                return False
        for typed, count in need.typed_per_job:
            if sum(1 for n in usable for t in node_slots(self.nodes[n]).values()
                   if t == typed and t not in held.get(n, frozenset())) < count:
                return False
        return True

    def why(self, job: SlurmJob, need: Need, held: Mapping[str, frozenset[str]], new: Slot) -> str:
        wants = need.describe()
        if new.node in expand_nodes(job.required_nodes):
            left = self.room(new.node, held)
            return (f"job {job.job_id} needs {wants} and must run on {new.node}, which would have "
                    f"{left} GPU(s) left{' and a CPU taken' if need.whole else ''}")
        usable = [n for n in self.candidates(job) if self.node_fits(n, need, held)]
        return (f"job {job.job_id} needs {wants}; with {new.name} out of service {len(usable)} of the nodes it may "
                "use could hold that")


__all__ = ["Blocked", "Need", "ShapeCheck", "check", "need_of"]
