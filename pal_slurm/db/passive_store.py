"""Passive speed in the database: the ledger's finished jobs out as runs, per-GPU estimates and
fail-slow flags in (`pal gpus learn`), the stored estimates out for every view.

Why here: pal_slurm.classification.passive and .failslow are pure; this adapter is where a
ledger row's slot ("node:minor", what Slurm allocated) becomes one physical GPU. A slot whose GPU
was replaced holds two GPU rows; each run goes to the GPU that held the slot when the run
started (`slot_holder`), so a new GPU never inherits the old one's run times ("one physical GPU,
one row").
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.orm import Session

from pal_slurm.classification.failslow import FailSlowFlag
from pal_slurm.classification.passive import JobRun, PassiveEstimate, PassiveResult
from pal_slurm.db.batches import chunks
from pal_slurm.db.models import Gpu, GpuFlag, GpuPassiveSpeed, JobAccounting, JobHistory, Node, ProfileRun

log = logging.getLogger(__name__)

__all__ = ["FAIL_SLOW", "LedgerRuns", "clear_reprofiled", "flagged_nodes", "SlotGpu", "StoredPassive", "load_passive", "load_runs", "open_fail_slow",
           "open_flags", "save_estimates", "slot_holder"]

#: gpu_flags.kind of a passive fail-slow flag (the agent's clock flags are "clock_drift")
FAIL_SLOW = "fail_slow"


@dataclass(frozen=True, slots=True)
class SlotGpu:
    """One GPU row at a slot: its id, UUID and when it was first seen (epoch seconds)."""

    gpu_id: int
    uuid: str
    node: str
    minor: int
    first_seen: float


def slot_holder(holders: Sequence[SlotGpu], started_at: float) -> SlotGpu:
    """The GPU that held a slot when a run started: the latest first seen at or before the start;
    the earliest one for a run that started before any was seen (the first inventory came later
    than the first jobs). `holders`: one slot's GPUs sorted by first_seen, at least one."""
    if len(holders) == 1:  # most slots: one GPU ever
        return holders[0]
    i = bisect.bisect_right([h.first_seen for h in holders], started_at)
    return holders[max(i - 1, 0)]


@dataclass(frozen=True)
class LedgerRuns:
    """The runs of the ledger keyed by GPU UUID, and what could not be used, by reason."""

    runs: tuple[JobRun, ...]
    gpus: Mapping[str, SlotGpu]  # UUID -> its row
    unusable: Mapping[str, int]


def _slots(session: Session) -> dict[tuple[str, int], list[SlotGpu]]:
    rows = session.execute(select(Gpu.id, Gpu.uuid, Node.name, Gpu.minor_number, Gpu.first_seen)
                           .join(Node, Gpu.node_id == Node.id).where(Gpu.minor_number.is_not(None)))
    out: dict[tuple[str, int], list[SlotGpu]] = {}
    for gid, uuid, node, minor, first in rows:
        seen = first.timestamp() if first is not None else 0.0
        out.setdefault((node, int(minor)), []).append(SlotGpu(gid, uuid, node, int(minor), seen))
    for holders in out.values():
        holders.sort(key=lambda h: (h.first_seen, h.gpu_id))
    return out


def _epoch(t: datetime) -> float:
    return t.timestamp()  # UtcDateTime reads timezone-aware UTC


def load_runs(session: Session, since: datetime | None = None, history_class: str | None = None) -> LedgerRuns:
    """Every finished job of the ledger (since `since`) that names its fingerprint, as a run on
    the physical GPUs that held its slots. A job with a slot no GPU row holds is counted, not
    guessed at (`pal profile inventory` on its node names it). With `history_class`, also the
    imported sacct history's whole-node jobs (`_history_runs`), of that class."""
    slots = _slots(session)
    q = select(JobAccounting.slurm_job_id, JobAccounting.fingerprint, JobAccounting.job_class, JobAccounting.gpus,
               JobAccounting.runtime_s, JobAccounting.started_at, JobAccounting.ended_at,
               JobAccounting.time_limit_s).order_by(JobAccounting.ended_at, JobAccounting.id)
    if since is not None:
        q = q.where(JobAccounting.ended_at >= since)
    runs: list[JobRun] = []
    used: dict[str, SlotGpu] = {}
    unusable: dict[str, int] = {}
    no_fp = "no fingerprint (stored before it was kept)"
    no_slot = "a GPU at a slot no GPU row holds"
    # Core rows (no ORM loading), read in batches: a million rows take seconds, not tens of them
    for job_id, fp, cls, gpus, runtime, started, ended, limit in session.connection().execute(
            q.execution_options(stream_results=True, yield_per=10_000)):
        if not fp:
            unusable[no_fp] = unusable.get(no_fp, 0) + 1
            continue
        start = _epoch(started)
        keys: list[str] = []
        for g in gpus or ():
            try:
                holders = slots.get((str(g["node"]), int(g["minor"])))
            except (KeyError, TypeError, ValueError):
                holders = None
            if not holders:
                keys = []
                break
            h = slot_holder(holders, start)
            used[h.uuid] = h
            keys.append(h.uuid)
        if not keys:
            unusable[no_slot] = unusable.get(no_slot, 0) + 1
            continue
        runs.append(JobRun(job_id=str(job_id), fingerprint=fp, job_class=cls, gpus=tuple(keys),
                           runtime_s=float(runtime), ended_at=_epoch(ended),
                           time_limit_s=None if limit is None else float(limit)))
    if history_class is not None:
        _history_runs(session, since, history_class, slots, {r.job_id for r in runs}, runs, used, unusable)
    return LedgerRuns(tuple(runs), used, unusable)


