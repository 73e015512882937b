"""The placement daemon: one Placer, and its cycle as a list of stages that runs top to bottom.

`STAGES` is the cycle; each stage takes the Placer and the cycle's state, and a stage that
returns False ends the cycle there:

    read      nodes and jobs from Slurm, publish the heartbeat, the class factors
    see       the jobs seen this cycle (identities, placed jobs' starts and ends: placer/seen.py;
              the accounting ledger: placer/accounting.py)
    rescue    repair held jobs a crash or a failed write left mid-change, re-tag lapsed holds,
              rescue placements that cannot start (placer/failopen.py)
    gate      observe mode or no classes yet: release held jobs unchanged and stop
    replan    re-plan placements that have not started
    overdue   release jobs held longer than max_hold_s
    extend    move begin times that end soon (placer/failopen.py)
    place     the problem (placer/problem.py) -> decide() (the simulators' decision step)
              -> shape check -> apply (placer/writer.py) -> read back

Every write to Slurm goes through placer/writer.py; every fail-open path is in
placer/failopen.py; holds and the heartbeat: docs/admin-guide.md, "The placement daemon".
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from pal_slurm.config import PlacerConfig
from pal_slurm.placement.decide import decide
from pal_slurm.placement.model import Assignment, Decision, PlacementContext
from pal_slurm.placement.orders import get_order
from pal_slurm.placement.policies import get_policy
from pal_slurm.placer import cluster_view, decision_records, failopen, holds, slurm_updates
from pal_slurm.placer.accounting import Accounting
from pal_slurm.placer.audit import AuditSink, Record
from pal_slurm.placer.cycle_report import CycleReport
from pal_slurm.placer.db_worker import Runner
from pal_slurm.placer.factors import FactorCache, Factors
from pal_slurm.placer.heartbeat import Heartbeat, Rules, classes_left_to_slurm
from pal_slurm.placer.problem import ClassResolver, Problem, ProblemBuilder, RuntimeHistory, estimate_s, expected_end
from pal_slurm.placer.seen import Identities, SeenJobs
from pal_slurm.placer.tag import Tag
from pal_slurm.placer.waits import Waits
from pal_slurm.placer.writer import Writer
from pal_slurm.slurm.backend import SlurmBackend
from pal_slurm.slurm.model import SlurmJob, SlurmNode

log = logging.getLogger(__name__)


class Placer:
    """One daemon's state: the backend, the factor cache, the audit sink, and the clock."""

    def __init__(self, backend: SlurmBackend, cfg: PlacerConfig, factors: FactorCache, audit: AuditSink,
                 classes: Sequence[str], resolve_class: ClassResolver | None = None,
                 rules: Rules | None = None,
                 identities: Identities | None = None,
                 clock: Callable[[], float] = time.time, history: RuntimeHistory | None = None,
                 accounting: Accounting | None = None, runner: Runner | None = None,
                 user_class: str = "lower", rules_snapshot: Callable[[], object] | None = None) -> None:
        self.cfg = cfg
        #: the database thread every database read and write goes through (placer/db_worker.py);
        #: None: done inline (tests, replays)
        self.runner = runner
        self.factors = factors
        self.audit = audit
        self.classes = tuple(classes)
        self.clock = clock
        self.policy = get_policy(cfg.policy)
        self.order = get_order(cfg.order)
        # the knobs the simulator uses too; the one-node shape of a job is its JobRequest's,
        # enforced by every policy (no infinite locality penalty needed to keep jobs whole)
        max_wait_s = min(cfg.max_wait_s if cfg.max_wait_s is not None else math.inf, cfg.max_hold_s)
        self.ctx = PlacementContext(locality_penalty=cfg.locality_penalty, wait_fraction=cfg.wait_fraction,
                                    noise=cfg.noise, max_wait_s=max_wait_s)
        self.writer = Writer(backend, audit, policy=self.policy.name, mode=cfg.mode, clock=clock)
        self.problem = ProblemBuilder(backend, self.classes, refresh_s=cfg.classes_refresh_s,
                                      resolve_class=resolve_class, history=history, clock=clock, runner=runner,
                                      user_class_policy=user_class, rules_snapshot=rules_snapshot)
        self.seen = SeenJobs(audit, identities, runner=runner)
        #: per-job tax records (pal_slurm.placer.accounting); None: none kept
        self.accounting = accounting
        self.observed: set[str] = set()
        self.heartbeat = Heartbeat(cfg, clock, rules)
        self.waits = Waits()  # jobs waiting on purpose for better GPUs
        #: jobs released unchanged for Slurm's own first fit -> when: until Slurm's next pass has
        #: looked at them, their GPUs are Slurm's to choose, and the placer places nothing else
        self._left: dict[str, float] = {}
        #: when this placer started (its clock), and how long its first cycles wait for the
        #: first read of the classes before releasing held jobs as "no classes known"
        self.started_at = clock()
        self.first_read_wait_s = min(30.0, cfg.hold_s / 2)

    @property
    def backend(self) -> SlurmBackend:
        """The Slurm adapter; setting it sets the writer's and the problem's too."""
        return self.writer.backend

    @backend.setter
    def backend(self, backend: SlurmBackend) -> None:
        self.writer.backend = self.problem.backend = backend

    @property
    def wake_ready(self) -> bool:
        """Whether the heartbeat tells the filter to poke the wake-up file (set by
        placer.service.wake_watch once the file and its directory are fit for it)."""
        return self.heartbeat.wake_ready

    @wake_ready.setter
    def wake_ready(self, ready: bool) -> None:
        self.heartbeat.wake_ready = ready

    estimate_s = staticmethod(estimate_s)
    expected_end = staticmethod(expected_end)

    def publish(self, *, alive: bool = True, nodes: Sequence[SlurmNode] = (), grace_s: int = 0) -> None:
        """Write the filter state (see Heartbeat.publish)."""
        self.heartbeat.publish(alive=alive, nodes=nodes, grace_s=grace_s)

    @property
    def extend_margin_s(self) -> float:
        """A held job whose begin time is this close gets a new one: two cycles and 10 s, so a
        job the placer keeps waiting is never started unplaced while the placer runs."""
        return 2 * self.cfg.interval_s + 10

    # -- one cycle ----------------------------------------------------------------------
    def cycle(self) -> CycleReport:
        """Run `STAGES` in order until one ends the cycle; what it did."""
        t0 = time.perf_counter()
        c = Cycle(now=self.clock())
        for stage in STAGES:
            if not stage(self, c):
                break
        return self._done(c.report, t0)

    def prime(self, wait_s: float) -> bool:
        """At start, after the first heartbeat: ask for everything read from the database (the
        classes, the class rules, the learned runtimes) and wait up to `wait_s` for it, so the
        first jobs are placed with what a running placer would know; a database that does not
        answer in time costs only that wait (the cycles go on with what has come). True when
        everything came."""
        if self.runner is None:
            return True
        now = self.clock()
        self.factors.get(now)
        self.problem.refresh(now)
        if self.heartbeat.rules is not None:
            self.heartbeat.rules()
        worker = getattr(self.runner, "__self__", None)
        return worker.drain(wait_s) if hasattr(worker, "drain") else True

    def release_all(self, why: str, *, grace_s: int = 0) -> list[str]:
        """Release every job we hold and rescue every placement that cannot start (SIGTERM,
        fail-safe; see failopen.release_all); the ids released or restored. `grace_s`: see `publish`."""
        report = failopen.release_all(self.backend, self.writer, self.classes, why,
                                      lambda: self.publish(alive=False, grace_s=grace_s))
        self._forget_waits(report)
        return report.released + report.restored

    def _done(self, report: CycleReport, t0: float) -> CycleReport:
        self._forget_waits(report)
        self.flush_audit()
        report.seconds = time.perf_counter() - t0
        return report

    def flush_audit(self) -> None:
        """The audit records to the database: on the database thread when there is one."""
        if self.runner is None:
            self.audit.flush()
        elif self.audit.waiting:
            self.runner("audit", lambda: self.audit.flush(raise_errors=True) and None)

    def _forget_waits(self, report: CycleReport) -> None:
        for job_id in report.released:
            self.waits.pop(job_id)


