"""The placement daemon's cycle: read Slurm, place the held jobs, apply, verify, audit.

One cycle, as it reads:
    publish the heartbeat -> read jobs and nodes -> rescue stranded placements ->
    release what we must not hold -> re-plan stalled placements -> build the problem
    (held jobs in Slurm's order, running jobs with their expected ends, runtime estimates)
    -> decide() (the simulators' decision step) -> check shapes -> apply -> verify.

Holds: job_submit.lua holds a job through its begin time (now + hold_s), so a held job
whose placer is gone starts by itself once that passes; while the placer keeps a job
waiting it moves the begin time on (see `_extend`). Releasing ends whichever hold the job
has (a begin time: StartTime=now; priority 0, from earlier releases: scontrol release).

Fail-open rules (docs/admin-guide.md): every path that cannot place a job releases it
unchanged and says why in its admin_comment; an update that would change a job's node
count, GPUs per node or total is never sent (the job is released unchanged); a placed job
that cannot start (BadConstraints, priority 0, its node gone or drained) gets the user's
request back and is released, here, on SIGTERM and by `release-stale`; Slurm being
unreachable skips the cycle (the heartbeat keeps going only while Slurm answers, so a long
outage lets the filter stop holding); no classes at all releases held jobs unchanged.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from pal_slurm.config import PlacerConfig
from pal_slurm.errors import SlurmError, SlurmUnavailable
from pal_slurm.jobs.fingerprint import fingerprint
from pal_slurm.placement.decide import decide
from pal_slurm.placement.model import Decision, PlacementContext, Snapshot
from pal_slurm.placement.orders import get_order
from pal_slurm.placement.policies import get_policy
from pal_slurm.placer import cluster_view, holds, shapes, slurm_updates
from pal_slurm.placer.accounting import Accounting
from pal_slurm.placer.audit import AuditSink, Record
from pal_slurm.placer.factors import FactorCache, Factors
from pal_slurm.slurm import filter_state
from pal_slurm.slurm.backend import SlurmBackend
from pal_slurm.slurm.gresconf import slot_of_type
from pal_slurm.slurm.model import SlurmJob, SlurmNode
from pal_slurm.slurm.priority import PriorityConfig, job_rank
from pal_slurm.slurm.tres import parse_gres_alloc

log = logging.getLogger(__name__)

ClassResolver = Callable[[SlurmJob], tuple[str, str]]
#: fingerprint -> learned runtime estimate in seconds (pal_slurm.jobs.sensitivity_store.learned_runtimes)
RuntimeHistory = Callable[[], dict[str, float]]


@dataclass
class CycleReport:
    held: int = 0
    placed: list[str] = field(default_factory=list)
    released: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)
    replanned: list[str] = field(default_factory=list)
    observed: list[str] = field(default_factory=list)
    restored: list[str] = field(default_factory=list)
    extended: list[str] = field(default_factory=list)
    waits: list[str] = field(default_factory=list)  # jobs waiting on purpose for better GPUs
    seconds: float = 0.0

    def as_dict(self) -> dict[str, object]:
        return {"held": self.held, "placed": self.placed, "released_unchanged": self.released, "failed": self.failed,
                "waiting": self.waiting, "waiting_for_better_gpus": self.waits, "replanned": self.replanned,
                "restored": self.restored, "extended": self.extended, "observed": self.observed,
                "seconds": round(self.seconds, 3)}

    @property
    def changed(self) -> bool:
        """Whether the cycle changed anything in Slurm (worth a log line)."""
        return bool(self.placed or self.released or self.failed or self.replanned or self.restored or self.extended)

    def line(self) -> str:
        """One log line: the counts, and the job ids of what changed."""
        parts = [f"held {self.held}"]
        for label, ids in (("placed", self.placed), ("released unchanged", self.released), ("failed", self.failed),
                           ("re-planned", self.replanned), ("restored", self.restored),
                           ("hold extended", self.extended), ("waiting for better GPUs", self.waits)):
            if ids:
                shown = ",".join(ids[:10]) + (f",+{len(ids) - 10}" if len(ids) > 10 else "")
                parts.append(f"{label} {len(ids)} ({shown})")
        parts.append(f"waiting {len(self.waiting)}")
        return "; ".join(parts) + f"; {self.seconds:.2f} s"


class Placer:
    """One daemon's state: the backend, the factor cache, the audit sink, and the clock."""

    def __init__(self, backend: SlurmBackend, cfg: PlacerConfig, factors: FactorCache, audit: AuditSink,
                 classes: Sequence[str], resolve_class: ClassResolver | None = None,
                 rules: Callable[[], list[dict[str, object]]] | None = None,
                 identities: Callable[[Sequence[SlurmJob]], None] | None = None,
                 clock: Callable[[], float] = time.time, history: RuntimeHistory | None = None,
                 accounting: Accounting | None = None) -> None:
        self.backend = backend
        self.cfg = cfg
        self.factors = factors
        self.audit = audit
        self.classes = tuple(classes)
        self.resolve_class = resolve_class
        self.rules = rules
        self.identities = identities
        self.history = history
        #: per-job tax records (pal_slurm.placer.accounting); None: none kept
        self.accounting = accounting
        self._identified: set[str] = set()
        self.clock = clock
        self.policy = get_policy(cfg.policy)
        self.order = get_order(cfg.order)
        # the knobs the simulator uses too; the one-node shape of a job is its JobRequest's,
        # enforced by every policy (no infinite locality penalty needed to keep jobs whole)
        self.ctx = PlacementContext(locality_penalty=cfg.locality_penalty, wait_fraction=cfg.wait_fraction,
                                    noise=cfg.noise, max_wait_s=min(cfg.max_wait_s if cfg.max_wait_s is not None else math.inf,
                                                   cfg.max_hold_s))
        self.observed: set[str] = set()
        self._models: tuple[str, ...] = tuple(m.lower() for m in cfg.models)
        self._ranks: tuple[float, dict[str, int], PriorityConfig] = (-math.inf, {}, PriorityConfig())
        self._learned: tuple[float, dict[str, float]] = (-math.inf, {})
        self._waits: dict[str, tuple[float, tuple[str, ...]]] = {}  # job -> (waiting since, GPUs it waits for)
        self._running_placed: set[str] = set()
        self._unheld: frozenset[str] = frozenset()  # classes the filter leaves to Slurm
        #: the file the filter pokes when it holds a job ("" until the loop sets one up: see
        #: placer.service.run_forever and placer.wake)
        self.wake_file = ""

    # -- heartbeat --------------------------------------------------------------------
    def publish(self, *, alive: bool = True, nodes: Sequence[SlurmNode] = (), grace_s: int = 0) -> None:
        """Write the filter state.

        alive=False: the daemon is stopping. With grace_s 0 the heartbeat is 0 and the
        filter stops holding at once. With grace_s > 0 the filter keeps holding new GPU jobs
        for grace_s more seconds, each only briefly (hold_s = grace_s + 5): a restart within
        that time finds them held and places them (no unheld window), and without one they
        start by themselves a few seconds later."""
        if not self._models and nodes:
            self._models = tuple(sorted({f.lower() for n in nodes for f in n.features
                                         if any(slot_of_type(u) is not None for u in _gres_types(n))}))
        if not self._models:
            self._models = filter_state.read_models(self.cfg.state_file)
        rules: list[dict[str, object]] = []
        if self.rules is not None and alive:
            try:
                rules = self.rules()
            except Exception as exc:  # noqa: BLE001 - rules are a hint; the heartbeat must go out
                log.warning("class rules not refreshed: %s", exc)
        if alive:
            beat, stale, hold = int(self.clock()), self.cfg.stale_after_s, self.cfg.hold_s
        elif grace_s > 0:
            beat, stale, hold = int(self.clock()) - max(self.cfg.stale_after_s - grace_s, 0), self.cfg.stale_after_s, \
                grace_s + 5
        else:
            beat, stale, hold = 0, self.cfg.stale_after_s, self.cfg.hold_s
        state = filter_state.FilterState(mode=self.cfg.mode, heartbeat=beat, stale_after=stale, models=self._models,
                                         rules=filter_state.rules_from(rules), hold_s=max(hold, 10),
                                         unheld_classes=tuple(sorted(self._unheld)) if alive else (),
                                         wake=self.wake_file if alive else "")
        filter_state.write(self.cfg.state_file, state)

    def _classes_left_to_slurm(self, factors: Factors) -> frozenset[str]:
        """Classes the filter need not hold on these factors (the policy's word; none when
        no GPU is classified, so nothing changes before the first classification)."""
        if not factors.by_slot:
            return frozenset()
        gpus = list(factors.by_slot.values())
        perfvar = {c: [g.perfvar.get(c, 1.0) for g in gpus] for c in self.classes}
        return self.policy.classes_left_to_slurm(perfvar, self.ctx)

    # -- one cycle -------------------------------------------------------------------------
    def cycle(self) -> CycleReport:
        t0 = time.perf_counter()
        now = self.clock()
        report = CycleReport()
        nodes = self.backend.nodes()
        jobs = self.backend.jobs()
        self.publish(nodes=nodes)
        factors = self.factors.get(now)
        self._unheld = self._classes_left_to_slurm(factors)  # published from the next heartbeat on
        self._record_identities(jobs)
        self._track_runs(jobs, now)
        if self.accounting is not None:
            self.accounting.cycle(jobs, factors, now, lambda j: self._class_of(j)[0])
        held = [j for j in jobs if holds.is_held_by_pal(j, now)]
        report.held = len(held)
        self._note_lapsed(jobs, now)
        self.rescue(jobs, nodes, "the placement could not start", report)
        if self.cfg.mode == "observe":
            for job in held:
                self._release_unchanged(job, "placer is in observe mode", report)
            self._observe(jobs, nodes, factors, now, report)
            return self._done(report, t0)
        if not factors.by_slot:
            for job in held:
                self._release_unchanged(job, "no GPU classes known yet (run pal classify)", report)
            return self._done(report, t0)
        done = set(report.restored)
        for job in jobs:
            if (job.pending and holds.is_placed_by_pal(job) and job.priority != 0 and job.job_id not in done
                    and job.state_reason not in cluster_view.NOT_WAITING_FOR_RESOURCES):
                at = holds.placed_at(job)
                if at is not None and now - at > self.cfg.replan_after_s:
                    self._replan(job, report)
        keep: list[SlurmJob] = []
        for job in held:
            if now - job.submit_time > self.cfg.max_hold_s:
                self._release_unchanged(job, f"held {now - job.submit_time:.0f} s without a placement", report)
            else:
                keep.append(job)
        keep = self._extend(keep, now, report)
        self._place(keep, jobs, nodes, factors, now, report)
        return self._done(report, t0)

    @property
    def extend_margin_s(self) -> float:
        """A held job whose begin time is this close gets a new one: two cycles and 10 s, so a
        job the placer keeps waiting is never started unplaced while the placer runs."""
        return 2 * self.cfg.interval_s + 10

    def _extend(self, held: Sequence[SlurmJob], now: float, report: CycleReport) -> list[SlurmJob]:
        """Move the begin time of held jobs whose hold ends soon to now + hold_s, before this
        cycle places them (a job Slurm could start while we retype it) or keeps them waiting.
        A job whose begin time cannot be moved is released unchanged (never started mid-change)."""
        keep: list[SlurmJob] = []
        for job in held:
            if holds.held_by_priority(job) or (job.begin_time or 0) - now >= self.extend_margin_s:
                keep.append(job)
                continue
            until = now + self.cfg.hold_s
            try:
                self.backend.set_begin(job.job_id, until)
            except SlurmUnavailable:
                raise
            except SlurmError as exc:
                log.warning("job %s: hold not extended (%s); releasing it unchanged", job.job_id, exc)
                self._release_unchanged(job, f"hold could not be extended: {exc}", report)
                continue
            report.extended.append(job.job_id)
            keep.append(replace(job, begin_time=until))
        return keep

    def _note_lapsed(self, jobs: Sequence[SlurmJob], now: float) -> None:
        """Re-tag jobs whose begin-time hold ended before we released them: Slurm already
        schedules them as submitted; the tag must not say they are held."""
        for job in jobs:
            if holds.hold_lapsed(job, now):
                self._comment(job.job_id, f"{holds.RELEASED_TAG} unchanged: the hold ended before a placement")

    def _unhold(self, job: SlurmJob) -> None:
        """End the hold `job` has: priority 0 (scontrol release) or its begin time (StartTime=now)."""
        if holds.held_by_priority(job):
            self.backend.release(job.job_id)
        else:
            self.backend.start_now(job.job_id)

    def _record_identities(self, jobs: Sequence[SlurmJob], limit: int = 500) -> None:
        """Who ran what on GPUs (user, name, command -> fingerprint), for job-sensitivity
        learning; best effort: a database outage only delays it to a later cycle."""
        if self.identities is None:
            return
        new = [j for j in jobs if j.job_id not in self._identified and (j.pending or j.running)
               and (j.tres("tres_per_node").gpu_count or j.tres("tres_per_job").gpu_count
                    or j.tres("tres_per_task").gpu_count)][:limit]
        if not new:
            return
        try:
            self.identities(new)
        except Exception as exc:  # noqa: BLE001 - learning input must never stop placement
            log.warning("job identities not recorded (%s)", str(exc).splitlines()[0][:200])
            return
        self._identified.update(j.job_id for j in new)
        if len(self._identified) > 100_000:
            self._identified = {j.job_id for j in jobs}

    def _track_runs(self, jobs: Sequence[SlurmJob], now: float) -> None:
        """When placed jobs start and end (`pal report fairness` counts GPU-hours by them): a
        start when a placed job is first seen running, an end when it is gone from the active
        jobs (so within a cycle of the truth; a job that ended while no placer ran is marked
        when one runs again)."""
        running = {j.job_id: j for j in jobs if j.running and holds.is_placed_by_pal(j)}
        for job_id, job in running.items():
            if job_id not in self._running_placed:
                self.audit.mark(job_id, "started_at", datetime.fromtimestamp(job.start_time or now, UTC))
        active = {j.job_id for j in jobs}
        for job_id in self._running_placed - running.keys():
            if job_id not in active:
                self.audit.mark(job_id, "ended_at", datetime.fromtimestamp(now, UTC))
        self._running_placed = set(running)

    def _who(self, job: SlurmJob) -> dict[str, object]:
        """The job's owner and submit time, for the audit record."""
        return {"user": job.user or None, "account": job.account or None,
                "submitted_at": datetime.fromtimestamp(job.submit_time, UTC) if job.submit_time else None}

    def _done(self, report: CycleReport, t0: float) -> CycleReport:
        self.audit.flush()
        report.seconds = time.perf_counter() - t0
        return report

    def _class_of(self, job: SlurmJob) -> tuple[str, str]:
        cls, src = holds.held_class(job)
        if cls.upper() in self.classes:
            return cls.upper(), src
        if self.resolve_class is not None:
            try:
                return self.resolve_class(job)
            except Exception as exc:  # noqa: BLE001 - fall back to the default class
                log.warning("job %s: class lookup failed (%s); default class", job.job_id, exc)
        return self.classes[0], "default"

    # -- Slurm's order and runtime knowledge ----------------------------------------------
    def _slurm_ranks(self, now: float) -> tuple[dict[str, int], PriorityConfig]:
        """Partition tiers and priority settings, re-read every classes_refresh_s; on an error
        the last ones (or every tier equal), with a warning: the order degrades, placement goes on."""
        at, tiers, cfg = self._ranks
        if now - at >= self.cfg.classes_refresh_s:
            try:
                tiers, cfg = self.backend.partition_tiers(), self.backend.priority_config()
            except SlurmUnavailable:
                raise
            except (SlurmError, AttributeError) as exc:
                log.warning("partition tiers / priority settings not read (%s); ordering by what is known", exc)
            self._ranks = (now, tiers, cfg)
        return tiers, cfg

    def _learned_runtimes(self, now: float) -> dict[str, float]:
        at, learned = self._learned
        if self.history is not None and now - at >= self.cfg.classes_refresh_s:
            try:
                learned = self.history()
            except Exception as exc:  # noqa: BLE001 - estimates are a hint; time limits still work
                log.warning("learned runtimes not reloaded (%s)", str(exc).splitlines()[0][:200])
            self._learned = (now, learned)
        return learned

    def estimate_s(self, job: SlurmJob, learned: dict[str, float]) -> float:
        """How long `job` is expected to run: what its past runs learned (never more than its
        time limit), else its time limit; 0 when neither is known (the policy then never
        makes it wait and backfills it only off reserved GPUs)."""
        mine = learned.get(fingerprint(job.user, job.name, job.command)) if learned else None
        limit = job.time_limit_s
        if mine is not None and mine > 0:
            return min(mine, limit) if limit else mine
        return limit or 0.0

    def expected_end(self, job: SlurmJob, learned: dict[str, float], now: float) -> float | None:
        """When a running job is expected to end: its start + learned estimate when that is
        still ahead, else Slurm's EndTime (start + time limit); None when neither is known."""
        if job.start_time and learned:
            mine = learned.get(fingerprint(job.user, job.name, job.command))
            if mine and job.start_time + mine > now and (job.end_time is None or job.start_time + mine < job.end_time):
                return job.start_time + mine
        return job.end_time

    def _problem(self, held: Sequence[SlurmJob], jobs: Sequence[SlurmJob], nodes: Sequence[SlurmNode],
                 factors: Factors, now: float) -> tuple[cluster_view.View, shapes.Planned, Snapshot]:
        """The cycle's placement problem, in the simulators' terms: the steerable GPUs and
        their factors, the free ones, the running jobs with their expected ends, and the
        held jobs with their class, rank and runtime estimate."""
        view = cluster_view.build_view(nodes, jobs, factors.by_slot, self.classes)
        tiers, prio = self._slurm_ranks(now)
        learned = self._learned_runtimes(now)
        held_jobs = []
        for j in held:
            tier, priority = job_rank(j, tiers, prio, now)
            held_jobs.append(shapes.HeldJob(j, *self._class_of(j), tier=tier, priority=priority,
                                          estimate_s=self.estimate_s(j, learned)))
        by_id = {j.job_id: j for j in jobs}
        ends = {jid: end for jid in view.running
                if (end := self.expected_end(by_id[jid], learned, now)) is not None}
        snap = Snapshot(cluster=view.cluster, free=view.free, running=view.running, now=now, expected_end=ends)
        return view, shapes.plan_requests(held_jobs, view), snap

    def _place(self, held: Sequence[SlurmJob], jobs: Sequence[SlurmJob], nodes: Sequence[SlurmNode],
               factors: Factors, now: float, report: CycleReport) -> None:
        if not held:
            self._waits.clear()
            return
        as_read = {j.job_id: j for j in held}
        view, planned, snap = self._problem([_as_submitted(j) for j in held], jobs, nodes, factors, now)
        for skip in planned.skips:
            self._release_unchanged(skip.job, skip.reason, report)
        if not planned.requests:
            report.waiting = list(planned.waiting)
            return
        decision = decide(self.policy, self.order, snap, planned.requests, self.ctx)
        if self.accounting is not None:
            self.accounting.placed(view, planned, decision, snap, self.order, self.ctx, factors.version)
        for job_id, why in decision.refused:
            log.error("job %s: policy %s broke the job's shape (%s); not placed this cycle", job_id,
                      self.policy.name, why)
        self._note_waits(decision, view, planned, now, report)
        applied: list[tuple[SlurmJob, slurm_updates.Update, Record]] = []
        for a in decision.assignments:
            h = planned.held[a.job_id]
            shape = planned.shapes[a.job_id]
            job = as_read[a.job_id]
            if a.first_fit and shape.nodes > 1 and not _same_slots(view, a.gpus):
                # Slurm's own first fit, on other slots on each node than one per-node GRES
                # request can name: the job is Slurm's to place, as submitted
                self._release_unchanged(job, f"first fit, left to Slurm; {a.reason}", report)
                continue
            update = slurm_updates.update_for(h.job, shape, a.gpus, view)
            wrong = slurm_updates.check_update(shape, update)
            if wrong is not None:
                # never reach Slurm with another shape than the user's: release it as submitted
                log.error("job %s: placement would change its shape (%s); released unchanged", job.job_id, wrong)
                self._release_unchanged(job, f"placement would change the job's shape ({wrong})", report)
                continue
            sfs = [view.cluster.sf(h.job_class)[g] for g in sorted(a.gpus)]
            comment = slurm_updates.summary(update, h.job_class, self.policy.name, factors.version, sfs, now)
            waited = self._waits.pop(a.job_id, None)
            why = f"class {h.job_class} ({h.class_source}); {a.reason}"
            if waited is not None:
                why += f"; waited {now - waited[0]:.0f} s for {','.join(waited[1])}"
            rec = Record(job_id=h.job.job_id, policy=self.policy.name, job_class=h.job_class, version=factors.version,
                         gpus=[{"node": s.node, "minor": s.minor, "type": s.gres_type, "slowdown": round(f, 4)}
                               for s, f in zip(update.slots, sfs)],
                         alternatives=[{"gpus": [_slot_name(view.slots[g]) for g in gpus], "weight": w}
                                       for gpus, w in a.alternatives[:8]],
                         reason=why, outcome="applied", decided_at=self._stamp(), **self._who(job))  # type: ignore[arg-type]
            if self._apply(job, update, comment):
                applied.append((job, update, rec))
            else:
                report.failed.append(h.job.job_id)
                self.audit.add(_with(rec, outcome="failed"))
        placed_ids = {a.job_id for a in decision.assignments}
        report.waiting = [r.id for r in planned.requests if r.id not in placed_ids]
        self._verify(applied, report)

    def _note_waits(self, decision: Decision, view: cluster_view.View, planned: shapes.Planned, now: float,
                    report: CycleReport) -> None:
        """Jobs that wait on purpose for better GPUs: audited when the wait starts or its
        target changes (not every cycle), and remembered so their placement says how long."""
        current = {w.job_id for w in decision.waits}
        for job_id in list(self._waits):
            if job_id not in current and job_id not in decision.as_dict():
                del self._waits[job_id]  # no longer waiting (placed elsewhere or gone)
        for w in decision.waits:
            target = tuple(_slot_name(view.slots[g]) for g in w.gpus)
            report.waits.append(w.job_id)
            since, before = self._waits.get(w.job_id, (now, ()))
            self._waits[w.job_id] = (since, target)
            if before == target:
                continue
            h = planned.held[w.job_id]
            sfs = [view.cluster.sf(h.job_class)[g] for g in w.gpus]
            self.audit.add(Record(
                job_id=w.job_id, policy=self.policy.name, job_class=h.job_class, version=None,
                gpus=[{"node": view.slots[g].node, "minor": view.slots[g].minor, "type": view.slots[g].gres_type,
                       "slowdown": round(f, 4)} for g, f in zip(w.gpus, sfs)],
                alternatives=None, outcome="waiting", decided_at=self._stamp(),
                reason=(f"class {h.job_class}; waits up to {max(w.free_at - now, 0):.0f} s for {','.join(target)}, "
                        f"expected to finish {w.sooner_s:.0f} s sooner than on the GPUs free now")))

    def _apply(self, job: SlurmJob, update: slurm_updates.Update, comment: str) -> bool:
        """Clear, set, release; on a Slurm error restore the request and release unchanged.
        `job` is the job as this cycle read it (a re-planned one still carries our last slots)."""
        try:
            self.backend.update_job(job.job_id, [(update.clear_field, "")])
            if update.clear_field != "TresPerNode" and job.tres_per_node:
                self.backend.update_job(job.job_id, [("TresPerNode", "")])
            self.backend.update_job(job.job_id, [("TresPerNode", update.tres_per_node),
                                                 ("NodeList", update.node_list)])
            self._unhold(job)
        except SlurmUnavailable:
            raise
        except SlurmError as exc:
            log.warning("job %s: placement not applied (%s); restoring the request", job.job_id, exc)
            self._restore(job, update, f"placement failed: {exc}")
            return False
        # the tag changes only once the job is released: a job still held keeps `pal:held`,
        # so the next cycle and release-stale still know it is ours
        self._comment(job.job_id, comment)
        return True

    def _comment(self, job_id: str, text: str) -> None:
        try:
            self.backend.update_job(job_id, [("AdminComment", text[:900])])
        except SlurmError as exc:
            log.warning("job %s: admin comment not set (%s)", job_id, exc)

    def _restore(self, job: SlurmJob, update: slurm_updates.Update, why: str) -> None:
        """Put back the GPU request `job` had when this cycle read it, and release it.

        What it had, not what the user first asked for: on 22.05 a job that once carried
        per-slot types refuses an untyped request afterwards ("with and without type
        identification") and would be left with no GPUs; a re-planned job keeps its last slots."""
        steps = [[("TresPerNode", "")]]
        steps += [[(key, getattr(job, f))] for f, key in slurm_updates.FIELD_KEY.items() if getattr(job, f)]
        steps += [[("NodeList", job.required_nodes)]]
        for fields in steps:
            try:
                self.backend.update_job(job.job_id, fields)
            except SlurmError as exc:
                log.error("job %s: restoring %s failed: %s", job.job_id, fields[0][0], exc)
        try:
            self._unhold(job)
        except SlurmError as exc:
            log.error("job %s: release failed: %s (release-stale will retry)", job.job_id, exc)
            return
        self._comment(job.job_id, f"{holds.RELEASED_TAG} unchanged: {why}")

    def _verify(self, applied: Sequence[tuple[SlurmJob, slurm_updates.Update, Record]], report: CycleReport) -> None:
        if not applied:
            return
        try:
            now_jobs = {j.job_id: j for j in self.backend.jobs(only={job.job_id for job, _u, _r in applied})}
        except SlurmError as exc:
            log.warning("placements not verified this cycle (%s)", exc)
            now_jobs = {}
        stamp = self._stamp()
        for job, update, rec in applied:
            got = now_jobs.get(job.job_id)
            if got is None or not got.pending or slurm_updates.matches(got, update):
                report.placed.append(job.job_id)
                self.audit.add(_with(rec, applied_at=stamp))
                continue
            log.warning("job %s: Slurm shows %r on %r, not our placement; restoring", job.job_id,
                        got.tres_per_node, got.required_nodes)
            self._restore(job, update, "Slurm did not take the placement")
            report.failed.append(job.job_id)
            self.audit.add(_with(rec, outcome="failed", reason=rec.reason + "; Slurm did not take it, restored"))

    def _release_unchanged(self, job: SlurmJob, why: str, report: CycleReport) -> None:
        try:
            self._unhold(job)
        except SlurmUnavailable:
            raise
        except SlurmError as exc:
            # still tagged `pal:held`: the next cycle or release-stale tries again
            log.error("job %s: release failed: %s", job.job_id, exc)
            report.failed.append(job.job_id)
            return
        self._comment(job.job_id, f"{holds.RELEASED_TAG} unchanged: {why}")
        report.released.append(job.job_id)
        self._waits.pop(job.job_id, None)
        cls, _src = holds.held_class(job)
        stamp = self._stamp()
        self.audit.add(Record(job_id=job.job_id, policy=self.policy.name, job_class=cls, version=None, gpus=[],
                              alternatives=None, reason=why, outcome="released-unchanged", decided_at=stamp,
                              applied_at=stamp, **self._who(job)))  # type: ignore[arg-type]

    # -- nobody stranded -----------------------------------------------------------------------
    def put_back(self, job: SlurmJob) -> bool:
        """Give a placed job the GPU request its user made, with no node pinned; True when
        Slurm took it. Slurm 22.05 refuses an untyped request once a job carried per-slot
        types ("with and without type identification"; it keeps typed entries with count
        0 after a clear); then the job's per-slot request is set back at once (a clear left
        alone would leave it with no GPUs) and False is returned."""
        orig = holds.original_request(job)
        if orig is None:
            return False
        fld, value = orig
        try:
            self.backend.update_job(job.job_id, [("TresPerNode", "")])
        except SlurmError as exc:
            log.warning("job %s: request not cleared (%s)", job.job_id, exc)
            return False
        try:
            self.backend.update_job(job.job_id, [(slurm_updates.FIELD_KEY[fld], value), ("NodeList", "")])
            return True
        except SlurmError as exc:
            log.info("job %s: Slurm keeps its per-slot request (%s)", job.job_id, str(exc).splitlines()[0][:120])
        try:
            self.backend.update_job(job.job_id, [("TresPerNode", job.tres_per_node)])
        except SlurmError as exc:
            log.error("job %s: per-slot request not set back after a refused restore: %s", job.job_id, exc)
        return False

    def rescue(self, jobs: Sequence[SlurmJob], nodes: Sequence[SlurmNode], why: str, report: CycleReport) -> None:
        """Placed jobs that cannot start (BadConstraints, priority 0, node gone or drained, a
        slot type missing): the user's request back (or, where Slurm refuses that, the same
        shape on slots that exist, see slurm_updates.fallback_update), then released."""
        by_name = {n.name: n for n in nodes}
        view: cluster_view.View | None = None
        for job in jobs:
            reason = slurm_updates.stranded(job, by_name)
            if reason is None:
                continue
            if self.put_back(job):
                how = "its request restored"
            else:
                if view is None:
                    view = cluster_view.build_view(nodes, jobs, {}, self.classes or ("A",))
                update = slurm_updates.fallback_update(job, view)
                try:
                    if update is None:
                        raise SlurmError("no slots of its shape on the nodes it may use")
                    self.backend.update_job(job.job_id, [("TresPerNode", "")])
                    self.backend.update_job(job.job_id, [("TresPerNode", update.tres_per_node),
                                                         ("NodeList", update.node_list)])
                    how = (f"re-typed to {update.tres_per_node}"
                           + (f" on {update.node_list}" if update.node_list else " on any node"))
                except SlurmError as exc:
                    log.error("job %s: stranded (%s) and not re-typed: %s", job.job_id, reason, exc)
                    how = "request unchanged (Slurm refused both)"
            try:
                if job.priority == 0 or job.state_reason == "BadConstraints":
                    self.backend.release(job.job_id)
                elif job.begins_after(self.clock()):
                    self.backend.start_now(job.job_id)
            except SlurmError as exc:
                log.error("job %s: release after restore failed: %s", job.job_id, exc)
            text = f"{holds.RELEASED_TAG} restored: {reason}; {why}; {how}"
            orig = holds.original_request(job)
            if orig is not None:
                text += f" was {orig[0]} {orig[1]}"
            self._comment(job.job_id, text)
            log.warning("job %s: %s (%s); %s", job.job_id, why, reason, how)
            report.restored.append(job.job_id)
            cls, _src = holds.held_class(job)
            stamp = self._stamp()
            self.audit.add(Record(job_id=job.job_id, policy=self.policy.name, job_class=cls, version=None, gpus=[],
                                  alternatives=None, reason=f"{reason}: {how}", outcome="restored",
                                  decided_at=stamp, applied_at=stamp))

    def _replan(self, job: SlurmJob, report: CycleReport) -> None:
        """A job we placed and released that has not started: the user's request back first
        (where Slurm takes it), then tagged held (`src=replan`, keeping the `was` record),
        held through its begin time (now + hold_s, so it ends by itself if the placer goes),
        with no node pinned; the next cycle plans it from the user's request (see
        _as_submitted) and retypes it. Where Slurm keeps the per-slot request (22.05) the
        job waits with it until then. The tag goes first: once held, the job is ours to
        release (next cycle, SIGTERM, release-stale)."""
        if holds.original_request(job) is None:
            return
        cls, _src = holds.held_class(job)
        tag = f"{holds.HELD_TAG} class={cls} src=replan {job.admin_comment[len(holds.PLACED_TAG):].strip()}"[:900]
        try:
            self.backend.update_job(job.job_id, [("AdminComment", tag)])
            self.backend.set_begin(job.job_id, self.clock() + self.cfg.hold_s)
        except SlurmError as exc:
            log.warning("job %s: not re-planned (%s)", job.job_id, exc)
            try:
                self.backend.update_job(job.job_id, [("AdminComment", job.admin_comment)])
            except SlurmError:
                pass
            return
        restored = self.put_back(job)
        if not restored:
            try:
                self.backend.update_job(job.job_id, [("NodeList", "")])
            except SlurmError as exc:
                log.warning("job %s: re-planning, NodeList not cleared (%s)", job.job_id, exc)
        report.replanned.append(job.job_id)
        stamp = self._stamp()
        self.audit.add(Record(job_id=job.job_id, policy=self.policy.name, job_class=cls, version=None, gpus=[],
                              alternatives=None, outcome="replanned", decided_at=stamp,
                              reason=f"not started {self.cfg.replan_after_s:.0f} s after its placement; held again to "
                                     f"re-place it ({'request restored' if restored else 'per-slot request kept'})"))

    def _observe(self, jobs: Sequence[SlurmJob], nodes: Sequence[SlurmNode], factors: Factors, now: float,
                 report: CycleReport) -> None:
        """Observe mode: what we would do for pending GPU jobs, audited once per job; no job changes."""
        fresh = [j for j in jobs if j.pending and j.job_id not in self.observed and not holds.is_placed_by_pal(j)
                 and (j.tres("tres_per_node").gpu_count or j.tres("tres_per_job").gpu_count)]
        if not fresh or not factors.by_slot:
            return
        view, planned, snap = self._problem(fresh, jobs, nodes, factors, now)
        decision = decide(self.policy, self.order, snap, planned.requests, self.ctx)
        if self.accounting is not None:
            self.accounting.observed(view, planned, decision, factors.version)
        for a in decision.assignments:
            h = planned.held[a.job_id]
            self.audit.add(Record(job_id=a.job_id, policy=self.policy.name, job_class=h.job_class,
                                  version=factors.version, gpus=[{"node": view.slots[g].node, "minor": view.slots[g].minor}
                                                                 for g in a.gpus],
                                  alternatives=None, reason=f"observe: would place; {a.reason}", outcome="observe",
                                  decided_at=self._stamp()))
            self.observed.add(a.job_id)
            report.observed.append(a.job_id)

    def _stamp(self) -> datetime:
        """Now, from the injected clock (audit timestamps follow the clock the cycle runs on)."""
        return datetime.fromtimestamp(self.clock(), UTC)

    # -- shutdown and fail-safe -------------------------------------------------------------
    def release_all(self, why: str, *, grace_s: int = 0) -> list[str]:
        """Release every job we hold and rescue every placement that cannot start (SIGTERM,
        fail-safe); never raises for one job. `grace_s`: see `publish`."""
        released: list[str] = []
        try:
            self.publish(alive=False, grace_s=grace_s)
        except OSError as exc:
            log.error("filter state not written: %s", exc)
        now = self.clock()
        jobs = self.backend.jobs()
        report = CycleReport()
        for job in jobs:
            if holds.is_held_by_pal(job, now):
                self._release_unchanged(job, why, report)
        try:
            nodes = self.backend.nodes()
        except SlurmError as exc:
            log.error("nodes not read, stranded placements not checked: %s", exc)
            nodes = []
        if nodes:
            self.rescue(jobs, nodes, why, report)
        released = report.released + report.restored
        self.audit.flush()
        return released


