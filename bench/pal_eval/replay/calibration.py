"""Calibrating an arm: a short run of whole-node jobs before the replay, and the delays it
shows (dispatch, the placer's hold and cycle, release, Slurm's StartTime lead), which the
prediction adds to the ideal simulator's (`arms.Latencies`)."""

from __future__ import annotations

from pal_eval.replay.arms import Latencies
from pal_eval.replay.harness import ArmRun
from pal_eval.replay.plan import ReplayPlan
from pal_eval.replay.start_lead import start_lead
from pal_slurm.errors import PalError
from pal_slurm.simulate.estimates import RuntimeEstimate


def calibration_plan(nodes: int, gpus_per_node: int, work_s: float = 8.0) -> ReplayPlan:
    """Two waves of whole-node jobs (class D, no variability to speak of): the first, one
    job every 0.25 s, finds every GPU free (submit -> start); the second, submitted while
    the first runs, queues behind it (end -> next start)."""
    from pal_eval.replay.plan import plan_replay
    from pal_slurm.simulate.traces import Trace, TraceJob

    jobs = tuple(TraceJob(job_id=f"cal{w}-{n}", num_gpus=gpus_per_node,
                          submit_time=0.25 * n if w == 0 else 0.25 * nodes + 1.0 + 0.1 * n, work=work_s,
                          work_unit="seconds", model="calibration", job_class="D", iter_time_s=1.0, line=0,
                          source="calibration")
                 for w in (0, 1) for n in range(nodes))
    return plan_replay(Trace(name="calibration", jobs=jobs), seconds_per_hour=3600.0,
                       estimate=RuntimeEstimate(kind="factor", factor=2.0), nodes=nodes, gpus_per_node=gpus_per_node)


def latencies_from(run: ArmRun, *, dispatch_s: float | None = None) -> Latencies:
    """The delays a calibration run shows (median over its jobs, real seconds).

    Wave 1: submit -> start = visible_after + start_latency. Without a placer nothing holds
    a job, so all of it is dispatch; with one, the dispatch is Slurm's own (`dispatch_s`,
    from the plain arm) and the rest is the placer. Wave 2: each job's start after the end
    of the wave-1 job that held its GPUs = release_latency + start_latency. Every job: its
    start less Slurm's StartTime for it (`start_lead`).
    """
    import statistics

    recs = [(t, t.record) for t in run.jobs if t.record is not None and "error" not in t.record]
    first = [r["start"] - t.submitted_at for t, r in recs if t.plan.job.job_id.startswith("cal0")]
    ends: dict[tuple[str, int], float] = {}
    for t, r in recs:
        if t.plan.job.job_id.startswith("cal0"):
            for n, m in r["gpus"]:
                ends[(n, m)] = r["end"]
    gaps = [r["start"] - max(ends[(n, m)] for n, m in r["gpus"])
            for t, r in recs if t.plan.job.job_id.startswith("cal1") and all((n, m) in ends for n, m in r["gpus"])]
    gaps = [g for g in gaps if g >= 0]  # a GPU a wave-1 job never held: nothing to measure
    if not first or not gaps:
        raise PalError(f"calibration of arm {run.arm}: {len(first)} first-wave and {len(gaps)} second-wave jobs "
                       f"measured; cannot tell the latencies ({'; '.join(run.problems[:3])})")
    submit_to_start = statistics.median(first)
    dispatch = submit_to_start if dispatch_s is None else min(dispatch_s, submit_to_start)
    return Latencies(visible_after_s=round(submit_to_start - dispatch, 3), start_latency_s=round(dispatch, 3),
                     release_latency_s=round(max(0.0, statistics.median(gaps) - dispatch), 3),
                     start_lead_s=round(start_lead([r for _t, r in recs]) or 0.0, 3))
