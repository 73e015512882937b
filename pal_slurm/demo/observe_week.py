"""A simulated week of GPU jobs under observe mode, recorded as the placer records a real one.

Why: a site's rollout starts with a week in observe mode, and an admin decides to enforce
on what `pal placements`, `pal report savings` and `pal report fairness` show after it. The
demo fills those reports the same way: Slurm as shipped runs the jobs (the event
simulator's model of sched/backfill and cons_tres's first fit, `slurm-backfill`), and at
every scheduling pass the placer's own decision step (`placement.decide.decide`, with the
configured policy and the placer's settings) decides the pending jobs it has not seen yet,
as the daemon's observe stage does (pal_slurm/placer/cycle.py, `observe`). What it would
have chosen goes into the placer's ledger (`placer.ledger`: the first choice noted wins),
each finished job is accounted there against the GPUs Slurm gave it (`ledger.account`),
and the records reach the database through the placer's own sinks: `placements` (outcome
`observe`) and `job_accounting` (mode `observe`).

The jobs: Philly-like synthetic jobs (pal_slurm.simulate.synthetic) arriving over six days
at about 60 % of the fleet's GPU time (nominal run times), run times capped at a day, time limits x U[1,5] of
the run time (what Slurm plans with), users and accounts drawn from a small lab. Timestamps
end now, so `--since 7d` covers the week.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine

from pal_slurm.config import PalConfig
from pal_slurm.db.accounting_store import AccountingSink
from pal_slurm.db.engine import session_scope
from pal_slurm.db.variability_store import load_variability
from pal_slurm.placement.decide import decide
from pal_slurm.placement.model import Cluster, Decision, JobRequest, PlacementContext, Snapshot
from pal_slurm.placement.orders import get_order
from pal_slurm.placement.policies import get_policy
from pal_slurm.placement.variability import cluster_from_gpus, ordered_gpus
from pal_slurm.placer.audit import AuditSink, Record, gpu_entry
from pal_slurm.placer.ledger import Alternative, Ledger, account, slowest
from pal_slurm.simulate.estimates import RuntimeEstimate
from pal_slurm.simulate.event import EventOptions, simulate_events
from pal_slurm.simulate.metrics import JobOutcome
from pal_slurm.simulate.synthetic import generate
from pal_slurm.simulate.traces import Trace, TraceJob
from pal_slurm.slurm.model import SlurmJob

#: (user, account) of the simulated lab
LAB = (("alice", "vision"), ("bob", "vision"), ("carol", "nlp"), ("dave", "nlp"), ("erin", "nlp"),
       ("frank", "graphs"), ("grace", "graphs"), ("heidi", "vision"))
ARRIVAL_DAYS = 6.0
LOAD = 0.6
MAX_RUNTIME_S = 86_400.0
FIRST_JOB_ID = 1001


@dataclass(frozen=True)
class WeekResult:
    jobs: int
    observed: int  # jobs the placer's decision step would have placed
    accounted: int  # finished jobs with a known factor
    tax_gpu_h: float
    saved_gpu_h: float  # what the placer's choices would have saved
    first_submit: datetime
    last_end: datetime
    policy: str


def week_trace(gpus: int, seed: int) -> tuple[Trace, list[tuple[str, str]]]:
    """About six days of jobs at ~60 % load on `gpus` GPUs, and each job's (user, account)."""
    def jobs(n: int) -> Trace:
        t = generate(n, seed=seed, mean_interarrival_s=600.0, max_gpus=gpus)
        capped = [replace(j, job_id=str(FIRST_JOB_ID + i),
                          work=min(j.work, max(1.0, round(MAX_RUNTIME_S / j.iter_time_s))))
                  for i, j in enumerate(t.jobs)]
        return Trace(name="observe-week", jobs=tuple(capped))

    span = ARRIVAL_DAYS * 86_400.0
    probe = jobs(200)
    offered = sum(j.num_gpus * j.nominal_runtime_s for j in probe.jobs)
    n = max(20, min(5_000, round(200 * LOAD * gpus * span / max(offered, 1.0))))
    trace = jobs(n)
    last = max(j.submit_time for j in trace.jobs) or 1.0
    trace = Trace(name=trace.name, jobs=tuple(replace(j, submit_time=j.submit_time * span / last)
                                              for j in trace.jobs))
    rng = random.Random(seed)
    return trace, [rng.choice(LAB) for _ in trace.jobs]