def _as_submitted(job: SlurmJob) -> SlurmJob:
    """The job as planning must see it: a re-planned job with the GPU request the user made
    (recorded in its tag) instead of our last per-slot one, and no node pinned."""
    if holds.held_class(job)[1] != "replan":
        return job
    return slurm_updates.as_submitted(job)


def tune_gc() -> None:
    """Collector settings for the daemon process (`pal placer` calls this once at start).

    Each cycle builds and drops a large graph of short-lived objects (megabytes of squeue
    JSON as dicts, thousands of job records) that holds no reference cycles; with the default
    gen-0 threshold (700 allocations) the collector walks it again and again, which took a
    third of a 1,000-job cycle (bench/placer_cycle.py). Freezing what start-up loaded and
    collecting gen 0 every 200,000 net allocations keeps memory bounded and the cycle short.
    """
    import gc

    gc.freeze()
    gc.set_threshold(200_000, 50, 100)


def _same_slots(view: cluster_view.View, gpus: Sequence[int]) -> bool:
    """Whether `gpus` are the same slots (device minors) on every node they lie on."""
    per_node: dict[str, set[int]] = {}
    for g in gpus:
        per_node.setdefault(view.slots[g].node, set()).add(view.slots[g].minor)
    return len({frozenset(m) for m in per_node.values()}) == 1


def _gres_types(node: SlurmNode) -> list[str | None]:
    return [u.type for u in parse_gres_alloc(node.gres) if u.name == "gpu"]


def _slot_name(slot: cluster_view.Slot) -> str:
    return f"{slot.node}:{slot.minor}"


def _with(rec: Record, **changes: object) -> Record:
    return replace(rec, **changes)  # type: ignore[arg-type]


__all__ = ["CycleReport", "Placer", "tune_gc"]
