"""Event mode: continuous time, no preemption, a job starts the moment it is placed and
holds its GPUs until it ends -- the way Slurm runs jobs.

`simulate_events` moves the clock to the next event and runs `STAGES` on it, top to bottom, as
the placement daemon runs its cycle (placer/cycle.py); a stage that returns False ends the
event there:

    ends       jobs whose GPUs are free again: their outcomes, their GPUs back
    drift      (only with a drifting fleet, simulate/drift.py) the GPUs' true pace and the
               cluster the policy believes in, as of now: a running job on a GPU whose pace
               changed runs its remaining work at the new pace
    view       what the scheduler believes of the running jobs now (simulate/running.py, on
               placement/belief.py, the model the daemon's placer/problem.py shares): a job
               whose work has ended is COMPLETING, expected back at its release; a job that
               outlived its learned runtime is expected when its limit ends
    arrivals   the jobs the scheduler sees by now join the queue, in their shape and with
               their runtime estimate
    decide     a scheduling pass, when one could change anything: the policy is given the
               free GPUs, the running jobs with their expected ends and the queue in its order
               (placement/decide.py, the daemon's decision step)
    start      the placed jobs start: their GPUs taken, their true run time, what the
               scheduler knows of them

An event is a job seen, a job's GPUs free again, a backfill pass falling due, a running job
outliving its learned runtime (the last two only while a pass could place something), or a
drifting fleet's change. Running jobs never move (sticky semantics, whatever the policy's own
round-mode behaviour). A job's run time is its nominal run time x the largest raw PerfVar of its
class over its GPUs (a synchronous job runs at its slowest GPU's pace) x the locality penalty
when it spans nodes. The cluster is what the policy ranks by and what slows a job; with a
drifting fleet (`drift=`) the drift says both as they change (pal_slurm.simulate.pacing).
"""

from __future__ import annotations

import bisect
import heapq
import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from pal_slurm.placement import cost
from pal_slurm.placement.decide import decide as decide_placements
from pal_slurm.placement.model import (MAX_WAIT_S, WAIT_FRACTION, Cluster, Decision, JobRequest, PlacementContext,
                                       Snapshot)
from pal_slurm.placement.orders import QueueOrder, get_order
from pal_slurm.placement.policies import Policy
from pal_slurm.simulate.estimates import EXACT, RuntimeEstimate
from pal_slurm.simulate.metrics import JobOutcome, run_metrics, variability_gpu_s
from pal_slurm.simulate.pacing import Drift, PacedJobs
from pal_slurm.simulate.result import SimResult
from pal_slurm.simulate.running import RunningJobs
from pal_slurm.simulate.tax import best_free_tax, unavoidable_tax
from pal_slurm.simulate.traces import Trace, TraceJob, slurm_shape

Progress = Callable[[int], None]  # called with the number of jobs finished so far


