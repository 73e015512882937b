"""The simulator's prediction of one replay arm: the event simulator on exactly the replay's
inputs (the shaped trace, the limits the jobs asked for, the same cluster and locality
penalty, the latencies the arm's calibration measured), its mean over jittered copies, and
how it compares with the real run, metric by metric and job by job (docs/evaluation.md)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from pal_eval.replay.arms import Arm, ArmSettings, Latencies
from pal_eval.replay.plan import ReplayPlan
from pal_slurm.jobs.runtimes import LEARNED_END_GRACE_S
from pal_slurm.placement.base import unheld_classes
from pal_slurm.placement.model import Cluster, PlacementContext
from pal_slurm.placement.policies import get_policy
from pal_slurm.simulate.estimates import RuntimeEstimate
from pal_slurm.simulate.event import EventOptions, simulate_events
from pal_slurm.simulate.metrics import RunMetrics
from pal_slurm.simulate.result import SimResult
from pal_slurm.simulate.shake import shaken


#: the model of plain Slurm a replay is predicted with: sched/backfill's whole-node reservations for
#: every waiting job (the simulator's comparison baseline, slurm-backfill, shares the pal policies'
#: EASY mechanism instead; docs/evaluation.md, "The third sitting", measures both against a slurmctld)
BASELINE_POLICY = "slurm-reserving"
METRICS = ("avg_jct_s", "median_jct_s", "p99_jct_s", "makespan_s", "utilization", "tax_share")
TOLERANCE = 0.10  # the simulator's prediction counts as right within 10 % of the real run (docs/evaluation.md)


#: an arm's prediction is the mean over the replay's exact inputs and this many copies with every
#: arrival moved by up to `PREDICTION_JITTER_S` real seconds. Why: a queue is chaotic (which
#: nodes happen to be free when a long job starts decides its GPUs), and a real cluster's timing
#: varies by about that much per job (Slurm's dispatch of a job that finds its GPUs free: 0.2-2 s
#: measured), so one simulated trajectory is one draw; the repetitions' mean is predicted by the
#: mean of draws. Measured on the evaluation's stored runs: plain Slurm's makespan on the wide
#: fleet falls at 32.7 or 36.5 trace hours by such jitter alone (docs/evaluation.md).
PREDICTION_COPIES = 8
PREDICTION_JITTER_S = 0.5


@dataclass(frozen=True)
class Prediction:
    """An arm predicted: `base` on the replay's exact inputs (what job-by-job comparisons and
    plots use), `metrics` the mean over it and the jittered copies, `band` each metric's
    [min, max] over them (how far timing noise alone moves it)."""

    base: SimResult
    metrics: RunMetrics
    band: Mapping[str, tuple[float, float]]
    copies: int

    def as_dict(self) -> dict[str, Any]:
        return {"copies": self.copies, "jitter_s": PREDICTION_JITTER_S,
                "band": {m: list(v) for m, v in self.band.items()}}


def comparison(predicted: RunMetrics, real: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """Per metric: real, predicted and (predicted - real) / real (NaN where nothing was measured)."""
    rows = []
    for m in METRICS:
        pred = getattr(predicted, m)
        value = (real or {}).get(m)
        got = float(value) if isinstance(value, (int, float)) else math.nan
        diff = (pred - got) / got if got and math.isfinite(got) else math.nan
        rows.append({"metric": m, "real": got, "predicted": pred, "diff": diff})
    return rows


#: a job whose real start lies further than this from its predicted one (trace seconds) is named
START_MISS_S = 3600.0


def start_misses(run: Mapping[str, Any] | None, predicted: SimResult, plan: ReplayPlan,
                 beyond_s: float = START_MISS_S, first: int = 5) -> dict[str, Any]:
    """Job by job, where the real queue went another way than the predicted one: how many jobs
    started more than `beyond_s` trace seconds from their predicted start, and the `first` of
    them by submission (trace id, class, GPUs, and submit, real and predicted start in trace
    hours). Why: an arm's average can be predicted well or badly for reasons a mean hides;
    the earliest job that starts elsewhere is where to look (the placer's log at that moment
    against the simulator's decision)."""
    pred = {o.job_id: o.start_time for o in predicted.outcomes}
    missed = []
    for job in (run or {}).get("jobs", []):
        tid = str(job.get("trace_id"))
        if "start" not in job or tid not in pred:
            continue
        real = plan.to_trace_s(float(job["start"]))
        if abs(real - pred[tid]) > beyond_s:
            missed.append({"trace_id": tid, "class": job.get("class"), "gpus": job.get("gpus"),
                           "submitted_h": round(plan.to_trace_s(float(job["submitted"])) / 3600.0, 2),
                           "real_start_h": round(real / 3600.0, 2), "predicted_start_h": round(pred[tid] / 3600.0, 2)})
    missed.sort(key=lambda m: m["submitted_h"])
    return {"beyond_h": beyond_s / 3600.0, "count": len(missed), "of": len(pred), "first": missed[:first]}


def predict_mean(plan: ReplayPlan, cluster: Cluster, arm: str, settings: ArmSettings,
                 learned: Mapping[str, float] | None = None, *, copies: int = PREDICTION_COPIES,
                 jitter_s: float = PREDICTION_JITTER_S) -> Prediction:
    """`predict` on the replay's exact inputs and on `copies` copies with every arrival moved
    by up to `jitter_s` real seconds (seeds 1..copies): the mean and the band over them."""
    base = predict(plan, cluster, arm, settings, learned)
    runs = [base.metrics] + [predict(plan, cluster, arm, settings, learned, jitter=(seed, plan.to_trace_s(jitter_s))
                                     ).metrics for seed in range(1, copies + 1)]
    mean = RunMetrics(**{f.name: (base.metrics.jobs if f.name == "jobs" else
                                  sum(getattr(r, f.name) for r in runs) / len(runs)) for f in fields(RunMetrics)})
    band = {m: (min(getattr(r, m) for r in runs), max(getattr(r, m) for r in runs)) for m in METRICS}
    return Prediction(base=base, metrics=mean, band=band, copies=copies)


def predict(plan: ReplayPlan, cluster: Cluster, arm: str, settings: ArmSettings,
            learned: Mapping[str, float] | None = None, jitter: tuple[int, float] | None = None) -> SimResult:
    """The simulator's run of one arm on the replay's exact inputs (trace seconds); `learned`
    (trace job id -> learned runtime, trace seconds) is what the pal+history arm's placer
    estimates from; `jitter` (seed, trace seconds) moves every arrival by up to that much."""
    arm = Arm.of(arm)
    pal = arm.placed_by_pal
    estimate = (RuntimeEstimate.from_learned(learned or {}, grace_s=plan.to_trace_s(LEARNED_END_GRACE_S))
                if arm.learns_history else RuntimeEstimate(kind="limit"))
    policy = get_policy(settings.placer_policy if pal else BASELINE_POLICY)
    lat = settings.latencies.get(arm, Latencies())
    # the classes the placer tells the filter not to hold (all or none): visible at once, and
    # then scheduled by Slurm itself, as on the cluster
    unheld = unheld_classes(policy, cluster.perfvar, PlacementContext()) if pal else frozenset()
    by_slurm = not pal or bool(unheld)
    if by_slurm:
        policy = get_policy(BASELINE_POLICY)
    opts = EventOptions(unheld_classes=unheld, visible_after_s=plan.to_trace_s(lat.visible_after_s),
                        start_latency_s=plan.to_trace_s(lat.start_latency_s),
                        release_latency_s=plan.to_trace_s(lat.release_latency_s),
                        start_lead_s=plan.to_trace_s(lat.start_lead_s),
                        order="fifo", locality_penalty=settings.locality_penalty,
                        backfill_interval_s=plan.to_trace_s(settings.bf_interval_s if by_slurm
                                                            else settings.placer_interval_s),
                        same_slots=not by_slurm, wait_fraction=settings.wait_fraction,
                        max_wait_s=math.inf if settings.max_wait_s is None else plan.to_trace_s(settings.max_wait_s),
                        runtime_estimate=estimate)
    trace = plan.trace if jitter is None else shaken(plan.trace, *jitter)
    return simulate_events(trace, cluster, policy, opts)
