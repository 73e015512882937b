"""The passive-speed use case (`pal gpus learn`): the ledger's finished jobs in, each GPU's
passive factor per class and the fail-slow flags out.

Why one use case: the estimate and the flags read the same runs, and the flags need the
estimate's fingerprint baselines. Stateless: every run reads the window again (the CUSUM of each
GPU starts where its benchmark, or its last cleared fail-slow flag, starts), so a crash or a
skipped timer loses nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.engine import Engine

from pal_slurm.classification import failslow
from pal_slurm.classification.failslow import FailSlowFlag, FailSlowSettings, Observation, detect
from pal_slurm.classification.passive import PassiveResult, PassiveSettings, estimate
from pal_slurm.classification.passive_use import since_profile
from pal_slurm.config.schema import PalConfig
from pal_slurm.db.engine import session_scope
from pal_slurm.db.migrate import require_current
from pal_slurm.db.models import Gpu, GpuFlag, ProfileRun
from pal_slurm.db.passive_store import (
    FAIL_SLOW,
    LedgerRuns,
    clear_reprofiled,
    load_runs,
    open_fail_slow,
    save_estimates,
)
from pal_slurm.db.variability_store import load_variability
from pal_slurm.errors import PalError
from pal_slurm.placement.model import JOB_CLASSES

log = logging.getLogger(__name__)

__all__ = ["LearnOutcome", "failslow_settings", "learn", "passive_settings"]


@dataclass(frozen=True)
class LearnOutcome:
    """What one `pal gpus learn` found and (with apply) stored."""

    runs: int
    unusable: Mapping[str, int]
    result: PassiveResult
    flags: tuple[FailSlowFlag, ...]
    opened: tuple[FailSlowFlag, ...] = ()
    stored: int = 0
    applied: bool = False
    gpus: Mapping[str, tuple[str, int]] = field(default_factory=dict)  # UUID -> (node, minor)
    notes: tuple[str, ...] = ()
    cleared: tuple[tuple[str, str], ...] = ()  # (UUID, kind) of the flags a re-profile answered


def passive_settings(cfg: PalConfig) -> PassiveSettings:
    return PassiveSettings(min_paced=cfg.classification.passive_min_paced)


def failslow_settings(cfg: PalConfig) -> FailSlowSettings:
    c = cfg.classification
    return FailSlowSettings(slow_ratio=c.failslow_ratio, max_ratio=max(c.failslow_ratio, c.failslow_max_ratio),
                            sigma=c.failslow_sigma, threshold=c.failslow_threshold)


def _benchmark_factors(engine: Engine) -> dict[str, dict[str, float]]:
    """UUID -> class -> the latest classification's factor; empty without a classification (the
    estimate still runs, the flags need something to compare with)."""
    with session_scope(engine) as session:
        try:
            stored = load_variability(session, JOB_CLASSES)
        except PalError:
            return {}
    return {g.uuid: dict(g.slowdown) for g in stored.gpus if g.uuid is not None}


def _last_profiles(engine: Engine) -> dict[str, float]:
    """UUID -> when its latest profile run started (epoch seconds)."""
    with session_scope(engine) as session:
        return {uuid: last.timestamp() for uuid, last in session.execute(
            select(Gpu.uuid, func.max(ProfileRun.started_at)).join(ProfileRun, ProfileRun.gpu_id == Gpu.id)
            .group_by(Gpu.uuid)) if last is not None}


def _starts(engine: Engine, profiled: Mapping[str, float]) -> dict[str, float]:
    """UUID -> from when its runs count against its benchmark: its last profile run, or the
    clearing of its last fail-slow flag, whichever is later (a re-profiled GPU starts afresh)."""
    out: dict[str, float] = dict(profiled)
    with session_scope(engine) as session:
        for uuid, cleared in session.execute(select(GpuFlag.gpu_uuid, func.max(GpuFlag.cleared_at))
                                             .where(GpuFlag.kind == FAIL_SLOW, GpuFlag.cleared_at.is_not(None))
                                             .group_by(GpuFlag.gpu_uuid)):
            t = cleared.timestamp()
            out[uuid] = max(out.get(uuid, 0.0), t)
    return out


def _since_profile(ledger: LedgerRuns, profiled: Mapping[str, float]) -> LedgerRuns:
    """The ledger without the runs begun before the latest profile of one of their GPUs
    (classification.passive_use.since_profile), counted."""
    kept = since_profile(ledger.runs, profiled)
    dropped = len(ledger.runs) - len(kept)
    if not dropped:
        return ledger
    unusable = {**ledger.unusable, "begun before its GPU's latest profile": dropped}
    return LedgerRuns(tuple(kept), ledger.gpus, unusable)


def observations(ledger: LedgerRuns, result: PassiveResult, bench: Mapping[str, Mapping[str, float]],
                 starts: Mapping[str, float]) -> list[Observation]:
    """The runs the fail-slow monitor reads (`failslow.observations`: those with a baseline, every
    GPU of them with a benchmark factor for the class, all of them started after each GPU's start)."""
    return failslow.observations(ledger.runs, result.baselines, bench, starts)


def learn(engine: Engine, cfg: PalConfig, *, now: datetime | None = None, days: float | None = None,
          apply: bool = False) -> LearnOutcome:
    """Estimate every GPU's passive factor from the ledger's last `days` (default the config's
    window) and run the fail-slow monitor; with `apply` store the estimates (replacing the last)
    and open a fail-slow flag for each GPU newly caught."""
    require_current(engine)
    now = now or datetime.now(UTC)
    window = days if days is not None else cfg.classification.passive_window_days
    since = now - timedelta(days=window)
    with session_scope(engine) as session:
        ledger = load_runs(session, since, history_class=cfg.jobs.default_class)
    profiled = _last_profiles(engine)
    ledger = _since_profile(ledger, profiled)
    result = estimate(ledger.runs, passive_settings(cfg))
    bench = _benchmark_factors(engine)
    notes = []
    if not bench:
        notes.append("no classification yet: passive factors are learned, fail-slow needs a benchmark to compare")
    flags = tuple(detect(observations(ledger, result, bench, _starts(engine, profiled)), failslow_settings(cfg)))
    gpus = {u: (g.node, g.minor) for u, g in ledger.gpus.items()}
    if not apply:
        return LearnOutcome(len(ledger.runs), ledger.unusable, result, flags, gpus=gpus, notes=tuple(notes))
    with session_scope(engine) as session:
        cleared = tuple(clear_reprofiled(session, now))
    with session_scope(engine) as session:
        stored = save_estimates(session, result, ledger.gpus, now)
        opened = tuple(open_fail_slow(session, flags, ledger.gpus, now))
    log.info("passive speed: %d estimate(s) from %d run(s); %d fail-slow flag(s) opened", stored, len(ledger.runs),
             len(opened))
    return LearnOutcome(len(ledger.runs), ledger.unusable, result, flags, opened, stored, True, gpus, tuple(notes),
                        cleared)