@dataclass(frozen=True)
class EventOptions:
    order: str = "fifo"
    locality_penalty: float = 1.7
    seed: int = 0
    backfill_interval_s: float = 30.0  # how often a backfilling policy may look past a blocked head (Slurm's bf_interval)
    #: "slurm": a trace job without GPUs per node is placed in the shape it is submitted
    #: as (one node when it fits, else the fewest nodes that split it evenly: what the
    #: replay submits and the daemon can steer); "free": split as a policy likes (the PAL
    #: artifact's model, which no Slurm job of one per-node request can get)
    shapes: Literal["slurm", "free"] = "slurm"
    #: a multi-node job with GPUs per node gets the same GPU slots on every node, as the
    #: placement daemon can only steer it (one per-slot GRES request applies to each node);
    #: policies that leave a job to Slurm's own first fit are not bound by it
    same_slots: bool = True
    wait_fraction: float = WAIT_FRACTION
    max_wait_s: float = MAX_WAIT_S
    #: what policies are told about runtimes (jobs still run for their true time)
    runtime_estimate: RuntimeEstimate = EXACT
    #: a real scheduler's latencies (0: an ideal one, as the PAL artifact assumes). A job is
    #: seen by the scheduler `visible_after_s` after its submission (the placer's hold and
    #: cycle), starts `start_latency_s` after it is placed (dispatch, batch script launch)
    #: holding its GPUs from the placement, and its GPUs are free again `release_latency_s`
    #: after it ends (epilog, COMPLETING). The replay harness (bench/pal_eval/replay)
    #: measures them on a real cluster.
    visible_after_s: float = 0.0
    start_latency_s: float = 0.0
    release_latency_s: float = 0.0
    #: how long before its work starts a running job's start is as schedulers see it: Slurm's
    #: StartTime is a whole second taken at allocation, before slurmd launches the script, so
    #: Slurm's EndTime and the placer's start + estimate fall this much sooner than the work's
    #: start + estimate. Where the estimate is the job's runtime (learned), the job then looks
    #: overdue before it ends, and its expected end jumps to its time limit.
    start_lead_s: float = 0.0
    #: job classes the submit filter does not hold (the placer publishes them: nothing to
    #: choose among their GPUs), so `visible_after_s` does not apply to them; they still
    #: queue in submission order, as Slurm ranks a released job by its age
    unheld_classes: frozenset[str] = frozenset()

    def seen_at(self, job: TraceJob) -> float:
        """When the scheduler sees `job`: at its submission, after the hold where its class is held."""
        return job.submit_time + (0.0 if job.job_class in self.unheld_classes else self.visible_after_s)


#: called with every decision (snapshot, queue, whether it was a backfill pass, decision):
#: the parity test replays the same inputs through the placement daemon
DecisionHook = Callable[[Snapshot, Sequence[JobRequest], bool, Decision], None]


def runtime_s(job: TraceJob, gpus: Sequence[int], cluster: Cluster, locality_penalty: float) -> float:
    """The job's true run time on `gpus` (pal_slurm.placement.cost, the model policies plan with)."""
    return cost.runtime_s(job.nominal_runtime_s, gpus, cluster.pv(job.job_class), cluster.node_of, locality_penalty)


@dataclass(frozen=True)
class Run:
    """What one run is given, and what follows from that alone."""

    trace: Trace
    cluster: Cluster
    policy: Policy
    options: EventOptions
    ctx: PlacementContext
    order: QueueOrder | None  # None: FIFO, the order the queue is kept in anyway
    jobs: tuple[TraceJob, ...]  # in the order the scheduler sees them
    by_id: Mapping[str, TraceJob]
    shaped: Callable[[int], int | None]  # GPUs per node of a job of N GPUs, as submitted
    progress: Progress | None = None
    on_decision: DecisionHook | None = None
    drift: Drift | None = None

    @classmethod
    def of(cls, trace: Trace, cluster: Cluster, policy: Policy, options: EventOptions,
           progress: Progress | None = None, on_decision: DecisionHook | None = None,
           drift: Drift | None = None) -> Run:
        order = get_order(options.order)  # an unknown name fails here, FIFO's included
        ctx = PlacementContext(locality_penalty=options.locality_penalty, rng=random.Random(options.seed),
                               wait_fraction=options.wait_fraction, max_wait_s=options.max_wait_s)
        # stable: file order on ties; by submission alone unless some classes are seen sooner
        jobs = tuple(sorted(trace.jobs, key=options.seen_at if options.unheld_classes else lambda j: j.submit_time))
        by_id = {j.job_id: j for j in jobs}
        if len(by_id) != len(jobs):
            raise ValueError(f"{trace.name}: job ids are not unique")
        if drift is not None and options.release_latency_s > 0:
            # a COMPLETING job's release is planned from its work's end at its start
            raise ValueError("a drifting fleet is simulated without a release latency")
        return cls(trace, cluster, policy, options, ctx, None if options.order == "fifo" else order, jobs, by_id,
                   _shaper(cluster), progress, on_decision, drift)


