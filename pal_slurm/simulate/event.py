"""Event mode: continuous time, no preemption, a job starts the moment it is placed and
holds its GPUs until it ends -- the way Slurm runs jobs.

Each scheduling pass (after every arrival or completion) orders the waiting jobs, hands
the policy the free GPUs (sticky semantics: running jobs never move, whatever the
policy's own round-mode behaviour), and starts what it places. A job's run time is its
nominal run time x the largest raw PerfVar of its class over its GPUs (a synchronous job
runs at its slowest GPU's pace) x the locality penalty when it spans nodes.
"""

from __future__ import annotations

import bisect
import heapq
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal
from types import MappingProxyType

from pal_slurm.placement.model import MAX_WAIT_S, WAIT_FRACTION, Cluster, Decision, JobRequest, PlacementContext, Snapshot
from pal_slurm.placement import cost
from pal_slurm.placement.decide import decide
from pal_slurm.placement.orders import get_order
from pal_slurm.placement.policies import Policy
from pal_slurm.simulate.estimates import EXACT, RuntimeEstimate
from pal_slurm.simulate.metrics import JobOutcome, run_metrics, variability_gpu_s
from pal_slurm.simulate.result import SimResult
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
    #: after it ends (epilog, COMPLETING). pal_slurm.replay measures them on a real cluster.
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


#: called with every decision (snapshot, queue, whether it was a backfill pass, decision):
#: the parity test replays the same inputs through the placement daemon
DecisionHook = Callable[[Snapshot, Sequence[JobRequest], bool, Decision], None]


def runtime_s(job: TraceJob, gpus: Sequence[int], cluster: Cluster, locality_penalty: float) -> float:
    """The job's true run time on `gpus` (pal_slurm.placement.cost, the model policies plan with)."""
    return cost.runtime_s(job.nominal_runtime_s, gpus, cluster.pv(job.job_class), cluster.node_of, locality_penalty)


