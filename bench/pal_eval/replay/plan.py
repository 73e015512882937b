"""What a replay submits, and the trace the simulator predicts it from: pure.

A replay runs a trace on a real Slurm cluster with time compressed: one trace hour is
`seconds_per_hour` real seconds. Every job becomes one plain `sbatch` whose script
sleeps for the job's work on the GPUs Slurm gave it. Three things make the real run and
the simulator's prediction the same experiment:

- **Shape.** Slurm needs a job's node count and GPUs per node. A job of at most one
  node's GPUs asks for one node; a wider one asks for the fewest nodes that split it
  evenly (8 GPUs on 4-GPU nodes: 2 x 4; 6 GPUs: 2 x 3). The predicted trace carries the
  same `gpus_per_node`, so both sides place the same shapes.
- **Time limits.** Slurm keeps a job's limit in whole minutes, which at 10 s per trace
  hour is 6 trace hours. The limit a job asks for is its runtime estimate (the
  `--runtime-estimate` model) rounded up to a whole real minute, and the predicted trace
  gets exactly that limit back in trace seconds (and is simulated with ``limit``): Slurm's
  backfill, the placer and the simulator all plan with the same number. Jobs may run
  past their limit (the replay cluster sets ``OverTimeLimit=UNLIMITED``), as they do in
  the simulator.
- **Arrivals.** A job is submitted `submit_time x seconds_per_hour / 3600` real seconds
  after the replay starts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from pal_slurm.errors import InputError
from pal_slurm.simulate.estimates import RuntimeEstimate
from pal_slurm.simulate.traces import Trace, TraceJob, slurm_shape as job_shape

#: the longest real time limit Slurm takes as a plain minute count (about 69 days)
_MAX_LIMIT_MIN = 99_999


def job_name(trace_id: str) -> str:
    """The Slurm job name a trace job is submitted under (what the runtime history keys by)."""
    return f"replay-{trace_id}"


@dataclass(frozen=True)
class ReplayJob:
    """One trace job as submitted: its shape, when, for how long, with which limit."""

    job: TraceJob  # the trace's job, with gpus_per_node and limit_s (trace seconds) set
    nodes: int
    gpus_per_node: int
    submit_at_s: float  # real seconds after the replay's start
    work_s: float  # real seconds on a median GPU, in one node
    limit_min: int  # the --time it asks for, in real minutes
    #: the Slurm job name, where it is not `job_name` of the trace id (a recurring workload submits
    #: every run of one work under its fingerprint's name: bench/pal_eval/slow_slot.py)
    slurm_name: str | None = None

    @property
    def name(self) -> str:
        return self.slurm_name or job_name(self.job.job_id)


@dataclass(frozen=True)
class ReplayPlan:
    trace: Trace  # shaped and limited: what the simulator predicts from
    jobs: tuple[ReplayJob, ...]  # in submission order
    seconds_per_hour: float
    nodes: int
    gpus_per_node: int
    estimate: str  # the runtime-estimate model the limits came from

    def to_trace_s(self, real_s: float) -> float:
        return real_s * 3600.0 / self.seconds_per_hour

    def to_real_s(self, trace_s: float) -> float:
        return trace_s * self.seconds_per_hour / 3600.0


def limit_minutes(estimate_trace_s: float, seconds_per_hour: float) -> int:
    """A runtime estimate in trace seconds as Slurm's --time: whole real minutes, at least 1."""
    real = estimate_trace_s * seconds_per_hour / 3600.0
    return int(min(max(1, math.ceil(real / 60.0 - 1e-9)), _MAX_LIMIT_MIN))