@dataclass
class Passes:
    """Whether a scheduling pass could change anything (Slurm's main and backfill passes)."""

    freed: bool = True  # GPUs freed, or a belief moved, since the last pass
    blocked: bool = False  # the last pass left jobs waiting
    arrived: bool = False  # a job was seen at this event
    backfill_dirty: bool = False  # a job seen or ended since the last backfill pass
    next_backfill: float = 0.0
    backfill: bool = False  # this event's pass is a backfill pass


@dataclass
class State:
    """The run so far."""

    running: RunningJobs
    free: set[int]
    now: float = 0.0
    seen: int = 0  # jobs of `Run.jobs` seen so far
    waiting: list[JobRequest] = field(default_factory=list)  # in queue order
    shapes: dict[str, int | None] = field(default_factory=dict)  # job -> GPUs per node (None: split freely)
    started: dict[str, float] = field(default_factory=dict)
    freeing: list[tuple[float, int, str]] = field(default_factory=list)  # (GPUs free, seq, job), a heap
    outcomes: dict[str, JobOutcome] = field(default_factory=dict)
    busy_gpu_s: float = 0.0
    passes: Passes = field(default_factory=Passes)
    decision: Decision | None = None  # this event's decision
    believed: Cluster | None = None  # what the policy ranks by (None: the run's cluster)
    paced: PacedJobs | None = None  # a drifting fleet's running jobs, their progress at a changing pace


def simulate_events(trace: Trace, cluster: Cluster, policy: Policy, options: EventOptions = EventOptions(),
                    progress: Progress | None = None, on_decision: DecisionHook | None = None,
                    drift: Drift | None = None) -> SimResult:
    """`trace` on `cluster` under `policy`; with `drift`, on a fleet whose GPUs change speed (the
    module doc)."""
    run = Run.of(trace, cluster, policy, options, progress, on_decision, drift)
    s = State(running=RunningJobs(options.release_latency_s), free=set(range(cluster.size)),
              paced=None if drift is None else PacedJobs(drift, options.locality_penalty, cluster.node_of))
    while s.seen < len(run.jobs) or s.freeing:
        s.now = next_event(run, s)
        for stage in STAGES:
            if not stage(run, s):
                break
    return result(run, s)


def next_event(run: Run, s: State) -> float:
    """The next job seen, the next GPUs free, a backfill pass due, or a learned runtime outlived;
    the last two only while a pass could place something (jobs wait and GPUs are free)."""
    seen = run.options.seen_at(run.jobs[s.seen]) if s.seen < len(run.jobs) else math.inf
    freed = s.freeing[0][0] if s.freeing else math.inf
    could_place = bool(s.waiting and s.free)
    backfill = (max(s.passes.next_backfill, s.now)
                if run.policy.backfills and s.passes.backfill_dirty and could_place else math.inf)
    outlived = s.running.next_outlived
    learned = max(outlived, s.now) if outlived is not None and could_place else math.inf
    changes = max(run.drift.next_change(), s.now) if run.drift is not None else math.inf
    return min(seen, freed, backfill, learned, changes)


# -- the stages, in the order they run ------------------------------------------------------
def ends(run: Run, s: State) -> bool:
    release = run.options.release_latency_s
    while s.freeing and s.freeing[0][0] <= s.now:
        t, _, job_id = heapq.heappop(s.freeing)
        if s.paced is not None and not s.paced.current(job_id, t):
            continue  # an end the job's pace moved
        gpus = s.running.finish(job_id)
        s.free.update(gpus)
        s.outcomes[job_id] = _outcome(run.by_id[job_id], gpus, s.started[job_id], s.now - release, run.cluster, s.paced)
        s.passes.freed = s.passes.backfill_dirty = True
        if run.progress is not None:
            run.progress(len(s.outcomes))
    return True