@dataclass
class Cycle:
    """What one cycle has read so far, and what it did."""

    now: float
    report: CycleReport = field(default_factory=CycleReport)
    nodes: Sequence[SlurmNode] = ()
    jobs: Sequence[SlurmJob] = ()
    factors: Factors = field(default_factory=Factors.empty)
    held: list[SlurmJob] = field(default_factory=list)


# -- the stages, in the order they run ------------------------------------------------------
def read(p: Placer, c: Cycle) -> bool:
    c.nodes = p.backend.nodes()
    c.jobs = p.backend.jobs()
    p.publish(nodes=c.nodes)
    c.factors = p.factors.get(c.now)
    p.problem.refresh(c.now)
    # published from the next heartbeat on
    p.heartbeat.unheld = classes_left_to_slurm(p.policy, p.classes, c.factors, p.ctx)
    return True


def see(p: Placer, c: Cycle) -> bool:
    p.seen.see(c.jobs, c.now)
    if p.accounting is not None:
        p.accounting.cycle(c.jobs, c.factors, c.now, lambda j: p.problem.class_of(j)[0])
    c.held = [j for j in c.jobs if holds.is_held_by_pal(j, c.now)]
    c.report.held = len(c.held)
    return True


def rescue(p: Placer, c: Cycle) -> bool:
    c.held = failopen.repair(p.writer, c.held, c.report)
    failopen.note_lapsed(p.writer, c.jobs, c.now)
    failopen.rescue(p.writer, c.jobs, c.nodes, p.classes, "the placement could not start", c.report)
    return True


