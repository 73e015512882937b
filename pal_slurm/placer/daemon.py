"""The placement daemon's cycle: read Slurm, place the held jobs, apply, verify, audit.

One cycle, as it reads:
    publish the heartbeat -> read jobs and nodes -> release what we must not hold ->
    re-plan stalled placements -> build the problem -> policy.place() -> apply -> verify.

Holds: job_submit.lua holds a job through its begin time (now + hold_s), so a held job
whose placer is gone starts by itself once that passes; while the placer keeps a job
waiting it moves the begin time on (see `_extend`). Releasing ends whichever hold the job
has (a begin time: StartTime=now; priority 0, from earlier releases: scontrol release).

Fail-open rules (docs/admin-guide.md): every path that cannot place a job releases it
unchanged and says why in its admin_comment; Slurm being unreachable skips the cycle (the
heartbeat keeps going only while Slurm answers, so a long outage lets the filter stop
holding); no classes at all releases held jobs unchanged; SIGTERM and `release-stale`
release everything we hold.
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
from pal_slurm.placement.model import PlacementContext, Snapshot
from pal_slurm.placement.orders import queue_window
from pal_slurm.placement.policies import get_policy
from pal_slurm.placer import plan
from pal_slurm.placer.audit import AuditSink, Record
from pal_slurm.placer.factors import FactorCache, Factors
from pal_slurm.slurm import filter_state
from pal_slurm.slurm.backend import SlurmBackend
from pal_slurm.slurm.model import SlurmJob, SlurmNode
from pal_slurm.slurm.tres import parse_gres_alloc

log = logging.getLogger(__name__)

ClassResolver = Callable[[SlurmJob], tuple[str, str]]


@dataclass
class CycleReport:
    held: int = 0
    placed: list[str] = field(default_factory=list)
    released: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)
    replanned: list[str] = field(default_factory=list)
    observed: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def as_dict(self) -> dict[str, object]:
        return {"held": self.held, "placed": self.placed, "released_unchanged": self.released, "failed": self.failed,
                "waiting": self.waiting, "replanned": self.replanned, "observed": self.observed,
                "seconds": round(self.seconds, 3)}


class Placer:
    """One daemon's state: the backend, the factor cache, the audit sink, and the clock."""

    def __init__(self, backend: SlurmBackend, cfg: PlacerConfig, factors: FactorCache, audit: AuditSink,
                 classes: Sequence[str], resolve_class: ClassResolver | None = None,
                 rules: Callable[[], list[dict[str, object]]] | None = None,
                 identities: Callable[[Sequence[SlurmJob]], None] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.backend = backend
        self.cfg = cfg
        self.factors = factors
        self.audit = audit
        self.classes = tuple(classes)
        self.resolve_class = resolve_class
        self.rules = rules
        self.identities = identities
        self._identified: set[str] = set()
        self.clock = clock
        self.policy = get_policy(cfg.policy)
        # a live single-node request must stay on one node (Slurm's request shape), so PAL's
        # across-nodes entries must never win: an infinite locality penalty sorts them last
        self.ctx = PlacementContext(locality_penalty=math.inf)
        self.observed: set[str] = set()
        self._models: tuple[str, ...] = tuple(m.lower() for m in cfg.models)

    # -- heartbeat --------------------------------------------------------------------
    def publish(self, *, alive: bool = True, nodes: Sequence[SlurmNode] = ()) -> None:
        """Write the filter state; alive=False writes heartbeat 0 so the filter stops holding now."""
        if not self._models and nodes:
            self._models = tuple(sorted({f.lower() for n in nodes for f in n.features
                                         if any(plan.slot_of_type(u) is not None for u in _gres_types(n))}))
        rules: list[dict[str, object]] = []
        if self.rules is not None:
            try:
                rules = self.rules()
            except Exception as exc:  # noqa: BLE001 - rules are a hint; the heartbeat must go out
                log.warning("class rules not refreshed: %s", exc)
        state = filter_state.FilterState(mode=self.cfg.mode, heartbeat=int(self.clock()) if alive else 0,
                                         stale_after=self.cfg.stale_after_s, models=self._models,
                                         rules=filter_state.rules_from(rules), hold_s=self.cfg.hold_s)
        filter_state.write(self.cfg.state_file, state)

    # -- one cycle -------------------------------------------------------------------------
    def cycle(self) -> CycleReport:
        t0 = time.perf_counter()
        now = self.clock()
        report = CycleReport()
        nodes = self.backend.nodes()
        jobs = self.backend.jobs()
        self.publish(nodes=nodes)
        factors = self.factors.get(now)
        self._record_identities(jobs)
        held = [j for j in jobs if plan.is_held_by_pal(j, now)]
        report.held = len(held)
        self._note_lapsed(jobs, now)
        if self.cfg.mode == "observe":
            for job in held:
                self._release_unchanged(job, "placer is in observe mode", report)
            self._observe(jobs, nodes, factors, now, report)
            return self._done(report, t0)
        if not factors.by_slot:
            for job in held:
                self._release_unchanged(job, "no GPU classes known yet (run pal classify)", report)
            return self._done(report, t0)
        for job in jobs:
            if (job.pending and plan.is_placed_by_pal(job) and job.priority != 0
                    and job.state_reason not in plan.NOT_WAITING_FOR_RESOURCES):
                at = plan.placed_at(job)
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
            if plan.held_by_priority(job) or (job.begin_time or 0) - now >= self.extend_margin_s:
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
            keep.append(replace(job, begin_time=until))
        return keep

    def _note_lapsed(self, jobs: Sequence[SlurmJob], now: float) -> None:
        """Re-tag jobs whose begin-time hold ended before we released them: Slurm already
        schedules them as submitted; the tag must not say they are held."""
        for job in jobs:
            if plan.hold_lapsed(job, now):
                self._comment(job.job_id, f"{plan.RELEASED_TAG} unchanged: the hold ended before a placement")

    def _unhold(self, job: SlurmJob) -> None:
        """End the hold `job` has: priority 0 (scontrol release) or its begin time (StartTime=now)."""
        if plan.held_by_priority(job):
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

    def _done(self, report: CycleReport, t0: float) -> CycleReport:
        self.audit.flush()
        report.seconds = time.perf_counter() - t0
        return report

    def _class_of(self, job: SlurmJob) -> tuple[str, str]:
        cls, src = plan.held_class(job)
        if cls.upper() in self.classes:
            return cls.upper(), src
        if self.resolve_class is not None:
            try:
                return self.resolve_class(job)
            except Exception as exc:  # noqa: BLE001 - fall back to the default class
                log.warning("job %s: class lookup failed (%s); default class", job.job_id, exc)
        return self.classes[0], "default"

    def _problem(self, held: Sequence[SlurmJob], jobs: Sequence[SlurmJob], nodes: Sequence[SlurmNode],
                 factors: Factors) -> tuple[plan.View, plan.Planned]:
        view = plan.build_view(nodes, jobs, factors.by_slot, self.classes)
        held_jobs = [plan.HeldJob(j, *self._class_of(j)) for j in held]
        return view, plan.plan_requests(held_jobs, view)

    def _place(self, held: Sequence[SlurmJob], jobs: Sequence[SlurmJob], nodes: Sequence[SlurmNode],
               factors: Factors, now: float, report: CycleReport) -> None:
        if not held:
            return
        as_read = {j.job_id: j for j in held}
        view, planned = self._problem([_as_submitted(j) for j in held], jobs, nodes, factors)
        for skip in planned.skips:
            self._release_unchanged(skip.job, skip.reason, report)
        if not planned.requests:
            report.waiting = list(planned.waiting)  # none fits now: they wait, and say so
            return
        snap = Snapshot(cluster=view.cluster, free=view.free, running={}, now=now)
        queue = queue_window(planned.requests, len(view.free), self.policy.lookahead)
        decision = self.policy.place(snap, queue, self.ctx)
        applied: list[tuple[SlurmJob, plan.Update, Record]] = []
        for a in decision.assignments:
            h = planned.held[a.job_id]
            update = plan.update_for(h.job, planned.shapes[a.job_id], a.gpus, view)
            sfs = [view.cluster.sf(h.job_class)[g] for g in sorted(a.gpus)]
            comment = plan.summary(update, h.job_class, self.policy.name, factors.version, sfs, now)
            rec = Record(job_id=h.job.job_id, policy=self.policy.name, job_class=h.job_class, version=factors.version,
                         gpus=[{"node": s.node, "minor": s.minor, "type": s.gres_type, "slowdown": round(f, 4)}
                               for s, f in zip(update.slots, sfs)],
                         alternatives=[{"gpus": [_slot_name(view.slots[g]) for g in gpus], "weight": w}
                                       for gpus, w in a.alternatives[:8]],
                         reason=f"class {h.job_class} ({h.class_source}); {a.reason}", outcome="applied")
            job = as_read[a.job_id]
            if self._apply(job, update, comment):
                applied.append((job, update, rec))
            else:
                report.failed.append(h.job.job_id)
                self.audit.add(_with(rec, outcome="failed"))
        placed_ids = {a.job_id for a in decision.assignments}
        report.waiting = [r.id for r in planned.requests if r.id not in placed_ids] + list(planned.waiting)
        self._verify(applied, report)

    def _apply(self, job: SlurmJob, update: plan.Update, comment: str) -> bool:
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

    def _restore(self, job: SlurmJob, update: plan.Update, why: str) -> None:
        """Put back the GPU request `job` had when this cycle read it, and release it.

        What it had, not what the user first asked for: on 22.05 a job that once carried
        per-slot types refuses an untyped request afterwards ("with and without type
        identification") and would be left with no GPUs; a re-planned job keeps its last slots."""
        steps = [[("TresPerNode", "")]]
        steps += [[(key, getattr(job, f))] for f, key in plan.FIELD_KEY.items() if getattr(job, f)]
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
        self._comment(job.job_id, f"{plan.RELEASED_TAG} unchanged: {why}")

    def _verify(self, applied: Sequence[tuple[SlurmJob, plan.Update, Record]], report: CycleReport) -> None:
        if not applied:
            return
        try:
            now_jobs = {j.job_id: j for j in self.backend.jobs(only={job.job_id for job, _u, _r in applied})}
        except SlurmError as exc:
            log.warning("placements not verified this cycle (%s)", exc)
            now_jobs = {}
        stamp = _now_utc()
        for job, update, rec in applied:
            got = now_jobs.get(job.job_id)
            if got is None or not got.pending or plan.matches(got, update):
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
        self._comment(job.job_id, f"{plan.RELEASED_TAG} unchanged: {why}")
        report.released.append(job.job_id)
        cls, _src = plan.held_class(job)
        self.audit.add(Record(job_id=job.job_id, policy=self.policy.name, job_class=cls, version=None, gpus=[],
                              alternatives=None, reason=why, outcome="released-unchanged", applied_at=_now_utc()))

    def _replan(self, job: SlurmJob, report: CycleReport) -> None:
        """A job we placed and released that has not started: tag it held (`src=replan`, keeping
        the request the user made), hold it through its begin time (now + hold_s, so it ends by
        itself if the placer goes) and unpin its node; the next cycle plans it from
        that request (see _as_submitted) and retypes it. Its per-slot request stays until then:
        on 22.05 an untyped request cannot be put back once a job carried typed ones. The tag
        goes first: once held, the job is ours to release (next cycle, SIGTERM, release-stale)."""
        if plan.original_request(job) is None:
            return
        cls, _src = plan.held_class(job)
        tag = f"{plan.HELD_TAG} class={cls} src=replan {job.admin_comment[len(plan.PLACED_TAG):].strip()}"[:900]
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
        try:
            self.backend.update_job(job.job_id, [("NodeList", "")])
        except SlurmError as exc:
            log.warning("job %s: re-planning, NodeList not cleared (%s)", job.job_id, exc)
        report.replanned.append(job.job_id)

    def _observe(self, jobs: Sequence[SlurmJob], nodes: Sequence[SlurmNode], factors: Factors, now: float,
                 report: CycleReport) -> None:
        """Observe mode: what we would do for pending GPU jobs, audited once per job; no job changes."""
        fresh = [j for j in jobs if j.pending and j.job_id not in self.observed and not plan.is_placed_by_pal(j)
                 and (j.tres("tres_per_node").gpu_count or j.tres("tres_per_job").gpu_count)]
        if not fresh or not factors.by_slot:
            return
        view, planned = self._problem(fresh, jobs, nodes, factors)
        snap = Snapshot(cluster=view.cluster, free=view.free, running={}, now=now)
        decision = self.policy.place(snap, queue_window(planned.requests, len(view.free), self.policy.lookahead),
                                     self.ctx)
        for a in decision.assignments:
            h = planned.held[a.job_id]
            self.audit.add(Record(job_id=a.job_id, policy=self.policy.name, job_class=h.job_class,
                                  version=factors.version, gpus=[{"node": view.slots[g].node, "minor": view.slots[g].minor}
                                                                 for g in a.gpus],
                                  alternatives=None, reason=f"observe: would place; {a.reason}", outcome="observe"))
            self.observed.add(a.job_id)
            report.observed.append(a.job_id)

    # -- shutdown and fail-safe -------------------------------------------------------------
    def release_all(self, why: str) -> list[str]:
        """Release every job we hold (SIGTERM, fail-safe); never raises for one job."""
        released: list[str] = []
        try:
            self.publish(alive=False)
        except OSError as exc:
            log.error("filter state not written: %s", exc)
        now = self.clock()
        for job in self.backend.jobs():
            if plan.is_held_by_pal(job, now):
                report = CycleReport()
                self._release_unchanged(job, why, report)
                released += report.released
        self.audit.flush()
        return released


def _as_submitted(job: SlurmJob) -> SlurmJob:
    """The job as planning must see it: a re-planned job with the GPU request the user made
    (recorded in its tag) instead of our last per-slot one, and no node pinned."""
    if plan.held_class(job)[1] != "replan" or (orig := plan.original_request(job)) is None:
        return job
    field_name, value = orig
    return replace(job, tres_per_node=value if field_name == "tres_per_node" else "",
                   tres_per_job=value if field_name == "tres_per_job" else "", required_nodes="")


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


def heartbeat_age(path: str, now: float | None = None) -> float | None:
    """Seconds since the heartbeat in the filter state file; None when unreadable or zero."""
    import re

    try:
        with open(path, encoding="ascii", errors="replace") as fh:
            text = fh.read(65536)
    except OSError:
        return None
    m = re.search(r"heartbeat\s*=\s*(\d+)", text)
    if not m or int(m.group(1)) == 0:
        return None
    return (time.time() if now is None else now) - int(m.group(1))


def _gres_types(node: SlurmNode) -> list[str | None]:
    return [u.type for u in parse_gres_alloc(node.gres) if u.name == "gpu"]


def _slot_name(slot: plan.Slot) -> str:
    return f"{slot.node}:{slot.minor}"


def _with(rec: Record, **changes: object) -> Record:
    return replace(rec, **changes)  # type: ignore[arg-type]


def _now_utc() -> datetime:
    return datetime.now(UTC)


__all__ = ["CycleReport", "Placer", "heartbeat_age", "tune_gc"]