def drift(run: Run, s: State) -> bool:
    """A drifting fleet as of now: the running jobs on GPUs whose pace changed run their remaining
    work at the new pace (their GPUs free again at the new end); a moved belief is a new cluster
    for the next pass."""
    if run.drift is None or s.paced is None:
        return True
    changed, moved = run.drift.advance(s.now)
    if changed:
        for job_id, gpus in list(s.running.gpus.items()):
            if not changed.isdisjoint(gpus) and (moved_end := s.paced.repace(run.by_id[job_id], gpus, s.now)):
                end, before = moved_end
                s.busy_gpu_s += (end - before) * len(gpus)
                heapq.heappush(s.freeing, (end, s.paced.seq[job_id], job_id))
    if moved:
        s.believed = run.drift.believed
        s.passes.freed = s.passes.backfill_dirty = True  # the factors a pass ranks by moved
    return True


def view(run: Run, s: State) -> bool:
    if s.running.catch_up(s.now):
        s.passes.freed = s.passes.backfill_dirty = True  # the releases a policy plans with moved
    return True


def arrivals(run: Run, s: State) -> bool:
    opts, estimate = run.options, run.options.runtime_estimate
    s.passes.arrived = False
    while s.seen < len(run.jobs) and opts.seen_at(run.jobs[s.seen]) <= s.now:
        j = run.jobs[s.seen]
        per_node = j.gpus_per_node
        if per_node is None and opts.shapes == "slurm":
            per_node = run.shaped(j.num_gpus)
        s.shapes[j.job_id] = per_node
        req = JobRequest(id=j.job_id, gpus=j.num_gpus, job_class=j.job_class, submit_time=j.submit_time,
                         gpus_per_node=per_node, remaining_s=estimate.before_start(j),
                         same_slots=opts.same_slots and per_node is not None and j.num_gpus > per_node)
        if opts.unheld_classes:  # seen out of submission order: queued by its age
            bisect.insort_right(s.waiting, req, key=lambda r: r.submit_time)
        else:
            s.waiting.append(req)
        s.seen += 1
        s.passes.arrived = s.passes.backfill_dirty = True
    return True


def decide(run: Run, s: State) -> bool:
    """A pass when jobs wait, GPUs are free and a pass could place otherwise than the last one
    (GPUs freed, a belief moved, a backfill pass due, a new job where the order is not FIFO)."""
    p = s.passes
    if not s.waiting or not s.free:
        return False
    p.backfill = run.policy.backfills and p.backfill_dirty and s.now >= p.next_backfill
    if not p.backfill and not p.freed and p.blocked and not (p.arrived and run.order is not None):
        return False  # nothing a pass could change: same free GPUs, same head of line
    if p.backfill:
        p.next_backfill, p.backfill_dirty = s.now + run.options.backfill_interval_s, False
    snap = Snapshot(cluster=s.believed or run.cluster, free=frozenset(s.free), running=s.running.gpus, now=s.now,
                    expected_end=s.running.ends, known_releases=tuple(s.running.releases))
    # the queue is kept in arrival order, which is FIFO's order already
    s.decision = decide_placements(run.policy, run.order, snap, s.waiting, run.ctx, backfill=p.backfill)
    if run.on_decision is not None:
        run.on_decision(snap, list(s.waiting), p.backfill, s.decision)
    return True


def start(run: Run, s: State) -> bool:
    decision, s.decision = s.decision, None
    if decision is None:
        return True
    opts = run.options
    placed = set()
    for a in decision.assignments:
        job = run.by_id[a.job_id]
        s.free.difference_update(a.gpus)
        began = s.started[a.job_id] = s.now + opts.start_latency_s
        if s.paced is None:
            dur = runtime_s(job, a.gpus, run.cluster, opts.locality_penalty)
        else:
            dur = s.paced.start(job, a.gpus, began, seq=len(s.started))
        s.busy_gpu_s += dur * len(a.gpus)
        seen_start = began - opts.start_lead_s  # Slurm's StartTime
        s.running.start(a.job_id, a.gpus, opts.runtime_estimate.running(job, seen_start, dur), seen_at=seen_start,
                        work_end=began + dur)
        # ties in the time GPUs free again go by start order (len(started): the jobs started so far)
        heapq.heappush(s.freeing, (began + dur + opts.release_latency_s, len(s.started), a.job_id))
        placed.add(a.job_id)
    if placed:
        s.waiting = _without(s.waiting, placed)
    s.passes.blocked = decision.blocked is not None or bool(s.waiting)
    s.passes.freed = False
    if not s.freeing and s.waiting and s.seen >= len(run.jobs):
        raise RuntimeError(f"{run.trace.name}: jobs {[w.id for w in s.waiting[:5]]} can never be placed on this "
                           "cluster")
    return True