def gate(p: Placer, c: Cycle) -> bool:
    """Observe mode releases what is held and audits what it would do; no classes yet
    releases what is held. Either ends the cycle."""
    if p.cfg.mode == "observe":
        for job in c.held:
            failopen.release_unchanged(p.writer, job, "placer is in observe mode", c.report)
        observe(p, c)
        return False
    if not c.factors.by_slot and not p.factors.settled and c.now - p.started_at < p.first_read_wait_s:
        # the first read of the classes is still on its way (a restart): keep the holds a
        # little longer rather than release what the next cycle could place
        c.held = failopen.extend(p.writer, c.held, p.clock(), hold_s=p.cfg.hold_s, margin_s=p.extend_margin_s,
                                 report=c.report)
        c.report.waiting = [j.job_id for j in c.held]
        return False
    if not c.factors.by_slot:
        for job in c.held:
            failopen.release_unchanged(p.writer, job, "no GPU classes known yet (run pal classify)", c.report)
        return False
    return True


def replan(p: Placer, c: Cycle) -> bool:
    failopen.replan_stalled(p.writer, c.jobs, c.now, replan_after_s=p.cfg.replan_after_s, hold_s=p.cfg.hold_s,
                            report=c.report)
    return True


def overdue(p: Placer, c: Cycle) -> bool:
    keep: list[SlurmJob] = []
    for job in c.held:
        if c.now - job.submit_time > p.cfg.max_hold_s:
            failopen.release_unchanged(p.writer, job, f"held {c.now - job.submit_time:.0f} s without a placement",
                                       c.report)
        else:
            keep.append(job)
    c.held = keep
    return True


def extend(p: Placer, c: Cycle) -> bool:
    # against the time now, not the cycle's start: the reads before may have taken a while
    c.held = failopen.extend(p.writer, c.held, p.clock(), hold_s=p.cfg.hold_s, margin_s=p.extend_margin_s,
                             report=c.report)
    return True


def place(p: Placer, c: Cycle) -> bool:
    """Place the held jobs: one id per job; the job as planned (`planned.held[id].job`: a
    re-planned one with its user's request) says what to ask for, the job as read
    (`as_read[id]`) is what is written to and restored."""
    report, now = c.report, c.now
    if not c.held:
        p.waits.clear()
        return True
    if (placing := holds.slurm_still_placing(p._left, c.jobs, now)):
        # Slurm chooses these jobs' GPUs at its next pass, and not necessarily the first fit we
        # computed (cons_tres picks multi-node sets its own way): placing other jobs now could
        # give them the same GPUs, and one would stall until re-planned (seen in the evaluation:
        # a 12-GPU job stalled 120 s). Slurm's pass comes within seconds; wait for it.
        log.debug("jobs %s left to Slurm not yet looked at by its scheduler; placing nothing this cycle",
                  ",".join(placing))
        report.waiting = [j.job_id for j in c.held]
        return True
    prob = p.problem.build(c.held, c.jobs, c.nodes, c.factors, now)
    planned = prob.planned
    for skip in planned.skips:
        failopen.release_unchanged(p.writer, prob.as_read[skip.job.job_id], skip.reason, report)
    if not planned.requests:
        report.waiting = list(planned.waiting)
        return True
    decision = decide(p.policy, p.order, prob.snapshot, planned.requests, p.ctx)
    if p.accounting is not None:
        p.accounting.placed(prob.view, planned, decision, prob.snapshot, p.order, p.ctx, c.factors.version)
    for job_id, why in decision.refused:
        log.error("job %s: policy %s broke the job's shape (%s); not placed this cycle", job_id, p.policy.name, why)
    _note_waits(p, decision, prob, now, report)
    applied: list[Applied] = []
    for a in decision.assignments:
        if (done := _apply(p, c, prob, a)) is not None:
            applied.append(done)
    placed_ids = {a.job_id for a in decision.assignments}
    report.waiting = [r.id for r in planned.requests if r.id not in placed_ids]
    placed, failed = p.writer.verify(applied)
    report.placed += placed
    report.failed += failed
    return True


STAGES: tuple[Callable[[Placer, Cycle], bool], ...] = (read, see, rescue, gate, replan, overdue, extend, place)