def _history_runs(session: Session, since: datetime | None, job_class: str,
                  slots: Mapping[tuple[str, int], Sequence[SlotGpu]], seen: set[str], runs: list[JobRun],
                  used: dict[str, SlotGpu], unusable: dict[str, int]) -> None:
    """The imported sacct history's COMPLETED jobs that took whole nodes: sacct names the nodes,
    not the GPUs, so only a job that held every GPU of its nodes says which GPUs set its pace. Its
    work is keyed by user and job name (sacct has no command line), its class is `job_class` (the
    configured default: sacct does not say), and a job the placer's ledger has is not read twice."""
    from pal_slurm.slurm.hostlist import expand_nodes

    per_node: dict[str, list[tuple[str, int]]] = {}
    for node, minor in slots:
        per_node.setdefault(node, []).append((node, minor))
    q = select(JobHistory.slurm_job_id, JobHistory.source, JobHistory.user, JobHistory.name, JobHistory.started_at,
               JobHistory.elapsed_s, JobHistory.gpus, JobHistory.node_list).where(
        JobHistory.state == "COMPLETED", JobHistory.node_list.is_not(None), JobHistory.gpus.is_not(None))
    if since is not None:
        q = q.where(JobHistory.started_at >= since - timedelta(days=31))
    for job_id, source, user, name, started, elapsed, gpus, node_list in session.execute(q):
        ended = started + timedelta(seconds=float(elapsed))
        if (since is not None and ended < since) or str(job_id) in seen:
            continue
        try:
            nodes = expand_nodes(node_list)
        except ValueError:
            nodes = []
        slot_keys = [k for n in nodes for k in sorted(per_node.get(n, []))]
        if not nodes or any(n not in per_node for n in nodes) or len(slot_keys) != gpus:
            _count(unusable, "sacct history: not whole nodes (its GPUs are not named)")
            continue
        holders = [slot_holder(slots[k], started.timestamp()) for k in slot_keys]
        for h in holders:
            used[h.uuid] = h
        runs.append(JobRun(job_id=f"{source}:{job_id}", fingerprint=f"sacct:{user}\0{name}", job_class=job_class,
                           gpus=tuple(h.uuid for h in holders), runtime_s=float(elapsed),
                           ended_at=ended.timestamp()))


def _count(counts: dict[str, int], reason: str) -> None:
    counts[reason] = counts.get(reason, 0) + 1


def save_estimates(session: Session, result: PassiveResult, gpus: Mapping[str, SlotGpu], now: datetime) -> int:
    """Replace the stored estimates by `result`'s (keyed by UUID, as `load_runs` gives them);
    the number stored."""
    session.execute(delete(GpuPassiveSpeed))
    rows = [{"gpu_id": gpus[e.gpu].gpu_id, "job_class": e.job_class, "factor": e.factor, "low": e.low,
             "high": e.high, "jobs": e.jobs, "paced": e.paced, "gpu_hours": e.gpu_hours, "computed_at": now}
            for e in result.estimates if e.gpu in gpus]
    for part in chunks(rows, 1000):
        session.execute(insert(GpuPassiveSpeed), list(part))
    return len(rows)


@dataclass(frozen=True, slots=True)
class StoredPassive(PassiveEstimate):
    """One stored estimate, as the views read it: the estimate and when it was learned."""

    computed_at: datetime

    def as_dict(self) -> dict[str, object]:
        return {"factor": self.factor, "low": self.low, "high": self.high, "jobs": self.jobs,
                "paced": self.paced, "gpu_hours": self.gpu_hours, "computed_at": self.computed_at.isoformat()}