STAGES: tuple[Callable[[Run, State], bool], ...] = (ends, drift, view, arrivals, decide, start)


# -- the run's result -----------------------------------------------------------------------
def result(run: Run, s: State) -> SimResult:
    """The outcomes in trace order and their figures."""
    trace, cluster = run.trace, run.cluster
    ordered = tuple(s.outcomes[j.job_id] for j in trace.jobs)
    metrics = run_metrics(ordered, busy_gpu_seconds=s.busy_gpu_s, cluster_gpus=cluster.size)
    return SimResult(trace=trace.name, policy=run.policy.name, mode="event", order=run.options.order,
                     outcomes=ordered, metrics=metrics, busy_timeline=busy_curve(ordered),
                     cluster_gpus=cluster.size, skipped=len(trace.skipped),
                     tax_best_free_gpu_s=best_free_tax(ordered, cluster),
                     tax_unavoidable_gpu_s=unavoidable_tax(ordered, cluster, s.shapes))


def _outcome(job: TraceJob, gpus: tuple[int, ...], start: float, finish: float, cluster: Cluster,
             paced: PacedJobs | None = None) -> JobOutcome:
    """A finished job, with the variability tax of the GPUs it ran on: its pace is the one
    `runtime_s` charged it (the slowest of its GPUs), fixed for the whole run; on a drifting fleet
    (`paced`) each stretch of one pace is charged at it (PacedJobs.finish), and the fleet is told."""
    if paced is None:
        signed = variability_gpu_s(len(gpus), job.nominal_runtime_s, max(cluster.pv(job.job_class)[g] for g in gpus))
        tax = max(0.0, signed)
    else:
        tax, signed = paced.finish(job, gpus, start, finish)
    return JobOutcome(job.job_id, job.num_gpus, job.submit_time, start, finish, gpu_ids=gpus,
                      job_class=job.job_class, nominal_s=job.nominal_runtime_s, tax_gpu_s=tax,
                      variability_gpu_s_signed=signed)


def _without(waiting: list[JobRequest], placed: set[str]) -> list[JobRequest]:
    """`waiting` less the `placed` jobs, scanning only as far as the last of them (a policy
    places from the front of a queue of thousands)."""
    keep: list[JobRequest] = []
    left = len(placed)
    for k, w in enumerate(waiting):
        if w.id in placed:
            left -= 1
            if left == 0:
                return keep + waiting[k + 1:]
        else:
            keep.append(w)
    return keep


def _shaper(cluster: Cluster) -> Callable[[int], int | None]:
    """GPUs per node of a trace job in its submitted shape (slurm_shape), or None (split
    freely) when this cluster has too few nodes of that width for the shape: such a job
    could never start in it, and the PAL artifact's traces are replayed on small clusters
    in tests."""
    widths = sorted((len(g) for g in cluster.node_gpus), reverse=True)
    max_per_node = cluster.max_gpus_per_node

    def per_node(gpus: int) -> int | None:
        nodes, per = slurm_shape(gpus, max_per_node)
        return per if nodes <= len(widths) and widths[nodes - 1] >= per else None

    return per_node


def busy_curve(outcomes: Sequence[JobOutcome]) -> tuple[tuple[float, int], ...]:
    """GPUs allocated over time, as (time, busy) steps, from the jobs' start and finish times."""
    deltas = sorted([(o.start_time, o.gpus) for o in outcomes] + [(o.finish_time, -o.gpus) for o in outcomes])
    steps: dict[float, int] = {0.0: 0}
    busy = 0
    for t, d in deltas:
        busy += d
        steps[t] = busy  # the last change at a time wins
    return tuple(sorted(steps.items()))