def observe_week(engine: Engine, cfg: PalConfig, *, seed: int = 0, now: datetime | None = None) -> WeekResult:
    """Run the week on the latest classification's fleet and store what the placer would record."""
    with session_scope(engine) as session:
        stored = load_variability(session, sorted(cfg.job_classes), at_slots_only=True)
    gpus = ordered_gpus(stored.gpus)
    cluster = cluster_from_gpus(stored.gpus)
    slot = [(g.node or "unknown", g.minor if g.minor is not None else i) for i, g in enumerate(gpus)]
    by_slot = dict(zip(slot, gpus))
    trace, people = week_trace(cluster.size, seed)
    who = {j.job_id: p for j, p in zip(trace.jobs, people)}
    jobs = {j.job_id: j for j in trace.jobs}

    pc = cfg.placer
    placer = _ObservingPlacer(cfg, cluster, stored.version, seed)
    options = EventOptions(locality_penalty=pc.locality_penalty, seed=seed,
                           runtime_estimate=RuntimeEstimate(kind="uniform", lo=1.0, hi=5.0, seed=seed))
    result = simulate_events(trace, cluster, get_policy("slurm-backfill"), options, on_decision=placer.observe)
    end = max(o.finish_time for o in result.outcomes)
    epoch = (now or datetime.now(UTC)).timestamp() - end

    def at(t: float) -> datetime:
        return datetime.fromtimestamp(epoch + t, UTC)

    _store_decisions(engine, placer, cluster, slot, who, at)
    accounts = _store_accounts(engine, result.outcomes, placer.ledger, epoch, slot, by_slot, who, jobs, stored.version)
    return WeekResult(jobs=len(result.outcomes), observed=len(placer.records),
                      accounted=sum(1 for a in accounts if a.accounted),
                      tax_gpu_h=sum(a.tax_gpu_h or 0.0 for a in accounts),
                      saved_gpu_h=sum(a.saved_gpu_h or 0.0 for a in accounts),
                      first_submit=at(min(o.submit_time for o in result.outcomes)), last_end=at(end),
                      policy=placer.policy.name)


class _ObservingPlacer:
    """The daemon's observe stage at each scheduling pass: the placer's decision step on the
    pending jobs it has not seen yet, its choices noted in its ledger (the first one wins)."""

    def __init__(self, cfg: PalConfig, cluster: Cluster, version: int, seed: int) -> None:
        pc = cfg.placer
        self.policy = get_policy(pc.policy)
        self.order = get_order(pc.order)
        # the daemon's own knobs (pal_slurm/placer/cycle.py, Placer.__init__)
        max_wait_s = min(pc.max_wait_s if pc.max_wait_s is not None else math.inf, pc.max_hold_s)
        self.ctx = PlacementContext(locality_penalty=pc.locality_penalty, rng=random.Random(seed),
                                    wait_fraction=pc.wait_fraction, noise=pc.noise, max_wait_s=max_wait_s)
        self.cluster = cluster
        self.version = version
        self.ledger = Ledger(mode="observe")
        self.records: list[tuple[float, JobRequest, Sequence[int], str]] = []

    def observe(self, snap: Snapshot, waiting: Sequence[JobRequest], backfill: bool, _slurm: Decision) -> None:
        fresh = [r for r in waiting if r.id not in self.ledger.choices]
        if not fresh:
            return
        decision = decide(self.policy, self.order, snap, fresh, self.ctx, backfill=backfill)
        by_id = {r.id: r for r in fresh}
        for a in decision.assignments:
            req = by_id[a.job_id]
            sf = self.cluster.sf(req.job_class)
            self.ledger.chose(a.job_id, Alternative("placer", req.job_class, slowest(sf[g] for g in a.gpus),
                                                    self.version))
            self.records.append((snap.now, req, a.gpus, a.reason))


def _store_decisions(engine: Engine, placer: _ObservingPlacer, cluster: Cluster, slot: Sequence[tuple[str, int]],
                     who: Mapping[str, tuple[str, str]], at: Callable[[float], datetime]) -> None:
    """What the placer would have chosen, through its own audit sink: `placements`, outcome `observe`."""
    audit = AuditSink(lambda: engine, max_pending=len(placer.records) + 1)
    for t, req, chosen, reason in placer.records:
        user, acct = who[req.id]
        sf = cluster.sf(req.job_class)
        audit.add(Record(job_id=req.id, policy=placer.policy.name, job_class=req.job_class, version=placer.version,
                         gpus=[gpu_entry(slot[g][0], slot[g][1], sf[g]) for g in chosen],
                         alternatives=None, reason=f"observe: would place; {reason}", outcome="observe",
                         decided_at=at(t), user=user, account=acct, submitted_at=at(req.submit_time)))
    audit.flush()


def _store_accounts(engine: Engine, outcomes: Sequence[JobOutcome], ledger: Ledger, epoch: float,
                    slot: Sequence[tuple[str, int]], by_slot: Mapping[tuple[str, int], Any],
                    who: Mapping[str, tuple[str, str]], jobs: Mapping[str, TraceJob], version: int) -> list[Any]:
    """Each finished job accounted against the GPUs Slurm gave it, through the placer's accounting
    sink (`job_accounting`, mode `observe`); returns the accounts."""
    sink = AccountingSink(lambda: engine, max_pending=len(outcomes) + 1)
    accounts = []
    for o in outcomes:
        user, acct = who[o.job_id]
        job = SlurmJob(job_id=o.job_id, name=jobs[o.job_id].model, user=user, state="COMPLETED", state_reason="",
                       priority=None, partition="gpu", submit_time=epoch + o.submit_time, account=acct)
        accounts.append(account(job, o.job_class or "A", [slot[g] for g in o.gpu_ids], epoch + o.start_time,
                                epoch + o.finish_time, by_slot, version, ledger.choices.pop(o.job_id, None),
                                "observe"))
    sink.add(accounts)
    sink.flush()
    return accounts
