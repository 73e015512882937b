"""A slot turning slow on real Slurm (bench/slow_slot.py): the pure parts. The recurring workload
it submits, the factors file with one slot slowed, the jobs as their records show them, and the
checks and figures read from those.

The workload is pal_eval.recurring's (fingerprints resubmitted as Poisson processes, each run its
fingerprint's base time x lognormal noise), drawn for nodes of 4 or more GPUs and for a replay of
a day or two at a few tens of real seconds per trace hour: 1-, 2- and 4-GPU jobs (60, 25 and 15 % of
the fingerprints), base times of 0.75-3 trace hours (median 1.25, p90 2.5: at k = 30 s per trace
hour a job sleeps 22-90 real seconds on a typical GPU, long enough that Slurm's whole-second start
and end times stay within 1-5 % of its run time), time limits its base x U[2, 4] (a run on a GPU
1.5x slow still ends inside it), every job of class A. One class because the placer in observe
mode keeps a job's class in its ledger from the site's rules (here: none, so the first class, A),
not from the `pal:class=X` comment a job is submitted with: the submit filter tags only the jobs
it holds, and in observe mode it holds none. Jobs of class B submitted so would sleep by their
class B factors and be judged by their class A ones.

Every run of one fingerprint has one command line (the harness's `same_command`: the run's trace
id and work go in its environment), so the placer's ledger gives all its runs one fingerprint.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pal_eval.recurring import Mix, Workload, draw_fingerprints, trace_of
from pal_eval.replay.plan import ReplayPlan
from pal_slurm.simulate.traces import Trace

#: the workload's fingerprints: sizes (GPUs, per node, share), base times, limits (module doc)
SLOT_MIX = Mix(sizes=((1, None, 0.60), (2, None, 0.25), (4, None, 0.15)), classes=(("A", 1.0),),
               median_s=1.25 * 3600.0, p90_s=2.5 * 3600.0, min_s=0.75 * 3600.0, max_s=3.0 * 3600.0, pad=(2.0, 4.0))
#: the widest job of SLOT_MIX, on one node
WIDEST = max(g for g, _per, _share in SLOT_MIX.sizes)

Slot = tuple[str, int]  # (node, device minor)
Factors = Mapping[str, Mapping[str, Mapping[str, float]]]  # node -> minor -> class -> PerfVar


def workload(fingerprints: int, hours: float, load: float, gpus: int, seed: int, noise: float = 0.025) -> Trace:
    """`hours` trace hours of submissions of `fingerprints` recurring works (SLOT_MIX) at offered
    load `load` on `gpus` GPUs; every run of a work carries its fingerprint as its name."""
    fps = draw_fingerprints(fingerprints, seed, SLOT_MIX)
    return trace_of(fps, Workload(fingerprints=fingerprints, days=hours / 24.0, load=load, noise=noise), gpus, seed)


def named_by_fingerprint(plan: ReplayPlan) -> ReplayPlan:
    """Every job submitted under its fingerprint's name (the trace job's `name`): one user, one
    command, one name per work, so the placer's ledger keys every run of a work alike."""
    return replace(plan, jobs=tuple(replace(j, slurm_name=j.job.name) for j in plan.jobs))


def slowed(factors: Factors, slot: Slot, ratio: float) -> dict[str, dict[str, dict[str, float]]]:
    """The factors with `slot`'s PerfVar of every class times `ratio` (a job on it sleeps that
    much longer); ValueError when the factors have no such slot or the ratio is not positive."""
    node, minor = slot
    if not ratio > 0:
        raise ValueError(f"the slowdown must be a positive ratio, got {ratio!r}")
    if str(minor) not in factors.get(node, {}):
        raise ValueError(f"no GPU slot {node}:{minor} in the factors (nodes: {', '.join(sorted(factors))})")
    out = {n: {m: dict(per_class) for m, per_class in per_node.items()} for n, per_node in factors.items()}
    out[node][str(minor)] = {c: f * ratio for c, f in out[node][str(minor)].items()}
    return out


@dataclass(frozen=True)
class Ran:
    """One finished job as its record shows it: its Slurm id, its GPUs (from Slurm's own view of
    it), when it started (Slurm's StartTime, whole seconds, where the record has it; else the
    script's start) and ended (the script's end), the slowest factor it slept by."""

    slurm_id: str
    gpus: tuple[Slot, ...]
    start: float
    end: float
    pace: float

    @classmethod
    def of(cls, slurm_id: str, record: Mapping[str, Any]) -> Ran:
        start = record.get("slurm_start") or record["start"]
        return cls(slurm_id, tuple((str(n), int(m)) for n, m in record.get("gpus", ())), float(start),
                   float(record["end"]), float(record.get("pace") or 1.0))


def on_slot(runs: Iterable[Ran], slot: Slot) -> list[Ran]:
    return [r for r in runs if slot in r.gpus]


def started_between(runs: Iterable[Ran], slots: Iterable[Slot], t0: float, t1: float | None = None) -> list[Ran]:
    """The runs on any of `slots` that started at or after `t0` (and before `t1`)."""
    want = set(slots)
    return [r for r in runs if want.intersection(r.gpus) and r.start >= t0 and (t1 is None or r.start < t1)]


def node_mates(slot: Slot, gpus_per_node: int) -> list[Slot]:
    """The other slots of the slot's node."""
    return [(slot[0], m) for m in range(gpus_per_node) if m != slot[1]]


