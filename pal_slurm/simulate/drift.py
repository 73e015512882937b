"""Drifting fleets: GPUs that turn slower during a run, and what the scheduler believes of them
(docs/simulation.md, "Drifting fleets"). Pure: a fleet and a spec in, the truth over time and a
belief out; the event simulator (pal_slurm.simulate.event, `simulate_events(..., drift=...)`)
asks them.

**The model.** A `DriftSpec` picks a share of the GPUs (seeded) and, for each, a moment (one of
`at_hours`, round robin, or uniform over `span_hours`) from which its true PerfVar for the
compute classes is its PerfVar at t = 0 times `factor`; a `recover_share` of them is fixable:
a re-profile of such a GPU (a reset, a reseated card, a restored power limit) brings it back to
its t = 0 speed, while the others stay slow and the re-profile only measures them. `TrueFleet`
holds the truth as it moves: what slows a job's progress.

**Truth and belief are apart.** A policy ranks by a `Belief`'s cluster, never by the truth:
`FixedBelief` keeps the benchmark snapshot of t = 0 for ever; `OracleBelief` knows every change
the moment it happens (and re-profiles each drifted GPU a fixed delay after its drift: the best
any detector could do); pal_slurm.simulate.learning's `PassiveBelief` learns from finished jobs
as `pal gpus learn` does. A re-profile is the one way a belief reads the truth: it measures the
GPU as it is then (after the repair where the GPU is fixable), as a benchmark would.

**A job running when its GPU's pace changes** runs its remaining work at the new pace: a job
holds a GPU for hours, and a slowdown that begins mid-job slows the rest of it (the simulator
works the job's end out again; its tax is charged stretch by stretch). Freezing the pace at the
start would hide a drift from every job already running on the GPU, and a repair from them too.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from pal_slurm.placement.model import JOB_CLASSES, Cluster
from pal_slurm.simulate.fleets import COMPUTE_CLASSES
from pal_slurm.simulate.traces import TraceJob

__all__ = ["Belief", "DriftSpec", "Drifting", "FixedBelief", "OracleBelief", "Slowdown", "TrueFleet", "draw",
           "with_factors"]

HOUR = 3600.0


@dataclass(frozen=True)
class DriftSpec:
    """A share of the GPUs slows by `factor` for `classes`, each at one of `at_hours` (round robin
    over the drifted GPUs in id order) or, when none is given, at a moment drawn uniformly over
    the first `span_hours`; `recover_share` of them is fixable by a re-profile. `seed` draws which
    GPUs, when and which recover."""

    share: float = 0.05
    factor: float = 1.3
    at_hours: tuple[float, ...] = ()
    span_hours: float = 30 * 24.0
    recover_share: float = 0.5
    seed: int = 1
    classes: tuple[str, ...] = COMPUTE_CLASSES

    def __post_init__(self) -> None:
        if not (math.isfinite(self.share) and 0 <= self.share <= 1):
            raise ValueError(f"drift share must be in [0, 1], got {self.share!r}")
        if not (math.isfinite(self.factor) and self.factor > 0):
            raise ValueError(f"drift factor must be a positive number, got {self.factor!r}")
        if not (math.isfinite(self.recover_share) and 0 <= self.recover_share <= 1):
            raise ValueError(f"recover share must be in [0, 1], got {self.recover_share!r}")
        if not (math.isfinite(self.span_hours) and self.span_hours >= 0):
            raise ValueError(f"span must be >= 0 hours, got {self.span_hours!r}")
        if any(not (math.isfinite(h) and h >= 0) for h in self.at_hours):
            raise ValueError(f"drift times must be >= 0 hours, got {self.at_hours!r}")
        unknown = sorted(set(self.classes) - set(JOB_CLASSES))
        if unknown:
            raise ValueError(f"drift classes: unknown class(es) {', '.join(unknown)}")


@dataclass(frozen=True, slots=True)
class Slowdown:
    """One drifted GPU: from `at_s` it runs `factor` x its t = 0 PerfVar; `recovers`: a re-profile fixes it."""

    gpu: int
    at_s: float
    factor: float
    recovers: bool


def draw(spec: DriftSpec, n_gpus: int) -> tuple[Slowdown, ...]:
    """The drifted GPUs of `spec` on a fleet of `n_gpus`, in the order they drift (ties: GPU id).
    round(share x GPUs) of them, halves up; round(recover_share x those) recover."""
    rng = random.Random(spec.seed)
    k = int(math.floor(spec.share * n_gpus + 0.5))
    gpus = sorted(rng.sample(range(n_gpus), k))
    if spec.at_hours:
        times = [spec.at_hours[i % len(spec.at_hours)] * HOUR for i in range(k)]
    else:
        times = [rng.uniform(0.0, spec.span_hours) * HOUR for _ in range(k)]
    fixable = set(rng.sample(gpus, int(math.floor(spec.recover_share * k + 0.5))))
    out = [Slowdown(gpu=g, at_s=t, factor=spec.factor, recovers=g in fixable) for g, t in zip(gpus, times)]
    return tuple(sorted(out, key=lambda d: (d.at_s, d.gpu)))


def with_factors(cluster: Cluster, perfvar: Mapping[str, Sequence[float]]) -> Cluster:
    """`cluster` with the classes of `perfvar` ranked by it: a policy's PerfVar (what pal-guard
    ranks by) and slowdown factor (what the artifact's policies rank by) both take it."""
    pv = {c: tuple(perfvar[c]) if c in perfvar else v for c, v in cluster.perfvar.items()}
    sf = {c: tuple(perfvar[c]) if c in perfvar else v for c, v in cluster.slowdown.items()}
    return Cluster(node_names=cluster.node_names, gpus=cluster.gpus, slowdown=sf, perfvar=pv)


class TrueFleet:
    """The GPUs' true PerfVar per class as it moves: the fleet at t = 0 (`base`), each drifted GPU
    times its factor for `classes` from its moment until a re-profile repairs it (where it recovers).
    `changed` collects the GPUs whose pace moved since it was last taken (`take_changed`)."""

    def __init__(self, base: Cluster, slowdowns: Sequence[Slowdown], classes: Sequence[str] = COMPUTE_CLASSES) -> None:
        self.base = base
        self.classes = tuple(c for c in classes if c in base.perfvar)
        self.slowdowns = tuple(sorted(slowdowns, key=lambda d: (d.at_s, d.gpu)))
        self.by_gpu = {d.gpu: d for d in self.slowdowns}
        self._pv = {c: list(v) for c, v in base.perfvar.items()}
        self._next = 0  # slowdowns[: _next] have begun
        self._slow: set[int] = set()  # GPUs slow now
        self.repaired: dict[int, float] = {}  # GPU -> when a re-profile fixed it
        self.changed: set[int] = set()
        self.version = 0  # moves with every change of the truth

    @classmethod
    def of(cls, base: Cluster, spec: DriftSpec) -> TrueFleet:
        return cls(base, draw(spec, base.size), spec.classes)

    def pv(self, job_class: str | None) -> Sequence[float]:
        """The true PerfVar of every GPU for `job_class` now (Cluster.class_key's fallback)."""
        return self._pv[self.base.class_key(job_class)]

    def perfvar(self) -> dict[str, tuple[float, ...]]:
        """Every class's true PerfVar now, as a cluster holds it."""
        return {c: tuple(v) for c, v in self._pv.items()}

    def slow(self, gpu: int) -> bool:
        """Whether `gpu` runs drifted now."""
        return gpu in self._slow

    @property
    def next_change(self) -> float:
        return self.slowdowns[self._next].at_s if self._next < len(self.slowdowns) else math.inf

    def advance(self, now: float) -> None:
        """The drifts due by `now` begin."""
        while self._next < len(self.slowdowns) and self.slowdowns[self._next].at_s <= now:
            d = self.slowdowns[self._next]
            self._next += 1
            self._set(d.gpu, d.factor)
            self._slow.add(d.gpu)

    def repair(self, gpu: int, now: float) -> bool:
        """A re-profile of `gpu` at `now`: a slow GPU that recovers is fixed (True)."""
        d = self.by_gpu.get(gpu)
        if d is None or gpu not in self._slow or not d.recovers:
            return False
        self._set(gpu, 1.0)
        self._slow.discard(gpu)
        self.repaired[gpu] = now
        return True

    def take_changed(self) -> frozenset[int]:
        out, self.changed = frozenset(self.changed), set()
        return out

    def _set(self, gpu: int, factor: float) -> None:
        for c in self.classes:
            self._pv[c][gpu] = self.base.perfvar[c][gpu] * factor
        self.changed.add(gpu)
        self.version += 1


class Belief(Protocol):
    """What one arm places by, and how it learns: `cluster` the factors a policy ranks by now."""

    cluster: Cluster

    def next_change(self) -> float:
        """The next moment the belief may move by itself (a learning tick, a re-profile; inf: never)."""
        ...

    def advance(self, now: float, fleet: TrueFleet) -> bool:
        """What is due by `now`; True when `cluster` moved. A re-profile may repair `fleet`'s GPUs
        and read their truth; nothing else of `fleet` is the belief's to read."""
        ...

    def observe(self, job: TraceJob, gpus: tuple[int, ...], start: float, end: float) -> None:
        """A finished job, as a site's accounting records it."""
        ...


class FixedBelief:
    """The benchmark snapshot of t = 0, never updated: what a site that profiled once places by."""

    def __init__(self, snapshot: Cluster) -> None:
        self.cluster = snapshot

    def next_change(self) -> float:
        return math.inf

    def advance(self, now: float, fleet: TrueFleet) -> bool:
        return False

    def observe(self, job: TraceJob, gpus: tuple[int, ...], start: float, end: float) -> None:
        return None


class OracleBelief:
    """The truth at every moment; each drifted GPU re-profiled `reprofile_delay_s` after its drift
    (a detector that catches every drift at once): the floor no learner can go below."""

    def __init__(self, fleet: TrueFleet, reprofile_delay_s: float = 2 * HOUR) -> None:
        self.cluster = with_factors(fleet.base, fleet.perfvar())
        self._repairs = sorted((d.at_s + reprofile_delay_s, d.gpu) for d in fleet.slowdowns)
        self._next = 0
        self._seen = fleet.version

    def next_change(self) -> float:
        return self._repairs[self._next][0] if self._next < len(self._repairs) else math.inf

    def advance(self, now: float, fleet: TrueFleet) -> bool:
        while self._next < len(self._repairs) and self._repairs[self._next][0] <= now:
            fleet.repair(self._repairs[self._next][1], now)
            self._next += 1
        if fleet.version == self._seen:
            return False
        self._seen = fleet.version
        self.cluster = with_factors(fleet.base, fleet.perfvar())
        return True

    def observe(self, job: TraceJob, gpus: tuple[int, ...], start: float, end: float) -> None:
        return None


class Drifting:
    """A run's drifting fleet, as the event simulator asks it (event.Drift): the truth, and the
    belief of one arm (FixedBelief, OracleBelief, learning.PassiveBelief)."""

    def __init__(self, fleet: TrueFleet, belief: Belief) -> None:
        self.fleet = fleet
        self.belief = belief

    @property
    def believed(self) -> Cluster:
        return self.belief.cluster

    def next_change(self) -> float:
        return min(self.fleet.next_change, self.belief.next_change())

    def advance(self, now: float) -> tuple[frozenset[int], bool]:
        self.fleet.advance(now)
        moved = self.belief.advance(now, self.fleet)
        return self.fleet.take_changed(), moved

    def pace(self, job_class: str | None, gpus: Sequence[int]) -> float:
        return max(map(self.fleet.pv(job_class).__getitem__, gpus))

    def finished(self, job: TraceJob, gpus: tuple[int, ...], start: float, end: float) -> None:
        self.belief.observe(job, gpus, start, end)
