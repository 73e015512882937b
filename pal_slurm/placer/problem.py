"""The cycle's placement problem, in the simulators' terms (placement/model.py).

What the policy is given: the steerable GPUs and their factors, the free ones, the running
jobs with their expected ends, and the held jobs with their class, Slurm rank and runtime
estimate. Slurm's ranks (partition tiers, priority settings) and the learned runtimes are
re-read every `classes_refresh_s` and kept while their source is down (placer/refresh.py):
the order and the estimates degrade, placement goes on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from pal_slurm.errors import SlurmError, SlurmUnavailable
from pal_slurm.jobs.fingerprint import fingerprint
from pal_slurm.jobs.runtimes import LEARNED_END_GRACE_S, SOURCE_LIMIT, SOURCE_NONE, Estimate, LearnedRuntimes
from pal_slurm.placement import belief
from pal_slurm.placement.model import Releasing, RunningKey, Snapshot
from pal_slurm.placer import cluster_view, holds, shapes, slurm_updates
from pal_slurm.placer.factors import Factors
from pal_slurm.jobs import user_class
from pal_slurm.placer.db_worker import Runner
from pal_slurm.placer.refresh import Refreshed
from pal_slurm.slurm.backend import SlurmBackend
from pal_slurm.slurm.model import SlurmJob, SlurmNode
from pal_slurm.slurm.priority import PriorityConfig, job_rank

log = logging.getLogger(__name__)

ClassResolver = Callable[[SlurmJob], tuple[str, str]]
#: what was learned about runtimes (pal_slurm.db.history_store.learned_runtimes_all; a plain
#: mapping is fingerprint -> seconds)
RuntimeHistory = Callable[[], "LearnedRuntimes | Mapping[str, float]"]


@dataclass(frozen=True)
class Problem:
    """One cycle's problem. `planned` holds each job as it is planned from (a re-planned one
    with its user's request); `as_read` holds the same jobs as Slurm showed them, by id:
    what a write starts from and a failed write restores."""

    view: cluster_view.View
    planned: shapes.Planned
    snapshot: Snapshot
    as_read: Mapping[str, SlurmJob]


def plan_from(job: SlurmJob) -> SlurmJob:
    """The job as planning must see it: a job the placer changed before (re-planned, or held
    again after a failed release or a crash mid-change) with the request its user made
    (recorded in its tag) instead of our last per-slot one, and the user's node list."""
    return slurm_updates.as_submitted(job)


Learned = LearnedRuntimes | Mapping[str, float]


def estimate_of(job: SlurmJob, learned: Learned | None) -> Estimate:
    """How long `job` is expected to run, and where that comes from: what its past runs
    learned (its fingerprint's job profiles, else its user + name's imported sacct history;
    never more than its time limit), else its time limit; 0 when neither is known (the policy
    then never makes it wait and backfills it only off reserved GPUs). A plain mapping is
    fingerprint -> seconds."""
    table = LearnedRuntimes.of(learned)
    fp = fingerprint(job.user, job.name, job.command) if table.by_fingerprint else ""
    return table.estimate(fp, job.user, job.name, job.time_limit_s)


def estimate_s(job: SlurmJob, learned: Learned | None) -> float:
    """`estimate_of(job, learned)` in seconds."""
    return estimate_of(job, learned).seconds


def expected_end(job: SlurmJob, learned: Learned | None, now: float) -> float | None:
    """When a running job is expected to end (placement/belief.py, the model the simulator
    shares): its start + learned estimate (+ `LEARNED_END_GRACE_S`, Slurm's whole-second clock)
    while that is still ahead, else Slurm's EndTime (start + time limit); None when neither is
    known. A COMPLETING job gives its GPUs back as its epilog finishes: expected just ahead of
    now, within `COMPLETING_GRACE_S` of its end (a job waiting for one of its GPUs then still
    gets it, instead of a slower GPU free now)."""
    if job.state == "COMPLETING":
        return belief.completing_end(job.end_time, now)
    start = job.start_time or None  # Slurm shows 0 for a start it does not know
    table = LearnedRuntimes.of(learned)
    found = None
    if start and table:
        fp = fingerprint(job.user, job.name, job.command) if table.by_fingerprint else ""
        found = table.learned(fp, job.user, job.name)
    return belief.Running(start, job.end_time, learned_s=found.seconds if found is not None else None,
                          grace_s=LEARNED_END_GRACE_S).expected_end(now)