def ends_to_flag(runs: Sequence[Ran], slot: Slot, change_t: float, crossing: str) -> tuple[int, int] | None:
    """(jobs on `slot` that ended after the change up to and including `crossing`, the job whose
    end took the slot's statistic over the threshold; of those, the ones that started after the
    change: the slowed ones); None when `crossing` is no job on the slot."""
    mine = on_slot(runs, slot)
    last = next((r for r in mine if r.slurm_id == crossing), None)
    if last is None:
        return None
    ended = [r for r in mine if change_t < r.end <= last.end]
    return len(ended), sum(1 for r in ended if r.start >= change_t)


@dataclass(frozen=True)
class Flag:
    """A fail-slow flag as the experiment saw it open: the slot, its class, when the job that
    crossed the threshold ended (`at`) and when `pal gpus learn --apply` opened it (`seen`),
    that job, the slots flagged with it (run times could not tell them apart), and its jobs' pace
against its benchmark factor."""

    slot: Slot
    job_class: str
    at: float
    seen: float
    crossing: str
    with_slots: tuple[Slot, ...] = ()
    passive: float | None = None  # the median pace of its jobs since its statistic last stood at 0
    benchmark: float | None = None  # its benchmark factor for the class

    def as_dict(self, t0: float, k: float) -> dict[str, Any]:
        return {"gpu": slot_name(self.slot), "class": self.job_class, "at_trace_h": (self.at - t0) / k,
                "seen_trace_h": (self.seen - t0) / k, "crossing_job": self.crossing,
                "with": [slot_name(s) for s in self.with_slots], "passive_factor": self.passive,
                "benchmark_factor": self.benchmark}


def slot_name(slot: Slot) -> str:
    return f"{slot[0]}:{slot[1]}"


def first_flag(flags: Iterable[Flag], slot: Slot) -> Flag | None:
    return min((f for f in flags if f.slot == slot), key=lambda f: f.seen, default=None)


def not_completed(submitted: Iterable[str], states: Mapping[str, str]) -> dict[str, str]:
    """Slurm id -> the last state Slurm showed, for every submitted job not seen COMPLETED."""
    return {j: states.get(j, "never seen") for j in submitted if states.get(j) != "COMPLETED"}


def busy_share(runs: Iterable[Ran], slots: Iterable[Slot], t0: float, t1: float) -> float:
    """The share of the time between t0 and t1 that the runs held `slots` (each a GPU)."""
    want = set(slots)
    if t1 <= t0 or not want:
        return 0.0
    held = sum(len(want.intersection(r.gpus)) * max(0.0, min(r.end, t1) - max(r.start, t0)) for r in runs)
    return held / (len(want) * (t1 - t0))


@dataclass(frozen=True)
class Moments:
    """When the experiment's events happened (epoch seconds; None: it did not happen)."""

    t0: float  # the replay's start
    k: float  # real seconds per trace hour
    change: float | None
    holder_start: float | None
    stop: float  # the last submission
    end: float  # the last job's end


def figures(runs: Sequence[Ran], flags: Sequence[Flag], *, slot: Slot, slots: Sequence[Slot], at: Moments,
            submitted: Sequence[str], states: Mapping[str, str], intruders: Mapping[str, float]) -> dict[str, Any]:
    """What the run showed, from the jobs' records (`runs`), the flags opened, and Slurm's states:
    the flag on the slot (jobs' ends and trace hours from the change), the flags on other slots,
    the slot's jobs before the change, until the holder took it and after, the node's other
    slots while it was out of service, and every submitted job's end."""
    k, mates = at.k, [s for s in slots if s[0] == slot[0] and s != slot]
    first = first_flag(flags, slot)
    flag = None
    if first is not None and at.change is not None:
        ends = ends_to_flag(runs, slot, at.change, first.crossing)
        flag = {**first.as_dict(at.t0, k), "hours_after_change": (first.at - at.change) / k,
                "seen_hours_after_change": (first.seen - at.change) / k,
                "jobs_ended": ends[0] if ends else None, "slowed_jobs_ended": ends[1] if ends else None}
    change = at.change if at.change is not None else float("inf")
    held = at.holder_start if at.holder_start is not None else float("inf")
    after = started_between(runs, [slot], held)
    during = started_between(runs, mates, held) if at.holder_start is not None else []
    return {
        "flag": flag,
        "false_flags": [f.as_dict(at.t0, k) for f in flags if f.slot != slot],
        "slot_jobs": {"before_change": len(started_between(runs, [slot], at.t0, change)),
                      "change_to_holder": len(started_between(runs, [slot], change, held)),
                      "after_holder": len(after), "after_holder_ids": [r.slurm_id for r in after]},
        "mates": {"jobs_started_out_of_service": len(during),  # from the holder's start to the end
                  "busy_out_of_service": busy_share(runs, mates, held, at.end) if during else 0.0},
        "intruders": sorted(intruders),
        # the cluster's busy share from the end of the first two trace hours (the empty start) to the last submission
        "busy": busy_share(runs, slots, min(at.t0 + 2 * k, at.stop), at.stop),
        "jobs": {"submitted": len(submitted), "records": len(runs),
                 "completed": sum(1 for j in submitted if states.get(j) == "COMPLETED"),
                 "not_completed": not_completed(submitted, states)},
    }
