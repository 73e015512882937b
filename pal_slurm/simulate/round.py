"""Round mode: the PAL artifact's simulation semantics, so that its numbers reproduce.

Exactly as docs/simulation.md ("Round mode") states them:
rounds at T = 0, R, 2R, ... (R = 360 s). At each T: (1) every placed job gains
R / (iter_time x pm x loc) iterations, pm = the largest raw PerfVar of its class over its
GPUs and loc = lambda when it spans nodes, both fixed when it was (re)launched; (2) a job
whose iterations reach its duration finishes at T and frees its GPUs; (3) jobs submitted
at or before T join the queue; (4) the queue is ordered (FIFO by submit time, stable, by
default); (5) the policy places. Sticky policies keep running jobs where they are and
place only waiting jobs; non-sticky ones clear every allocation each round and re-place
all jobs in queue order (preemption and migration are free and keep progress).

After the traced jobs the artifact keeps generating jobs: job k copies trace row
k mod len(trace), arriving ceil(3600 x -ln(1 - U) / 2) s after the previous one, U from a
Random seeded 1 at the start of each run. They compete for GPUs but are not counted.
The run ends after the round in which every traced job has finished.

The variability tax (pal_slurm.simulate.metrics) is charged per round from the rate the job
actually progressed at: a round's nominal work (its iterations x iteration time, capped at
what the job still had to do, so the rounding up to the boundary is not counted) x GPUs x
(pm - 1), clipped at 0 per round. Summed over a job that never moves, that is the event
mode's gpus x nominal x (pm - 1) exactly.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from pal_slurm.placement.model import Cluster, JobRequest, PlacementContext, Snapshot
from pal_slurm.placement.cost import runtime_s
from pal_slurm.placement.decide import decide
from pal_slurm.placement.orders import get_order, queue_window
from pal_slurm.placement.policies import Policy
from pal_slurm.simulate.metrics import JobOutcome, run_metrics, variability_gpu_s
from pal_slurm.simulate.result import SimResult
from pal_slurm.simulate.traces import Trace, TraceJob


@dataclass(frozen=True)
class RoundOptions:
    order: str = "fifo"
    locality_penalty: float = 1.7
    round_seconds: float = 360.0
    extra_jobs: bool = True  # the artifact's endless stream of generated jobs after the trace
    extra_seed: int = 1
    max_rounds: int = 2_000_000


@dataclass
class _Job:
    src: TraceJob
    traced: bool
    submit: float
    done_iters: float = 0.0
    gpus: tuple[int, ...] = ()
    rate: float = 0.0  # iterations per second at the current placement
    first_start: float | None = None
    pace: float = 1.0  # pm at the current placement
    tax_gpu_s: float = 0.0
    variability_gpu_s_signed: float = 0.0
    finish: float | None = None
    attained_s: float = 0.0
    seq: int = 0  # arrival order, the FIFO tie-break
    _req: JobRequest | None = None

    def request(self, with_progress: bool) -> JobRequest:
        """The job as a policy sees it; rebuilt only when the order needs current progress."""
        if self._req is None or with_progress:
            remaining = max(self.src.work - self.done_iters, 0.0) * self.src.iter_time_s
            self._req = JobRequest(id=self.src.job_id, gpus=self.src.num_gpus, job_class=self.src.job_class,
                                   submit_time=self.submit, gpus_per_node=self.src.gpus_per_node,
                                   attained_s=self.attained_s, remaining_s=remaining)
        return self._req


def _extra_arrivals(trace: Trace, seed: int) -> "Callable[[], TraceJob]":
    rng = random.Random(seed)
    rows = trace.jobs
    last = max((j.submit_time for j in rows), default=0.0)
    k = len(rows)

    def next_job() -> TraceJob:
        nonlocal last, k
        u = rng.random()
        last = last + math.ceil(3600 * -math.log(1 - u) / 2)
        row = rows[k % len(rows)]
        job = TraceJob(job_id=f"extra-{k}", num_gpus=row.num_gpus, submit_time=last, work=row.work,
                       work_unit=row.work_unit, model=row.model, job_class=row.job_class,
                       iter_time_s=row.iter_time_s, line=row.line, source="generated",
                       gpus_per_node=row.gpus_per_node, name=row.name)
        k += 1
        return job

    return next_job


def simulate_rounds(trace: Trace, cluster: Cluster, policy: Policy, options: RoundOptions = RoundOptions(), *,
                    rng: random.Random | None = None, progress: Callable[[int], None] | None = None) -> SimResult:
    """One run of `policy` on `trace`; `rng` continues the stream the variability was drawn from.

    `progress`, when given, is called with the number of traced jobs finished so far each time
    it grows (the CLI's progress bar; the simulator itself prints nothing)."""
    order = get_order(options.order)
    ctx = PlacementContext(locality_penalty=options.locality_penalty, rng=rng or random.Random(42))
    R = options.round_seconds
    next_extra = _extra_arrivals(trace, options.extra_seed) if options.extra_jobs and trace.jobs else None
    arrivals = _Arrivals(sorted(trace.jobs, key=lambda j: j.submit_time), next_extra)
    run = _Run(traced_left=len(trace.jobs))
    memo = _Memo()
    for rnd in range(options.max_rounds):
        now = rnd * R
        # (1)-(2): progress over the past round, finishes at this boundary
        finished = run.advance(R, now) if rnd else False
        if finished and progress is not None:
            progress(len(trace.jobs) - run.traced_left)
        if run.traced_left == 0:
            break
        # (3) arrivals
        arrived = arrivals.admit(now, run)
        # (4)-(5) order and place
        if not policy.sticky or finished or arrived or options.order != "fifo":
            # a sticky pass with nothing new would find the same jobs blocked on the same GPUs
            _place_round(run.active, cluster, policy, order, ctx, now, options, memo)
        busy = sum(len(j.gpus) for j in run.active if j.gpus)
        if busy != run.timeline[-1][1]:
            run.timeline.append((now, busy))
    else:
        raise RuntimeError(f"{trace.name}: {policy.name} did not finish within {options.max_rounds} rounds")
    return _result(trace, cluster, policy, options, run)


@dataclass
class _Run:
    """The run so far: every job that arrived, those still in the queue or running, the traced
    jobs left to finish, the GPU time they were busy and the allocated GPUs over time."""

    traced_left: int
    jobs: dict[str, _Job] = field(default_factory=dict)
    active: list[_Job] = field(default_factory=list)  # arrived, unfinished, in arrival order
    busy_traced_gpu_s: float = 0.0
    timeline: list[tuple[float, int]] = field(default_factory=lambda: [(0.0, 0)])  # GPUs allocated per round

    def advance(self, R: float, now: float) -> bool:
        """Steps (1)-(2): every placed job's progress over the past round; those done finish at
        `now` and free their GPUs. Whether any job finished."""
        finished = False
        for job in self.active:
            if job.gpus:
                if job.traced:
                    _charge_variability(job, job.rate * R)
                job.done_iters += job.rate * R
                job.attained_s += R * len(job.gpus)
                if job.traced:
                    self.busy_traced_gpu_s += R * len(job.gpus)
                if job.done_iters >= job.src.work - 1e-9:
                    job.finish = now
                    job.gpus = ()
                    finished = True
                    if job.traced:
                        self.traced_left -= 1
        if finished:
            self.active = [j for j in self.active if j.finish is None]
        return finished

    def join(self, job: _Job) -> None:
        self.jobs[job.src.job_id] = job
        self.active.append(job)


@dataclass
class _Arrivals:
    """The traced jobs in submit order and the artifact's generated ones after them."""

    pending: list[TraceJob]
    next_extra: Callable[[], TraceJob] | None
    upcoming: TraceJob | None = None
    i: int = 0
    seq: int = 0

    def __post_init__(self) -> None:
        self.upcoming = self.next_extra() if self.next_extra else None

    def admit(self, now: float, run: _Run) -> bool:
        """Step (3): jobs submitted at or before `now` join the queue; whether any did."""
        arrived = False
        pending = self.pending
        while self.i < len(pending) and pending[self.i].submit_time <= now:
            self.seq += 1
            run.join(_Job(pending[self.i], True, pending[self.i].submit_time, seq=self.seq))
            self.i += 1
            arrived = True
        while self.upcoming is not None and self.upcoming.submit_time <= now:
            self.seq += 1
            run.join(_Job(self.upcoming, False, self.upcoming.submit_time, seq=self.seq))
            self.upcoming = self.next_extra() if self.next_extra else None
            arrived = True
        if arrived:
            run.active.sort(key=lambda x: (x.submit, x.seq))
        return arrived


def _result(trace: Trace, cluster: Cluster, policy: Policy, options: RoundOptions, run: _Run) -> SimResult:
    """The run's outcome per traced job (in trace order) and its metrics."""
    jobs = run.jobs
    outcomes = tuple(
        JobOutcome(j.job_id, j.num_gpus, j.submit_time, _first_start(jobs[j.job_id]), jobs[j.job_id].finish or 0.0,
                   job_class=j.job_class, nominal_s=j.nominal_runtime_s, tax_gpu_s=jobs[j.job_id].tax_gpu_s,
                   variability_gpu_s_signed=jobs[j.job_id].variability_gpu_s_signed)
        for j in trace.jobs
    )
    metrics = run_metrics(outcomes, busy_gpu_seconds=run.busy_traced_gpu_s, cluster_gpus=cluster.size)
    return SimResult(trace=trace.name, policy=policy.name, mode="round", order=options.order, outcomes=outcomes,
                     metrics=metrics, busy_timeline=tuple(run.timeline), cluster_gpus=cluster.size,
                     skipped=len(trace.skipped))


def _first_start(job: _Job) -> float:
    return job.first_start if job.first_start is not None else (job.finish or 0.0)


def _charge_variability(job: _Job, iters: float) -> None:
    """Add one round's variability tax at the job's current placement (module docstring)."""
    done = min(iters, max(job.src.work - job.done_iters, 0.0))
    nominal = done * job.src.nominal_runtime_s / job.src.work if job.src.work > 0 else 0.0
    signed = variability_gpu_s(len(job.gpus), nominal, job.pace)
    job.variability_gpu_s_signed += signed
    job.tax_gpu_s += max(0.0, signed)


def _launch(job: _Job, gpus: tuple[int, ...], cluster: Cluster, lam: float, now: float) -> None:
    # one iteration's time on these GPUs, by the cost model every policy plans with
    job.gpus = gpus
    job.pace = max(cluster.pv(job.src.job_class)[g] for g in gpus)
    job.rate = 1.0 / runtime_s(job.src.iter_time_s, gpus, cluster.pv(job.src.job_class), cluster.node_of, lam)
    if job.first_start is None:
        job.first_start = now


def _gpus(job: _Job) -> int:
    return job.src.num_gpus


@dataclass
class _Memo:
    """A deterministic non-sticky policy given the same jobs places them the same way."""

    key: tuple[str, ...] | None = None
    decision: dict[str, tuple[int, ...]] | None = None


def _place_round(active: list[_Job], cluster: Cluster, policy: Policy, order: Callable[..., list[JobRequest]],
                 ctx: PlacementContext, now: float, options: RoundOptions, memo: _Memo) -> None:
    lookahead = policy.lookahead
    if options.order == "fifo":
        ordered = active  # kept sorted by (submit time, arrival)
    else:
        by_id = {j.src.job_id: j for j in active}
        ordered = [by_id[r.id] for r in order([j.request(True) for j in active])]
    if policy.sticky:
        free = cluster.size - sum(len(j.gpus) for j in active if j.gpus)
        if free <= 0:
            return
        cand = queue_window([j for j in ordered if not j.gpus], free, lookahead, _gpus)
        if not cand:
            return
        held = {g for j in active for g in j.gpus}
        snap = Snapshot(cluster=cluster, free=frozenset(g for g in range(cluster.size) if g not in held),
                        running={j.src.job_id: j.gpus for j in active if j.gpus})
        by_id = {j.src.job_id: j for j in cand}
        for a in decide(policy, None, snap, [j.request(False) for j in cand], ctx).assignments:
            _launch(by_id[a.job_id], a.gpus, cluster, options.locality_penalty, now)
        return
    cand = queue_window(ordered, cluster.size, lookahead, _gpus)
    key = tuple(j.src.job_id for j in cand)
    if policy.deterministic and not policy.time_aware and key == memo.key and memo.decision is not None:
        decision = memo.decision
    else:
        decision = decide(policy, None, Snapshot.empty(cluster), [j.request(False) for j in cand], ctx).as_dict()
        memo.key, memo.decision = key, decision
    for job in active:
        gpus = decision.get(job.src.job_id, ())
        if gpus != job.gpus:
            if gpus:
                _launch(job, gpus, cluster, options.locality_penalty, now)
            else:
                job.gpus = ()  # preempted: progress is kept
