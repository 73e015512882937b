"""The replay's arms and what they run with: plain Slurm, pal-slurm with runtimes from time
limits, pal-slurm with runtimes learned from earlier runs' sacct exports; their settings and
the latencies a real scheduler adds. The words the run, the prediction and the results share."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from pal_slurm.errors import PalError
from pal_slurm.placement.model import DEFAULT_POLICY


class Arm(StrEnum):
    """One way of running the replayed trace on the cluster: plain Slurm, the placer with
    runtimes from time limits, or the placer with runtimes learned from earlier runs' sacct
    history. Compares equal to its name ("pal+history"), which the results store."""

    SLURM = "slurm"
    PAL = "pal"
    PAL_HISTORY = "pal+history"

    @property
    def placed_by_pal(self) -> bool:
        """The placer runs (enforce mode, the filter on); else plain Slurm (the kill switch on)."""
        return self is not Arm.SLURM

    @property
    def learns_history(self) -> bool:
        """Its placer estimates from the runtimes learned from earlier runs' sacct exports."""
        return self is Arm.PAL_HISTORY

    @classmethod
    def of(cls, name: str) -> Arm:
        """The arm named `name`; PalError naming the arms when there is none."""
        try:
            return cls(name)
        except ValueError:
            raise PalError(f"unknown arm {name!r}: expected one of {', '.join(ARMS)}") from None


ARMS: tuple[str, ...] = tuple(a.value for a in Arm)
#: the arms the placer runs in
PAL_ARMS: tuple[str, ...] = tuple(a.value for a in Arm if a.placed_by_pal)
@dataclass(frozen=True)
class ArmSettings:
    """What the arms run with (and the simulator is told)."""

    locality_penalty: float = 1.7
    bf_interval_s: float = 1.0  # the cluster's SchedulerParameters bf_interval (real seconds)
    placer_policy: str = DEFAULT_POLICY
    placer_interval_s: float = 1.0
    wait_fraction: float = 0.5
    max_wait_s: float | None = None
    hold_s: int = 300  # the filter's fail-safe begin-time hold (real seconds)
    #: [jobs] runtime_min_jobs of the pal arms: a replay has one earlier run of each job per
    #: exported arm, where a site has many
    history_min_jobs: int = 1
    #: each arm's latencies, real seconds (measured by `calibrate` on the cluster before the
    #: replay); the simulator adds them when it predicts the arm
    latencies: Mapping[str, Latencies] = field(default_factory=dict)


@dataclass(frozen=True)
class Latencies:
    """A real scheduler's delays the ideal simulator lacks (real seconds; EventOptions)."""

    visible_after_s: float = 0.0  # submit -> the scheduler may place it (the placer's hold and cycle)
    start_latency_s: float = 0.0  # placed -> the job's script runs (GPUs held meanwhile)
    release_latency_s: float = 0.0  # the script ends -> its GPUs can be given again
    #: the script's start - Slurm's StartTime (whole seconds, at allocation): how much sooner
    #: than its work's start + estimate Slurm and the placer expect a running job to end
    start_lead_s: float = 0.0

    def as_dict(self) -> dict[str, float]:
        return {"visible_after_s": self.visible_after_s, "start_latency_s": self.start_latency_s,
                "release_latency_s": self.release_latency_s, "start_lead_s": self.start_lead_s}
