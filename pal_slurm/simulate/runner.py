"""Runs traces x policies in one mode and summarises them against a baseline policy.

The same policy objects the placement daemon uses are handed to the round or event
simulator; this module only builds the cluster each run sees and collects results.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pal_slurm.placement.model import Cluster
from pal_slurm.placement.policies import get_policy
from pal_slurm.simulate.metrics import geomean_ratios
from pal_slurm.simulate.result import SimResult
from pal_slurm.simulate.tax import pooled_comparison
from pal_slurm.simulate.traces import Trace
from pal_slurm.placement.variability import cluster_from_gpus, cluster_from_variability
from pal_slurm.simulate.artifact_draw import draw_artifact
from pal_slurm.simulate.estimates import EXACT, RuntimeEstimate
from pal_slurm.simulate.fleets import VariabilityModel

Mode = Literal["round", "event"]
#: called as jobs finish inside a run: (trace name, policy, jobs finished so far, jobs in the trace)
JobProgress = Callable[[str, str, int, int], None]


@dataclass(frozen=True)
class ArtifactVariability:
    """Per-GPU factors drawn from the artifact's CSV rows, re-drawn with the seed at the start
    of every run (as the artifact does), on a uniform nodes x gpus_per_node cluster."""

    profiles: Any  # pal_slurm.simulate.artifact_draw.ArtifactProfiles
    nodes: int
    gpus_per_node: int

    def cluster(self, rng: random.Random) -> Cluster:
        var = draw_artifact(self.profiles, self.nodes * self.gpus_per_node, rng)
        return cluster_from_variability(var, self.nodes, self.gpus_per_node)


@dataclass(frozen=True)
class FixedVariability:
    """Real GPU identities (a classification from the database): the same cluster every run."""

    fixed: Cluster

    def cluster(self, rng: random.Random) -> Cluster:
        return self.fixed


@dataclass(frozen=True)
class SimulationSpec:
    traces: tuple[Trace, ...]
    policies: tuple[str, ...]
    #: anything with ``.cluster(rng)``: ArtifactVariability, FixedVariability, the models of
    #: pal_slurm.simulate.fleets, or pal_slurm.simulate.drain.Drained around one of them
    variability: VariabilityModel
    mode: Mode = "round"
    order: str = "fifo"
    locality_penalty: float = 1.7
    round_seconds: float = 360.0
    seed: int = 42
    baseline: str = "slurm-backfill"
    runtime_estimate: RuntimeEstimate = EXACT


@dataclass(frozen=True)
class SimulationReport:
    spec: SimulationSpec
    results: tuple[SimResult, ...]
    summary: dict[str, dict[str, float | None]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "mode": self.spec.mode, "order": self.spec.order, "locality_penalty": self.spec.locality_penalty,
            "round_seconds": self.spec.round_seconds if self.spec.mode == "round" else None,
            "seed": self.spec.seed, "baseline": self.spec.baseline,
            "runtime_estimate": self.spec.runtime_estimate.describe(),
            "runs": [r.as_dict() for r in self.results],
            "summary": self.summary,
        }


def run_one(trace: Trace, policy_name: str, spec: SimulationSpec,
            progress: Callable[[int], None] | None = None) -> SimResult:
    """One run; `progress` is called with the number of traced jobs finished as it grows."""
    policy = get_policy(policy_name)
    rng = random.Random(spec.seed)
    cluster = spec.variability.cluster(rng)
    if spec.mode == "round":
        from pal_slurm.simulate.round import RoundOptions, simulate_rounds

        opts = RoundOptions(order=spec.order, locality_penalty=spec.locality_penalty,
                            round_seconds=spec.round_seconds)
        return simulate_rounds(trace, cluster, policy, opts, rng=rng, progress=progress)
    from pal_slurm.simulate.event import EventOptions, simulate_events

    return simulate_events(trace, cluster, policy,
                           EventOptions(order=spec.order, locality_penalty=spec.locality_penalty, seed=spec.seed,
                                        runtime_estimate=spec.runtime_estimate), progress=progress)


def summarise(results: Sequence[SimResult], baseline: str) -> dict[str, dict[str, float | None]]:
    """policy -> geomean over traces of its ratio to the baseline, for JCT, makespan and utilization,
    and the variability tax it removed and the wait it added against the baseline, pooled over
    the traces both ran (pal_slurm.simulate.tax)."""
    out: dict[str, dict[str, float | None]] = {}
    for key in ("avg_jct_s", "makespan_s", "utilization"):
        table: dict[str, dict[str, float]] = {}
        for r in results:
            table.setdefault(r.trace, {})[r.policy] = float(r.metrics.as_dict()[key])
        for policy, ratio in geomean_ratios(table, baseline).items():
            out.setdefault(policy, {})[f"{key.removesuffix('_s')}_ratio"] = ratio
    base = {r.trace: r for r in results if r.policy == baseline}
    for policy in out:
        pairs = [(r, base[r.trace]) for r in results if r.policy == policy and r.trace in base]
        if pairs:
            out[policy].update(pooled_comparison(pairs).as_dict())
    return out


def run_simulations(spec: SimulationSpec, progress: Callable[[SimResult], None] | None = None,
                    job_progress: JobProgress | None = None) -> SimulationReport:
    """Every trace under every policy (and the baseline). `progress` is called after each run,
    `job_progress` as jobs finish inside a run, so a caller can show progress in a long run;
    both are optional and the simulation does no output of its own."""
    for name in (*spec.policies, spec.baseline):
        get_policy(name)  # fail before any work on an unknown name
    for trace in spec.traces:
        spec.runtime_estimate.check(trace.jobs)  # and on a trace the estimate model cannot serve
    policies = tuple(dict.fromkeys((*spec.policies, spec.baseline)))
    results = []
    for trace in spec.traces:
        for name in policies:
            on_jobs = None
            if job_progress is not None:
                on_jobs = (lambda n, t=trace.name, p=name, total=len(trace.jobs): job_progress(t, p, n, total))
            result = run_one(trace, name, spec, on_jobs)
            results.append(result)
            if progress is not None:
                progress(result)
    return SimulationReport(spec, tuple(results), summarise(results, spec.baseline))
