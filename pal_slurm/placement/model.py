"""The shared vocabulary of placement: frozen dataclasses in, a decision out.

A `Cluster` is the static part (topology and per-GPU variability per job class); a
`Snapshot` adds what is free and what runs where at the moment of one decision; a
`JobRequest` is what a job asks for. Policies (pal_slurm.placement.policies) map
(snapshot, ordered queue, context) -> `Decision`.

GPU ids are dense ints 0..n-1 in node-major order (the PAL artifact's `4*node + local`
on a uniform 4-GPU cluster), so policies can index tuples instead of hashing names.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

from pal_slurm.errors import PalError

if TYPE_CHECKING:
    from pal_slurm.placement.index import ClusterIndex

#: A job of a class nobody measured is treated as the most sensitive one (PAL's worst case).
DEFAULT_CLASS = "A"


class PlacementError(PalError, ValueError):
    """A bad placement input: an unknown policy or queue order, a snapshot naming GPUs that do
    not exist. A ValueError too, so callers validating names may catch either."""


@dataclass(frozen=True, slots=True)
class GpuRef:
    """Where a GPU is: dense id, node index, local slot on the node, and its UUID when known."""

    id: int
    node: int
    slot: int
    uuid: str | None = None


@dataclass(frozen=True)
class Cluster:
    """Topology plus variability, fixed for the life of a simulation or a daemon cycle.

    `slowdown[c][g]` is GPU g's binned slowdown factor for job class c (what policies rank
    by); `perfvar[c][g]` is its raw PerfVar (what the simulator slows progress by).
    """

    node_names: tuple[str, ...]
    gpus: tuple[GpuRef, ...]
    slowdown: Mapping[str, tuple[float, ...]]
    perfvar: Mapping[str, tuple[float, ...]]

    def __post_init__(self) -> None:
        n = len(self.gpus)
        for i, g in enumerate(self.gpus):
            if g.id != i:
                raise ValueError(f"GPU ids must be dense and ordered: position {i} has id {g.id}")
            if not 0 <= g.node < len(self.node_names):
                raise ValueError(f"GPU {i} is on node {g.node}, which does not exist")
        for name, table in (("slowdown", self.slowdown), ("perfvar", self.perfvar)):
            for cls, values in table.items():
                if len(values) != n:
                    raise ValueError(f"{name}[{cls!r}] has {len(values)} values for {n} GPUs")

    @property
    def size(self) -> int:
        return len(self.gpus)

    @cached_property
    def node_gpus(self) -> tuple[tuple[int, ...], ...]:
        """GPU ids of each node, ascending."""
        out: list[list[int]] = [[] for _ in self.node_names]
        for g in self.gpus:
            out[g.node].append(g.id)
        return tuple(tuple(ids) for ids in out)

    @cached_property
    def node_of(self) -> tuple[int, ...]:
        return tuple(g.node for g in self.gpus)

    @cached_property
    def max_gpus_per_node(self) -> int:
        return max((len(ids) for ids in self.node_gpus), default=0)

    @cached_property
    def placement_index(self) -> "ClusterIndex":
        """Numpy views policies rank by, built once per cluster (imported lazily so this
        module stays free of numpy)."""
        from pal_slurm.placement.index import ClusterIndex

        return ClusterIndex(self)

    def class_key(self, job_class: str | None) -> str:
        """The class whose factors apply: unknown or unmeasured classes fall back to A."""
        if job_class is not None and job_class in self.slowdown:
            return job_class
        return DEFAULT_CLASS if DEFAULT_CLASS in self.slowdown else next(iter(self.slowdown))

    def sf(self, job_class: str | None) -> tuple[float, ...]:
        return self.slowdown[self.class_key(job_class)]

    def pv(self, job_class: str | None) -> tuple[float, ...]:
        return self.perfvar[self.class_key(job_class)]

    @classmethod
    def uniform(cls, nodes: int, gpus_per_node: int, *, slowdown: Mapping[str, Sequence[float]] | None = None,
                perfvar: Mapping[str, Sequence[float]] | None = None, node_prefix: str = "n") -> "Cluster":
        """`nodes` x `gpus_per_node`, ids node-major; factors default to 1.0 for class A."""
        n = nodes * gpus_per_node
        gpus = tuple(GpuRef(id=i, node=i // gpus_per_node, slot=i % gpus_per_node) for i in range(n))
        sf = {k: tuple(float(x) for x in v) for k, v in (slowdown or {DEFAULT_CLASS: [1.0] * n}).items()}
        pv = {k: tuple(float(x) for x in v) for k, v in (perfvar or sf).items()}
        names = tuple(f"{node_prefix}{i}" for i in range(nodes))
        return cls(node_names=names, gpus=gpus, slowdown=sf, perfvar=pv)


@dataclass(frozen=True)
class JobRequest:
    """What one job asks for, plus the progress facts queue orders need.

    `allowed_nodes` (node indices) carries partitions, features and user pins; None = any
    node. `gpus_per_node`, when set, means Slurm needs exactly that many GPUs on each of
    gpus / gpus_per_node nodes (how multi-node GRES requests work).
    """

    id: str
    gpus: int
    job_class: str | None
    submit_time: float
    gpus_per_node: int | None = None
    allowed_nodes: frozenset[int] | None = None
    attained_s: float = 0.0  # service received so far (GPU-seconds), for LAS
    remaining_s: float = 0.0  # estimated time still needed, for SRTF
    #: multi-node jobs only: the same GPU slots on every node. Slurm applies one per-node
    #: GRES request to each node of a job, so a live placement across nodes can only name
    #: slot types every chosen node has free (the simulators leave this off)
    same_slots: bool = False

    def __post_init__(self) -> None:
        if self.gpus < 1:
            raise ValueError(f"job {self.id}: needs at least one GPU, asks for {self.gpus}")
        if self.gpus_per_node is not None and (self.gpus_per_node < 1 or self.gpus % self.gpus_per_node):
            raise ValueError(f"job {self.id}: {self.gpus} GPUs cannot be split {self.gpus_per_node} per node")


@dataclass(frozen=True)
class Snapshot:
    """The moment of one decision: which GPUs are free and who holds the others.

    `now` and `expected_end` (job id -> estimated finish time of a running job, same clock
    as `now`) are optional; backfilling policies use them to tell whether starting a job
    now could delay the head of the queue. A running job without an expected end is
    assumed to run forever, which only makes backfilling more careful.
    """

    cluster: Cluster
    free: frozenset[int]
    running: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    now: float | None = None
    expected_end: Mapping[str, float] = field(default_factory=dict)
    #: `releases` when the caller keeps them sorted itself (an event simulator inserts each
    #: start and deletes each end, instead of sorting every running job before every
    #: decision); it must equal what `releases` would compute
    known_releases: tuple[tuple[float, tuple[int, ...]], ...] | None = None

    @classmethod
    def empty(cls, cluster: Cluster) -> "Snapshot":
        return cls(cluster=cluster, free=frozenset(range(cluster.size)), running={})

    @cached_property
    def releases(self) -> tuple[tuple[float, tuple[int, ...]], ...]:
        """(expected end, GPUs) of the running jobs that have one, soonest first; computed
        once per snapshot because a backfilling policy asks for it for every job it weighs."""
        if self.known_releases is not None:
            return self.known_releases
        pairs = [(end, gpus) for jid, gpus in self.running.items()
                 if (end := self.expected_end.get(jid)) is not None and end != float("inf")]
        pairs.sort(key=lambda p: (p[0], p[1]))
        return tuple(pairs)


@dataclass
class PlacementContext:
    """Knobs and the random source of one decision; the rng is the caller's, so a seeded
    simulation is reproducible and random policies continue one stream across rounds."""

    locality_penalty: float = 1.7
    rng: random.Random = field(default_factory=lambda: random.Random(0))


@dataclass(frozen=True)
class Assignment:
    """One placed job: its GPUs, why, and the alternatives that were weighed (for `pal explain`)."""

    job_id: str
    gpus: tuple[int, ...]
    reason: str = ""
    alternatives: tuple[tuple[tuple[int, ...], float], ...] = ()


@dataclass(frozen=True)
class Decision:
    """Placements in the order they were made; `blocked` is the job that stopped placement
    (the head of line that did not fit), None when every job was placed or skipped."""

    assignments: tuple[Assignment, ...]
    blocked: str | None = None

    def as_dict(self) -> dict[str, tuple[int, ...]]:
        return {a.job_id: a.gpus for a in self.assignments}
