"""Per-GPU slowdown factors for the placer, from the latest classification (database adapter).

Why a cache: the placer must keep placing when the database is down, with the classes
already in memory (docs/admin-guide.md, "Failure modes"). `FactorCache.get()` returns the last
good load, stamped with the time of the clock the cycle runs on; only when nothing was ever
loaded does the daemon release jobs unchanged. The daemon reads it on its database thread
(`runner`, pal_slurm.placer.db_worker), so a slow database never slows a cycle.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import Engine

from pal_slurm.db.engine import session_scope
from pal_slurm.db.migrate import require_current
from pal_slurm.db.variability_store import load_variability
from pal_slurm.placement.variability import GpuVariability
from pal_slurm.placer.db_worker import Runner
from pal_slurm.placer.refresh import Refreshed

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Factors:
    """(node name, device minor) -> the GPU's variability per job class; `version` of the run."""

    by_slot: dict[tuple[str, int], GpuVariability]
    version: int | None
    loaded_at: float

    @classmethod
    def empty(cls) -> Factors:
        return cls(by_slot={}, version=None, loaded_at=0.0)


def load_factors(engine: Engine, classes: Sequence[str], *, loaded_at: float | None = None,
                 passive_min_paced: int | None = None, benchmark_noise: float = 0.02) -> Factors:
    """Read the latest classification (the loader the simulator uses too); GPUs without a
    node or minor number cannot be steered and are skipped. A schema behind this pal is an
    error here (its placements could not be recorded): the daemon then places nothing and
    says to run `pal db upgrade`. `loaded_at`: the time to stamp (the cache's clock; now when
    not given). `passive_min_paced` ([classification] passive = use): a GPU's passive factor
    replaces its benchmark factor for a class where it paced at least that many jobs and
    contradicts the benchmark beyond both uncertainties (`with_passive`)."""
    require_current(engine)
    with session_scope(engine) as session:
        stored = load_variability(session, classes)
        passive = None
        if passive_min_paced is not None:
            from pal_slurm.db.passive_store import load_passive

            passive = load_passive(session)
    gpus = stored.gpus if passive is None else [
        with_passive(v, passive.get(v.uuid or "", {}), passive_min_paced or 1, benchmark_noise) for v in stored.gpus]
    out = {(v.node, int(v.minor)): v for v in gpus if v.node is not None and v.minor is not None}
    return Factors(by_slot=out, version=stored.version, loaded_at=time.time() if loaded_at is None else loaded_at)


def with_passive(gpu: GpuVariability, passive: Mapping[str, Any], min_paced: int,
                 benchmark_noise: float = 0.02) -> GpuVariability:
    """`gpu` placed by its passive factor for each class where placement takes it
    (classification.passive_use.placement_takes: enough paced jobs, and the passive interval and the
    benchmark's apart); its benchmark's elsewhere (pure). Both the PerfVar (what pal-guard ranks by)
    and the slowdown factor (what the artifact's policies rank by) take it, as the simulator's
    passive belief does."""
    from pal_slurm.classification.passive_use import placement_takes

    use = {c: float(p.factor) for c, p in passive.items()
           if c in gpu.slowdown and placement_takes(p, gpu.perfvar.get(c, gpu.slowdown[c]), min_paced=min_paced,
                                                    benchmark_noise=benchmark_noise)}
    if not use:
        return gpu
    return dataclasses.replace(gpu, slowdown={**gpu.slowdown, **use}, perfvar={**gpu.perfvar, **use})


class FactorCache:
    """Reload at most every `refresh_s` of `clock`; on a database error keep the previous
    factors and try again within 10 s."""

    def __init__(self, engine_factory: Any, refresh_s: float = 60.0, classes: Sequence[str] = ("A", "B", "C", "D"),
                 clock: Callable[[], float] = time.time, runner: Runner | None = None,
                 passive_min_paced: int | None = None, benchmark_noise: float = 0.02) -> None:
        self._engine_factory = engine_factory
        self.passive_min_paced = passive_min_paced
        self.benchmark_noise = benchmark_noise
        self.classes = tuple(classes)
        self.refresh_s = refresh_s
        self._cache: Refreshed[Factors] = Refreshed(self._load, refresh_s, initial=Factors.empty(), clock=clock,
                                                    retry_s=min(refresh_s, 10.0), on_error=self._kept,
                                                    runner=runner, key="classes")

    @property
    def factors(self) -> Factors:
        return self._cache.value

    @property
    def last_error(self) -> str | None:
        return self._cache.last_error

    def get(self, now: float | None = None) -> Factors:
        return self._cache.get(now)

    @property
    def settled(self) -> bool:
        """False only while the first read is still in flight (the daemon's first cycles)."""
        return self._cache.settled

    def _load(self, now: float) -> Factors:
        loaded = load_factors(self._engine_factory(), self.classes, loaded_at=now,
                              passive_min_paced=self.passive_min_paced, benchmark_noise=self.benchmark_noise)
        if loaded.version != self.factors.version:
            log.info("classes loaded: version %s, %d steerable GPUs", loaded.version, len(loaded.by_slot))
        return loaded

    def _kept(self, error: str) -> None:
        log.warning("classes not reloaded (%s); placing with %s", error,
                    f"version {self.factors.version} from memory" if self.factors.by_slot else "none")