def simulate_events(trace: Trace, cluster: Cluster, policy: Policy, options: EventOptions = EventOptions(),
                    progress: Progress | None = None, on_decision: DecisionHook | None = None) -> SimResult:
    order = get_order(options.order)
    ctx = PlacementContext(locality_penalty=options.locality_penalty, rng=random.Random(options.seed),
                           wait_fraction=options.wait_fraction, max_wait_s=options.max_wait_s)
    unheld = options.unheld_classes

    def seen_at(j: TraceJob) -> float:
        return j.submit_time + (0.0 if j.job_class in unheld else options.visible_after_s)

    jobs = sorted(trace.jobs, key=seen_at if unheld else lambda j: j.submit_time)  # stable: file order on ties
    by_id = {j.job_id: j for j in jobs}
    if len(by_id) != len(jobs):
        raise ValueError(f"{trace.name}: job ids are not unique")
    free: set[int] = set(range(cluster.size))
    running: dict[str, tuple[int, ...]] = {}
    started: dict[str, float] = {}
    waiting: list[JobRequest] = []
    finish_heap: list[tuple[float, int, str]] = []
    outcomes: dict[str, JobOutcome] = {}
    busy_gpu_s = 0.0
    seq = 0
    i = 0
    freed_since_pass = True
    blocked_last = False
    ends: dict[str, float] = {}  # job -> when policies expect it to end (the estimate, not the truth)
    releases: list[tuple[float, tuple[int, ...]]] = []  # (expected end, GPUs) of running jobs, sorted: Snapshot.releases
    #: (expected end, job) of running jobs whose estimate may run out before they do
    #: (learned runtimes): from then on they are expected at start + limit, as the placer sees them
    outliving: list[tuple[float, str]] = []
    #: (true end, job) of running jobs with a release latency: from their end until their GPUs
    #: are free they are COMPLETING, and expected back at that moment, as the placer sees them
    completing: list[tuple[float, str]] = []
    ended: set[str] = set()  # jobs past their true end, not yet released
    estimate = options.runtime_estimate
    reorder_on_arrival = options.order != "fifo"
    next_bf = 0.0
    now = 0.0
    bf_dirty = False  # an arrival or completion since the last backfill pass
    running_view = MappingProxyType(running)
    ends_view = MappingProxyType(ends)
    dispatch, release, lead = options.start_latency_s, options.release_latency_s, options.start_lead_s
    shaped = _shaper(cluster)
    shapes: dict[str, int | None] = {}  # job -> GPUs per node it was placed with (None: split freely)
    while i < len(jobs) or finish_heap:
        t_arr = seen_at(jobs[i]) if i < len(jobs) else math.inf
        t_fin = finish_heap[0][0] if finish_heap else math.inf
        # a backfill pass is an event of its own when one is due and could do something
        t_bf = max(next_bf, now) if policy.backfills and bf_dirty and waiting and free else math.inf
        # a running job's estimate running out is an event when a pass could act on it
        t_out = max(outliving[0][0], now) if outliving and waiting and free else math.inf
        now = min(t_arr, t_fin, t_bf, t_out)
        while finish_heap and finish_heap[0][0] <= now:
            _, _, jid = heapq.heappop(finish_heap)
            gpus = running.pop(jid)
            free.update(gpus)
            del releases[bisect.bisect_left(releases, (ends.pop(jid), gpus))]
            ended.discard(jid)
            job = by_id[jid]
            outcomes[jid] = _outcome(job, gpus, started[jid], now - release, cluster)
            freed_since_pass = True
            bf_dirty = True
            if progress is not None:
                progress(len(outcomes))
        while completing and completing[0][0] <= now:
            t_end, jid = heapq.heappop(completing)
            if jid not in running:
                continue
            back, gpus = t_end + release, running[jid]
            del releases[bisect.bisect_left(releases, (ends[jid], gpus))]
            ends[jid] = back
            bisect.insort(releases, (back, gpus))
            ended.add(jid)
        while outliving and outliving[0][0] <= now:
            _, jid = heapq.heappop(outliving)
            later = estimate.when_outlived(by_id[jid]) if jid in running and jid not in ended else None
            if later is not None and started[jid] - lead + later > ends[jid]:
                gpus = running[jid]
                del releases[bisect.bisect_left(releases, (ends[jid], gpus))]
                ends[jid] = started[jid] - lead + later
                bisect.insort(releases, (ends[jid], gpus))
                freed_since_pass = bf_dirty = True  # the policy's view of the releases changed
        arrived = False
        while i < len(jobs) and seen_at(jobs[i]) <= now:
            j = jobs[i]
            per_node = j.gpus_per_node
            if per_node is None and options.shapes == "slurm":
                per_node = shaped(j.num_gpus)
            shapes[j.job_id] = per_node
            req = JobRequest(id=j.job_id, gpus=j.num_gpus, job_class=j.job_class, submit_time=j.submit_time,
                             gpus_per_node=per_node, remaining_s=estimate.before_start(j),
                             same_slots=options.same_slots and per_node is not None and j.num_gpus > per_node)
            if unheld:  # seen out of submission order: queue it by its age
                bisect.insort_right(waiting, req, key=lambda r: r.submit_time)
            else:
                waiting.append(req)
            i += 1
            arrived = True
            bf_dirty = True
        if not waiting or not free:
            continue
        bf_due = policy.backfills and bf_dirty and now >= next_bf
        if not bf_due and not freed_since_pass and blocked_last and not (arrived and reorder_on_arrival):
            continue  # nothing a pass could change: same free GPUs, same head of line
        if bf_due:
            next_bf, bf_dirty = now + options.backfill_interval_s, False
        snap = Snapshot(cluster=cluster, free=frozenset(free), running=running_view, now=now, expected_end=ends_view,
                        known_releases=tuple(releases))
        # waiting is kept in arrival order, which is FIFO's order already
        decision = decide(policy, None if options.order == "fifo" else order, snap, waiting, ctx, backfill=bf_due)
        if on_decision is not None:
            on_decision(snap, list(waiting), bf_due, decision)
        placed = set()
        for a in decision.assignments:
            job = by_id[a.job_id]
            free.difference_update(a.gpus)
            running[a.job_id] = a.gpus
            started[a.job_id] = now + dispatch
            dur = runtime_s(job, a.gpus, cluster, options.locality_penalty)
            busy_gpu_s += dur * len(a.gpus)
            expected = now + dispatch - lead + estimate.after_start(job, dur)
            ends[a.job_id] = expected
            bisect.insort(releases, (expected, a.gpus))
            if estimate.kind == "learned":
                heapq.heappush(outliving, (expected, a.job_id))
            if release > 0:
                heapq.heappush(completing, (now + dispatch + dur, a.job_id))
            seq += 1
            heapq.heappush(finish_heap, (now + dispatch + dur + release, seq, a.job_id))
            placed.add(a.job_id)
        if placed:
            waiting = _without(waiting, placed)
        blocked_last = decision.blocked is not None or bool(waiting)
        freed_since_pass = False
        if not finish_heap and waiting and i >= len(jobs):
            raise RuntimeError(f"{trace.name}: jobs {[w.id for w in waiting[:5]]} can never be placed on this cluster")
    ordered = tuple(outcomes[j.job_id] for j in trace.jobs)
    metrics = run_metrics(ordered, busy_gpu_seconds=busy_gpu_s, cluster_gpus=cluster.size)
    return SimResult(trace=trace.name, policy=policy.name, mode="event", order=options.order, outcomes=ordered,
                     metrics=metrics, busy_timeline=busy_curve(ordered),
                     cluster_gpus=cluster.size, skipped=len(trace.skipped),
                     tax_best_free_gpu_s=best_free_tax(ordered, cluster),
                     tax_unavoidable_gpu_s=unavoidable_tax(ordered, cluster, shapes))


def _outcome(job: TraceJob, gpus: tuple[int, ...], start: float, finish: float, cluster: Cluster) -> JobOutcome:
    """A finished job, with the variability tax of the GPUs it ran on: its pace is the one
    `runtime_s` charged it (the slowest of its GPUs), fixed for the whole run."""
    signed = variability_gpu_s(len(gpus), job.nominal_runtime_s, max(cluster.pv(job.job_class)[g] for g in gpus))
    return JobOutcome(job.job_id, job.num_gpus, job.submit_time, start, finish, gpu_ids=gpus,
                      job_class=job.job_class, nominal_s=job.nominal_runtime_s, tax_gpu_s=max(0.0, signed),
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
