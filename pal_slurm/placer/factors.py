"""Per-GPU slowdown factors for the placer, from the latest classification (database adapter).

Why a cache: the placer must keep placing when the database is down (design: "place with
the classes already in memory"). `FactorCache.get()` returns the last good load and says
how old it is; only when nothing was ever loaded does the daemon release jobs unchanged.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import Engine

from pal_slurm.db.engine import session_scope
from pal_slurm.db.migrate import require_current
from pal_slurm.db.variability_store import load_variability
from pal_slurm.placement.variability import GpuVariability

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


def load_factors(engine: Engine, classes: Sequence[str]) -> Factors:
    """Read the latest classification (the loader the simulator uses too); GPUs without a
    node or minor number cannot be steered and are skipped. A schema behind this pal is an
    error here (its placements could not be recorded): the daemon then places nothing and
    says to run `pal db upgrade`."""
    require_current(engine)
    with session_scope(engine) as session:
        stored = load_variability(session, classes)
    out = {(v.node, int(v.minor)): v for v in stored.gpus if v.node is not None and v.minor is not None}
    return Factors(by_slot=out, version=stored.version, loaded_at=time.time())


class FactorCache:
    """Reload at most every `refresh_s`; on a database error keep the previous factors."""

    def __init__(self, engine_factory: Any, refresh_s: float = 60.0, classes: Sequence[str] = ("A", "B", "C", "D")) -> None:
        self._engine_factory = engine_factory
        self.classes = tuple(classes)
        self.refresh_s = refresh_s
        self.factors = Factors.empty()
        self.last_error: str | None = None
        self._next = 0.0

    def get(self, now: float | None = None) -> Factors:
        now = time.time() if now is None else now
        if now >= self._next:
            self._next = now + self.refresh_s
            try:
                loaded = load_factors(self._engine_factory(), self.classes)
                if loaded.version != self.factors.version:
                    log.info("classes loaded: version %s, %d steerable GPUs", loaded.version, len(loaded.by_slot))
                self.factors = loaded
                self.last_error = None
            except Exception as exc:  # noqa: BLE001 - any database failure: keep what we have
                self.last_error = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
                self._next = now + min(self.refresh_s, 10.0)
                log.warning("classes not reloaded (%s); placing with %s", self.last_error,
                            f"version {self.factors.version} from memory" if self.factors.by_slot else "none")
        return self.factors