# -- the place stage's steps ---------------------------------------------------------------
#: a placement written and still held, for the read-back (Writer.verify): the job as read, the
#: update, its audit record, the tag it carries
Applied = tuple[SlurmJob, slurm_updates.Update, Record, Tag]


def _apply(p: Placer, c: Cycle, prob: Problem, a: Assignment) -> Applied | None:
    """Write one assignment to Slurm (Writer.apply), the job left held for the read-back; None
    when the job was left to Slurm, released unchanged, or not written."""
    report, now, view = c.report, c.now, prob.view
    job_id = a.job_id
    h, shape, job = prob.planned.held[job_id], prob.planned.shapes[job_id], prob.as_read[job_id]
    if a.first_fit and shape.nodes > 1 and not cluster_view.same_slots(view, a.gpus):
        # Slurm's own first fit, on other slots on each node than one per-node GRES
        # request can name: the job is Slurm's to place, as submitted
        failopen.release_unchanged(p.writer, job, f"first fit, left to Slurm; {a.reason}", report)
        if job_id in report.released:
            p._left[job_id] = now
        return None
    update = slurm_updates.update_for(h.job, shape, a.gpus, view)
    wrong = slurm_updates.check_update(shape, update)
    if wrong is not None:
        # never reach Slurm with another shape than the user's: release it as submitted
        log.error("job %s: placement would change its shape (%s); released unchanged", job_id, wrong)
        failopen.release_unchanged(p.writer, job, f"placement would change the job's shape ({wrong})", report)
        return None
    sfs = [view.cluster.sf(h.job_class)[g] for g in sorted(a.gpus)]
    comment = slurm_updates.summary(update, h.job_class, p.policy.name, c.factors.version, sfs, now)
    rec = decision_records.applied(job, h, a, update, sfs, view, policy=p.policy.name, version=c.factors.version,
                                   waited=p.waits.pop(job_id), now=now, at=p.writer.stamp())
    if not _hold_lasts(p, job, report):
        return None
    if p.writer.apply(job, update, comment):
        return job, update, rec, comment
    report.failed.append(job_id)
    p.audit.add(rec.failed())
    return None


def _hold_lasts(p: Placer, job: SlurmJob, report: CycleReport) -> bool:
    """Just before a job is retyped, its begin time checked against the time now (deciding a
    large queue takes a while): a hold that ends within `extend_margin_s` is moved on first, so
    Slurm cannot start the job in the middle of its retype. False when it could not be moved
    (the job was released unchanged)."""
    kept = failopen.extend(p.writer, [job], p.clock(), hold_s=p.cfg.hold_s, margin_s=p.extend_margin_s,
                           report=report)
    return bool(kept)


def _note_waits(p: Placer, decision: Decision, prob: Problem, now: float, report: CycleReport) -> None:
    """Jobs that wait on purpose for better GPUs: audited when the wait starts or its
    target changes (not every cycle), and remembered so their placement says how long."""
    report.waits.extend(w.job_id for w in decision.waits)
    for w, target in p.waits.note(decision, prob.view, now):
        p.audit.add(decision_records.waiting(prob.as_read[w.job_id], prob.planned.held[w.job_id], w, target, prob.view,
                                             policy=p.policy.name, now=now, at=p.writer.stamp()))


def observe(p: Placer, c: Cycle) -> None:
    """Observe mode: what we would do for pending GPU jobs, audited once per job; no job changes.
    The jobs it remembers are those still in Slurm's queue (a long-running observer would
    otherwise keep every job id it ever saw)."""
    p.observed &= {j.job_id for j in c.jobs}
    fresh = [j for j in c.jobs if j.pending and j.job_id not in p.observed and not holds.is_placed_by_pal(j)
             and (j.tres("tres_per_node").gpu_count or j.tres("tres_per_job").gpu_count)]
    if not fresh or not c.factors.by_slot:
        return
    prob = p.problem.build(fresh, c.jobs, c.nodes, c.factors, c.now, replans_as_submitted=False)
    decision = decide(p.policy, p.order, prob.snapshot, prob.planned.requests, p.ctx)
    if p.accounting is not None:
        p.accounting.observed(prob.view, prob.planned, decision, c.factors.version)
    for a in decision.assignments:
        p.audit.add(decision_records.observed(prob.as_read[a.job_id], prob.planned.held[a.job_id], a, prob.view,
                                              policy=p.policy.name, version=c.factors.version, at=p.writer.stamp()))
        p.observed.add(a.job_id)
        c.report.observed.append(a.job_id)


__all__ = ["STAGES", "Cycle", "Placer"]
