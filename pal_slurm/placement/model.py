"""The shared vocabulary of placement: frozen dataclasses in, a decision out.

A `Cluster` is the static part (topology and per-GPU variability per job class); a
`Snapshot` adds what is free and what runs where at the moment of one decision; a
`JobRequest` is what a job asks for. Policies (pal_slurm.placement.policies) map
(snapshot, ordered queue, context) -> `Decision`; a `PolicyRow` is one row of their table.

GPU ids are dense ints 0..n-1 in node-major order (the PAL artifact's `4*node + local`
on a uniform 4-GPU cluster), so policies can index tuples instead of hashing names.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Generic, TypeVar

from pal_slurm.errors import PalError

#: The job classes, most variability-sensitive first (PAL's A-D). The one definition: the
#: configuration, the policies and the trace readers use it, and tests check the submit
#: filter's (job_submit.lua) and the SPANK plugin's (pal_spank.c) copies against it.
JOB_CLASSES: tuple[str, ...] = ("A", "B", "C", "D")

#: The policy the placer runs and the simulator compares unless told otherwise: first fit
#: unless variability pays for a change (pal_slurm.placement.guarded).
DEFAULT_POLICY = "pal-guard"

#: A job of a class nobody measured is treated as the most sensitive one (PAL's worst case).
DEFAULT_CLASS = "A"


class PlacementError(PalError, ValueError):
    """A bad placement input: an unknown policy or queue order, a snapshot naming GPUs that do
    not exist. A ValueError too, so callers validating names may catch either."""


P = TypeVar("P")


@dataclass(frozen=True)
class PolicyRow(Generic[P]):
    """One row of the policy table (pal_slurm.placement.table): what users see of a policy and
    how it is built.

    Why here, in the vocabulary: the configuration, the CLI and error messages read the rows
    at every command's start, so a row is plain data that imports no numpy; and a built policy
    keeps its row (its name, description and stickiness) without the mechanisms importing the
    table that builds them. `P` is the policy type (pal_slurm.placement.base.Policy), left open
    here so that this module needs nothing from the modules that implement it.
    """

    name: str
    description: str
    #: how a caller calls the policy: True, running jobs keep their GPUs (only waiting jobs
    #: and the GPUs they do not hold are passed); False, the caller may re-place everything
    #: each round (every job, every GPU free)
    sticky: bool
    #: the policy, composed from its parts (a mechanism, a chooser, an estimator, a wait rule)
    build: Callable[[PolicyRow[P]], P]

    def policy(self) -> P:
        """A fresh policy of this row."""
        return self.build(self)


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
    #: What other modules derive from the cluster once and keep with it, by name (the numpy
    #: views policies rank by: `placement.index.cluster_index`). Not part of the cluster's value:
    #: equal clusters compare equal whatever has been derived from them.
    derived: dict[str, object] = field(default_factory=dict, init=False, repr=False, compare=False)

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

    The *shape* is what no policy may change (Slurm would give the job exactly this):

    - `gpus`: the total;
    - `gpus_per_node`, when set: exactly that many GPUs on each of gpus / gpus_per_node
      nodes (how `--gres`/`--gpus-per-node` with `-N` work);
    - `min_nodes` .. `max_nodes`: how many nodes the job may span. None for `max_nodes`
      means "as many as it has GPUs" (`--gpus=N` without `-N`, and every trace job of the
      simulators, which may be split freely as in the PAL artifact). A `--gres=gpu:2` job
      without `-N` has max_nodes 1: one node, two GPUs on it.

    `allowed_nodes` (node indices) carries partitions, features and user pins; None = any
    node. `tier` and `priority` are Slurm's rank of the job (partition PriorityTier, the
    priority Slurm reports); the "slurm" queue order sorts by them (0 in simulation).
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
    min_nodes: int = 1
    max_nodes: int | None = None
    tier: int = 0
    priority: float = 0.0

    def __post_init__(self) -> None:
        if self.gpus < 1:
            raise ValueError(f"job {self.id}: needs at least one GPU, asks for {self.gpus}")
        if self.gpus_per_node is not None and (self.gpus_per_node < 1 or self.gpus % self.gpus_per_node):
            raise ValueError(f"job {self.id}: {self.gpus} GPUs cannot be split {self.gpus_per_node} per node")
        if self.min_nodes < 1 or (self.max_nodes is not None and self.max_nodes < self.min_nodes):
            raise ValueError(f"job {self.id}: node range {self.min_nodes}..{self.max_nodes} is empty")
        if self.min_nodes > self.gpus:
            raise ValueError(f"job {self.id}: {self.gpus} GPUs cannot span {self.min_nodes} nodes")
        if self.gpus_per_node is not None:
            k = self.gpus // self.gpus_per_node
            if not self.min_nodes <= k <= (self.max_nodes or k):
                raise ValueError(f"job {self.id}: {self.gpus_per_node} per node means {k} nodes, outside "
                                 f"{self.min_nodes}..{self.max_nodes}")
        elif self.min_nodes > 1:
            # Slurm splits such a job as it likes (`--gpus=4 -N2`: 1+3 or 2+2); no policy here
            # can promise that split, so the caller must state GPUs per node or not steer it
            raise ValueError(f"job {self.id}: spanning at least {self.min_nodes} nodes needs gpus_per_node")

    @property
    def node_range(self) -> tuple[int, int]:
        """(fewest, most) nodes the job may span."""
        if self.gpus_per_node is not None:
            k = self.gpus // self.gpus_per_node
            return k, k
        return self.min_nodes, min(self.max_nodes or self.gpus, self.gpus)

    @property
    def one_node(self) -> bool:
        """The job must run on exactly one node (a `--gres` request without `-N`)."""
        return self.node_range[1] == 1

    def shape_violation(self, gpus: Sequence[int], node_of: Sequence[int]) -> str | None:
        """Why `gpus` is not a placement of this job's shape (None when it is)."""
        if len(gpus) != self.gpus or len(set(gpus)) != len(gpus):
            return f"{len(set(gpus))} distinct GPUs for a job of {self.gpus}"
        per: dict[int, int] = {}
        for g in gpus:
            per[node_of[g]] = per.get(node_of[g], 0) + 1
        lo, hi = self.node_range
        if not lo <= len(per) <= hi:
            return f"spans {len(per)} node(s), the job may span {lo}..{hi}"
        if self.gpus_per_node is not None and set(per.values()) != {self.gpus_per_node}:
            return f"{sorted(per.values())} GPUs per node, the job asks for {self.gpus_per_node} on each"
        if self.allowed_nodes is not None and not set(per) <= self.allowed_nodes:
            return "uses a node the job may not use"
        return None