def load_passive(session: Session) -> dict[str, dict[str, StoredPassive]]:
    """UUID -> class -> the stored estimate."""
    out: dict[str, dict[str, StoredPassive]] = {}
    q = select(Gpu.uuid, GpuPassiveSpeed).join(Gpu, Gpu.id == GpuPassiveSpeed.gpu_id)
    for uuid, p in session.execute(q):
        out.setdefault(uuid, {})[p.job_class] = StoredPassive(uuid, p.job_class, p.factor, p.low, p.high, p.jobs,
                                                              p.paced, p.gpu_hours, p.computed_at)
    return out


def open_flags(session: Session) -> dict[str, dict[str, str]]:
    """UUID -> kind -> detail of its open GPU flags (the agent's clock drift, passive fail-slow)."""
    out: dict[str, dict[str, str]] = {}
    for uuid, kind, detail in session.execute(select(GpuFlag.gpu_uuid, GpuFlag.kind, GpuFlag.detail)
                                              .where(GpuFlag.cleared_at.is_(None))):
        out.setdefault(uuid, {})[kind] = detail or ""
    return out


def flag_detail(flag: FailSlowFlag) -> str:
    """What a fail-slow flag says (gpu_flags.detail), operator's words."""
    return (f"class {flag.job_class}: its last {len(flag.jobs)} job(s) ran at {flag.passive_factor:.3f} where its "
            f"benchmark says {flag.benchmark_factor:.3f} (CUSUM {flag.cusum:.1f}); re-profile it")


def open_fail_slow(session: Session, flags: Iterable[FailSlowFlag], gpus: Mapping[str, SlotGpu],
                   now: datetime) -> list[FailSlowFlag]:
    """Open one `fail_slow` flag per flagged GPU that has none open; the flags opened."""
    already = {u for u, kinds in open_flags(session).items() if FAIL_SLOW in kinds}
    opened: list[FailSlowFlag] = []
    for f in flags:
        if f.gpu in already or f.gpu not in gpus:
            continue
        already.add(f.gpu)
        session.add(GpuFlag(gpu_uuid=f.gpu, node=gpus[f.gpu].node, kind=FAIL_SLOW, expected_mhz=None,
                            observed_mhz=None, detail=flag_detail(f)[:4000],
                            flagged_at=datetime.fromtimestamp(f.at, UTC)))
        opened.append(f)
    if opened:
        log.info("opened %d fail-slow flag(s)", len(opened))
    return opened


def clear_reprofiled(session: Session, now: datetime) -> list[tuple[str, str]]:
    """Clear every open flag (any kind) of a GPU profiled again after the flag was raised: the
    re-profile answered it, and the GPU's class now rests on the new runs (if it is still slow,
    the classification says so; if its jobs still run slower than that, it is flagged again).
    The (UUID, kind) cleared."""
    last = dict(session.execute(select(Gpu.uuid, func.max(ProfileRun.started_at))
                                .join(ProfileRun, ProfileRun.gpu_id == Gpu.id).group_by(Gpu.uuid)).all())
    cleared: list[tuple[str, str]] = []
    ids: list[int] = []
    # by column (the placer's login reads these columns of gpu_flags, not the agent's clocks)
    for fid, uuid, kind, flagged in session.execute(select(GpuFlag.id, GpuFlag.gpu_uuid, GpuFlag.kind,
                                                           GpuFlag.flagged_at).where(GpuFlag.cleared_at.is_(None))):
        profiled = last.get(uuid)
        if profiled is not None and profiled > flagged:
            ids.append(fid)
            cleared.append((uuid, kind))
    for part in chunks(ids, 1000):
        session.execute(update(GpuFlag).where(GpuFlag.id.in_(list(part))).values(cleared_at=now))
    return cleared


def flagged_nodes(session: Session) -> list[str]:
    """The nodes of GPUs with an open flag, in Slurm's node order (n2 before n10)."""
    from pal_slurm.slurm.gresconf import natural_key

    found = set(session.scalars(select(GpuFlag.node).where(GpuFlag.cleared_at.is_(None))))
    return sorted((n for n in found if n), key=natural_key)


def flagged_slots(session: Session) -> list[tuple[str, str, int | None]]:
    """(UUID, node, device minor or None) of every GPU with an open flag, in Slurm's node order."""
    from pal_slurm.slurm.gresconf import natural_key

    rows = session.execute(select(GpuFlag.gpu_uuid, GpuFlag.node, Gpu.minor_number)
                           .outerjoin(Gpu, Gpu.uuid == GpuFlag.gpu_uuid).where(GpuFlag.cleared_at.is_(None)))
    found = {(u, n, m) for u, n, m in rows if n}
    return sorted(found, key=lambda r: (natural_key(r[1]), -1 if r[2] is None else r[2], r[0]))