def plan_replay(trace: Trace, *, seconds_per_hour: float, estimate: RuntimeEstimate, nodes: int,
                gpus_per_node: int) -> ReplayPlan:
    """The submissions of `trace` on `nodes` x `gpus_per_node` GPUs; InputError naming the
    job and the cluster when a job can never run there (too wide, or no even split)."""
    if seconds_per_hour <= 0 or not math.isfinite(seconds_per_hour):
        raise InputError(f"seconds per trace hour must be a positive number, got {seconds_per_hour!r}")
    if nodes < 1 or gpus_per_node < 1:
        raise InputError(f"the cluster has {nodes} x {gpus_per_node} GPUs: nothing can run on it")
    if not trace.jobs:
        raise InputError(f"{trace.name}: the trace has no jobs to replay")
    estimate.check(trace.jobs)
    cluster = f"{nodes} nodes x {gpus_per_node} GPUs"
    widest = max(trace.jobs, key=lambda j: j.num_gpus)
    if widest.num_gpus > nodes * gpus_per_node:
        raise InputError(f"{trace.name}: job {widest.job_id} needs {widest.num_gpus} GPUs; the cluster has "
                         f"{cluster} = {nodes * gpus_per_node}", source=widest.source, line=widest.line)
    out: list[ReplayJob] = []
    for j in sorted(trace.jobs, key=lambda x: x.submit_time):  # stable: file order on ties
        per_node = j.gpus_per_node
        if per_node is None:
            try:
                n, per_node = job_shape(j.num_gpus, gpus_per_node)
            except ValueError as exc:
                raise InputError(f"{trace.name}: job {j.job_id}: {exc}", source=j.source, line=j.line) from exc
        else:
            if j.num_gpus % per_node or per_node > gpus_per_node:
                raise InputError(f"{trace.name}: job {j.job_id} needs {per_node} GPUs on each node; the cluster "
                                 f"has {cluster}", source=j.source, line=j.line)
            n = j.num_gpus // per_node
        if n > nodes:
            raise InputError(f"{trace.name}: job {j.job_id} needs {n} nodes of {per_node} GPUs; the cluster has "
                             f"{cluster}", source=j.source, line=j.line)
        minutes = limit_minutes(estimate.before_start(j), seconds_per_hour)
        limited = replace(j, gpus_per_node=per_node, limit_s=minutes * 60.0 * 3600.0 / seconds_per_hour)
        out.append(ReplayJob(job=limited, nodes=n, gpus_per_node=per_node,
                             submit_at_s=j.submit_time * seconds_per_hour / 3600.0,
                             work_s=j.nominal_runtime_s * seconds_per_hour / 3600.0, limit_min=minutes))
    shaped = Trace(name=trace.name, jobs=tuple(r.job for r in out), skipped=trace.skipped)
    return ReplayPlan(trace=shaped, jobs=tuple(out), seconds_per_hour=seconds_per_hour, nodes=nodes,
                      gpus_per_node=gpus_per_node, estimate=estimate.describe())


def first_jobs(trace: Trace, count: int) -> Trace:
    """The first `count` jobs by submit time (a short replay of a long trace)."""
    jobs: Sequence[TraceJob] = sorted(trace.jobs, key=lambda j: j.submit_time)[:count]
    return Trace(name=trace.name, jobs=tuple(jobs), skipped=trace.skipped)


def capped_runtimes(trace: Trace, hours: float) -> Trace:
    """Every job's work cut to at most `hours` on a median GPU: the same jobs, shapes and
    arrivals, with the few multi-day jobs that decide a Philly trace's makespan (and most of
    a replay's wall time) shortened; a short evaluation keeps the queue they build."""
    if not hours > 0:
        raise ValueError(f"the runtime cap must be > 0 trace hours, got {hours:g}")
    cap_s = hours * 3600.0
    jobs = []
    for j in trace.jobs:
        if j.nominal_runtime_s > cap_s:
            j = replace(j, work=j.work * cap_s / j.nominal_runtime_s)
        jobs.append(j)
    return Trace(name=f"{trace.name}-cap{hours:g}h", jobs=tuple(jobs), skipped=trace.skipped)


def check_cluster(plan: ReplayPlan, node_gpus: dict[str, int]) -> None:
    """InputError naming the widest job and the real cluster when the cluster Slurm has
    (node -> GPUs of schedulable nodes) cannot run every job of the plan."""
    per_node = sorted(node_gpus.values(), reverse=True)
    have = f"{len(per_node)} schedulable nodes with {', '.join(map(str, per_node[:8]))}" \
           f"{', ...' if len(per_node) > 8 else ''} GPUs" if per_node else "no schedulable GPU node"
    for j in sorted(plan.jobs, key=lambda x: (-x.nodes, -x.gpus_per_node)):
        if sum(1 for g in per_node if g >= j.gpus_per_node) < j.nodes:
            raise InputError(f"{plan.trace.name}: job {j.job.job_id} needs {j.nodes} nodes with {j.gpus_per_node} "
                             f"GPUs each; the cluster has {have}", source=j.job.source, line=j.job.line)