@dataclass(frozen=True)
class Releasing:
    """A node's GPUs being given back with no job holding them (the daemon sees them busy in
    the node's gres_used after their job ended): an entry of a snapshot's `running` and
    `expected_end`, keyed by this marker so that no job id can be taken for it, nor it for a job."""

    node: str


#: what a snapshot's running entries are keyed by: a job id, or GPUs being given back
RunningKey = str | Releasing


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
    running: Mapping[RunningKey, tuple[int, ...]] = field(default_factory=dict)
    now: float | None = None
    expected_end: Mapping[RunningKey, float] = field(default_factory=dict)
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


#: How long a job may wait for better GPUs (pal-backfill's waiting), as a fraction of its
#: estimated run time and in seconds; the simulator and the daemon share these defaults
#: (the daemon's come from [placer] wait_fraction / max_wait_s, which default to them).
#: Measured (event mode, six Sia-Philly traces, docs/simulation.md): a cap of 10 % of the
#: estimate, or any cap in hours, gives back much of the gain (the jobs worth moving off
#: a 2.8x-slow GPU run for days); half the estimate keeps it within 3 % (geomean).
WAIT_FRACTION = 0.5
MAX_WAIT_S = math.inf

#: Relative differences of PerfVar below which two GPUs count as equally fast (the default
#: policy, pal_slurm.placement.guarded, never moves a job for less). Benchmarks repeat to
#: about 1 % (the profiler's IQR stop rule) and a GPU drifts by a few percent with its
#: temperature and power headroom, so 5 % is the smallest difference a decision can trust.
NOISE = 0.05


@dataclass
class PlacementContext:
    """Knobs and the random source of one decision; the rng is the caller's, so a seeded
    simulation is reproducible and random policies continue one stream across rounds.

    `wait_fraction` and `max_wait_s` bound waiting for better GPUs: a job waits only for a
    release expected within min(wait_fraction x its estimate, max_wait_s) of now (0 turns
    waiting off). `noise`: PerfVars closer than this fraction are equal (see NOISE)."""

    locality_penalty: float = 1.7
    rng: random.Random = field(default_factory=lambda: random.Random(0))
    wait_fraction: float = WAIT_FRACTION
    max_wait_s: float = MAX_WAIT_S
    noise: float = NOISE

    def wait_bound_s(self, estimate_s: float) -> float:
        return max(0.0, min(self.wait_fraction * estimate_s, self.max_wait_s))


@dataclass(frozen=True)
class Assignment:
    """One placed job: its GPUs, why, and the alternatives that were weighed (for `pal explain`)."""

    job_id: str
    gpus: tuple[int, ...]
    reason: str = ""
    alternatives: tuple[tuple[tuple[int, ...], float], ...] = ()
    #: these are the GPUs Slurm's own first fit would give the job: no variability choice
    #: was made, so the daemon may leave the job to Slurm (a multi-node first fit may use
    #: different slots per node, which one per-node GRES request cannot name)
    first_fit: bool = False
    #: a variability choice of pal-guard's: the GPUs first fit would have given at the same
    #: point of the decision (what the enforce-mode accounting compares with, for free)
    instead_of: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Wait:
    """A job that could start now but waits on purpose for better GPUs (pal-backfill):
    the GPUs it waits for, when they are expected to be free, and how much sooner it is
    then expected to finish than if it started now (for the audit and `pal explain`)."""

    job_id: str
    gpus: tuple[int, ...]
    free_at: float
    sooner_s: float


@dataclass(frozen=True)
class Decision:
    """Placements in the order they were made; `blocked` is the job that stopped placement
    (the head of line that did not fit), None when every job was placed or skipped.

    `waits`: jobs that wait on purpose for better GPUs. `refused`: (job id, why) for
    assignments the policy made that broke the job's shape and were dropped by
    `Policy.place` (a policy bug; always empty for the policies of the table, which the
    invariant tests check)."""

    assignments: tuple[Assignment, ...]
    blocked: str | None = None
    waits: tuple[Wait, ...] = ()
    refused: tuple[tuple[str, str], ...] = ()

    def as_dict(self) -> dict[str, tuple[int, ...]]:
        return {a.job_id: a.gpus for a in self.assignments}
