"""What placement takes of passive speed, and which runs the estimate reads: one rule for the
daemon (`pal gpus learn`, pal_slurm.placer.factors) and the simulator (pal_slurm.simulate.learning).

Why these two rules (docs/simulation.md, "Drifting fleets", measures both ways):

- **a passive factor places only where it contradicts the benchmark**: resting on at least
  `min_paced` jobs the GPU paced, its interval and the benchmark's (factor x (1 +- noise)) apart.
  Taking every well-evidenced passive factor would trade a precise benchmark for a noisier
  estimate on every healthy GPU (one simulated month: 0.786 of the drift's tax removed on one seed
  against 0.957 with this rule);
- **a GPU's runs that began before its latest profile are not evidence of its speed now**: a
  re-profiled GPU (repaired, or confirmed slow) would otherwise keep the factor of its old runs
  for up to a window. The fail-slow CUSUM starts there too.

Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

from pal_slurm.classification.passive import JobRun

__all__ = ["Interval", "placement_takes", "since_profile"]


class Interval(Protocol):
    """A passive estimate as stored or as computed: its factor, interval and evidence."""

    @property
    def factor(self) -> float: ...
    @property
    def low(self) -> float: ...
    @property
    def high(self) -> float: ...
    @property
    def paced(self) -> int: ...


def placement_takes(estimate: Interval, benchmark: float, *, min_paced: int, benchmark_noise: float) -> bool:
    """Whether placement ranks a GPU by its passive factor for a class instead of its benchmark's:
    enough paced jobs, and the two intervals apart (slower or faster)."""
    if estimate.paced < min_paced:
        return False
    return estimate.low > benchmark * (1 + benchmark_noise) or estimate.high < benchmark * (1 - benchmark_noise)


def since_profile(runs: Iterable[JobRun], profiled: Mapping[str, float]) -> list[JobRun]:
    """The runs the estimate reads: those begun at or after the latest profile of every GPU they
    ran on (`profiled`: GPU -> epoch seconds; a GPU absent was never re-profiled in the window)."""
    return [r for r in runs if all(r.ended_at - r.runtime_s >= profiled.get(g, float("-inf")) for g in r.gpus)]