class ProblemBuilder:
    """Builds each cycle's Problem; keeps Slurm's ranks and the learned runtimes between cycles."""

    def __init__(self, backend: SlurmBackend, classes: Sequence[str], *, refresh_s: float,
                 resolve_class: ClassResolver | None = None, history: RuntimeHistory | None = None,
                 clock: Callable[[], float] = time.time, runner: Runner | None = None,
                 user_class_policy: str = "lower", rules_snapshot: Callable[[], object] | None = None) -> None:
        self.backend = backend
        #: what `resolve_class` answers from (the class-rule table), so a job's class is worked
        #: out again only when it changed; None: asked every cycle
        self.rules_snapshot = rules_snapshot
        #: what a class a user declared may do ([jobs] user_class; pal_slurm.jobs.user_class)
        self.user_class = user_class_policy
        self.classes = tuple(classes)
        self.resolve_class = resolve_class
        self._ranks: Refreshed[tuple[dict[str, int], PriorityConfig]] = Refreshed(
            lambda _now: (self.backend.partition_tiers(), self.backend.priority_config()), refresh_s,
            initial=({}, PriorityConfig()), clock=clock, retry_s=refresh_s, keep_on=(SlurmError, AttributeError),
            raise_on=(SlurmUnavailable,),
            on_error=lambda e: log.warning("partition tiers / priority settings not read (%s); "
                                           "ordering by what is known", e))
        self._learned: Refreshed[LearnedRuntimes] | None = None if history is None else Refreshed(
            lambda _now: LearnedRuntimes.of(history()), refresh_s, initial=LearnedRuntimes(), clock=clock,
            retry_s=refresh_s, on_error=lambda e: log.warning("learned runtimes not reloaded (%s)", e[:200]),
            runner=runner, key="learned-runtimes")
        self._told: dict[str, str] = {}  # job -> the estimate last logged for it
        #: the last build's held jobs as planned, by (replans_as_submitted, job id): (the job as
        #: read, the learned runtimes used, the job as planned, its estimate). A held job reads
        #: the same SlurmJob cycle after cycle (the backend keeps unchanged ones), and planning
        #: it again (its tag, its user's request, its fingerprint) was a third of a cycle of
        #: 10,000 held jobs.
        self._planned: dict[tuple[bool, str], tuple[SlurmJob, SlurmJob, Estimate, tuple[str, str] | None]] = {}
        self._planned_with: LearnedRuntimes | None = None  # the learned runtimes those estimates came from
        self._classed_with: object = None  # the rule table those classes came from
        self._orphaned_since: dict[tuple[str, str], float] = {}  # (node, GRES type) -> first seen
        self._said_stuck: set[tuple[str, str]] = set()

    def refresh(self, now: float) -> None:
        """Start what is due to be read again (the learned runtimes, on the database thread
        where there is one), every cycle: a value read only when a job needs it would come a
        read too late for the first job after a quiet spell."""
        if self._learned is not None:
            self._learned.get(now)

    def releasing(self, view: cluster_view.View, now: float) -> dict[str, tuple[int, ...]]:
        """Node -> its GPUs being given back: `view.orphaned` (busy for no job: the nodes are
        read before the jobs, so one whose job ended in between looks so for a cycle), first
        seen within `COMPLETING_GRACE_S`. Seen on the test cluster: the placer, woken by a job's
        end, found the fast GPU a held job was waiting for busy with no release known, and
        took a slow one. A GPU busy for no job for longer (a job we cannot see, a stuck node)
        is not counted: nobody waits for a release that may not come."""
        seen = self._orphaned_since
        slots = view.slots
        keys = {(slots[g].node, slots[g].gres_type): g for g in view.orphaned}
        for key in [k for k in seen if k not in keys]:
            del seen[key]
        out: dict[str, list[int]] = {}
        new: list[str] = []
        stuck: list[str] = []
        for key, g in keys.items():
            first = seen.setdefault(key, now)
            name = f"{key[0]}:{slots[g].minor}"
            if first == now:
                new.append(name)
            if now - first <= belief.COMPLETING_GRACE_S:
                out.setdefault(key[0], []).append(g)
            elif key not in self._said_stuck:
                self._said_stuck.add(key)
                stuck.append(name)
        self._said_stuck &= set(keys)
        if new:
            log.info("GPUs busy for no running job (taken as being given back for up to %.0f s): %s",
                     belief.COMPLETING_GRACE_S, ",".join(sorted(new)))
        if stuck:
            log.warning("GPUs busy for no running job for over %.0f s (a job we cannot see, or a stuck node?): "
                        "%s; no job waits for them", belief.COMPLETING_GRACE_S, ",".join(sorted(stuck)))
        return {node: tuple(sorted(ids)) for node, ids in out.items()}

    def _say_estimate(self, job: SlurmJob, est: Estimate) -> None:
        """Log a learned estimate once per job and value (the placement log says where each
        learned estimate came from; a time limit is what Slurm shows anyway)."""
        if est.source in (SOURCE_LIMIT, SOURCE_NONE):
            return
        said = f"{est.seconds:.0f} s {est.source}"
        if self._told.get(job.job_id) == said:
            return
        if len(self._told) > 10_000:
            self._told.clear()
        self._told[job.job_id] = said
        limit = f"{job.time_limit_s:.0f} s" if job.time_limit_s else "none"
        log.info("job %s (%r, %r): runtime estimate %s (time limit %s)", job.job_id, job.user, job.name, said, limit)

    def class_of(self, job: SlurmJob) -> tuple[str, str]:
        """(class, source): the filter's tag when it names a known class, or for a job it did not
        tag a `pal:class=X` comment (either one the user declared only as `[jobs] user_class`
        allows: pal_slurm.jobs.user_class), else the rules (`resolve_class`), else the first class."""
        cls, src = holds.held_class(job)
        if holds.tag_of(job) is None and (declared := user_class.declared_in_comment(job.comment)) is not None:
            cls, src = declared, "comment"  # a job the filter did not tag (observe mode): its user's comment
        if cls.upper() in self.classes:
            if src in user_class.SELF_DECLARED and self.user_class != "any":
                return user_class.choose(cls.upper(), src, self._resolved(job), self.user_class, self.classes)
            return cls.upper(), src
        return self._resolved(job)

    def _resolved(self, job: SlurmJob) -> tuple[str, str]:
        """What the site's rules (or the learned class) say, else the first class."""
        if self.resolve_class is not None:
            try:
                return self.resolve_class(job)
            except Exception as exc:  # noqa: BLE001 - fall back to the default class
                log.warning("job %s: class lookup failed (%s); default class", job.job_id, exc)
        return self.classes[0], "default"

    def build(self, held: Sequence[SlurmJob], jobs: Sequence[SlurmJob], nodes: Sequence[SlurmNode],
              factors: Factors, now: float, *, replans_as_submitted: bool = True) -> Problem:
        """The problem for placing `held` among `jobs` on `nodes`; with `replans_as_submitted`
        a re-planned job is planned from its user's request (see `plan_from`)."""
        view = cluster_view.build_view(nodes, jobs, factors.by_slot, self.classes, now)
        tiers, prio = self._ranks.get(now)
        learned = self._learned.get(now) if self._learned is not None else LearnedRuntimes()
        held_jobs = []
        # a reload of the learned runtimes or the rules is a new table, most often an equal one
        before = self._planned if learned is self._planned_with or learned == self._planned_with else {}
        self._planned_with = learned
        rules = self.rules_snapshot() if self.rules_snapshot is not None else None
        same_rules = rules is not None and (rules is self._classed_with or rules == self._classed_with)
        self._classed_with = rules
        kept = {k: v for k, v in before.items() if k[0] != replans_as_submitted}
        for read in held:
            key = (replans_as_submitted, read.job_id)
            memo = before.get(key)
            if memo is not None and memo[0] is read:
                j, est, cls = memo[1], memo[2], memo[3] if same_rules else None
            else:
                j = plan_from(read) if replans_as_submitted else read
                est = estimate_of(j, learned)
                self._say_estimate(j, est)
                cls = None
            if cls is None:
                cls = self.class_of(j)
            kept[key] = (read, j, est, cls if rules is not None else None)
            tier, priority = job_rank(j, tiers, prio, now)
            held_jobs.append(shapes.HeldJob(j, *cls, tier=tier, priority=priority,
                                            estimate_s=est.seconds, estimate_source=est.source))
        self._planned = kept
        by_id = {j.job_id: j for j in jobs}
        ends: dict[RunningKey, float] = {jid: end for jid in view.running
                                              if (end := expected_end(by_id[jid], learned, now)) is not None}
        running: Mapping[RunningKey, tuple[int, ...]] = view.running
        if (back := self.releasing(view, now)):  # a release due now, as a job's (under a key no job id is)
            running = dict(running)
            for node, gpus in back.items():
                running[Releasing(node)] = gpus
                ends[Releasing(node)] = now + belief.COMPLETING_RELEASE_S
        snap = Snapshot(cluster=view.cluster, free=view.free, running=running, now=now, expected_end=ends)
        return Problem(view=view, planned=shapes.plan_requests(held_jobs, view), snapshot=snap,
                       as_read={j.job_id: j for j in held})


__all__ = ["ClassResolver", "Problem", "ProblemBuilder", "RuntimeHistory", "estimate_of", "estimate_s", "expected_end",
           "plan_from"]
