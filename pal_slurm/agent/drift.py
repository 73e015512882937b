"""Spotting a GPU that has become slower than the class it was given, so it gets re-profiled.

A GPU's class was earned at the SM clock it held under its profiling benchmarks. Under a
real job's load the power cap picks the clock the same way, and lighter work gets a
higher clock, never a lower one. So when a GPU under load runs clearly below the lowest
clock it held in its benchmarks, for minutes on end, something changed (a cooler, a
derated power limit, a stuck slowdown) and its class is stale.

Rule (all configurable in `[agent]`): a sample counts when GPU utilisation is at least
`load_threshold` percent and it has an SM clock. Samples are grouped into minutes of the
sample clock; a minute is *low* when the mean clock of its counted samples is below
``expected * (1 - margin)``, *ok* when at or above, and has no say without counted
samples (idle gaps neither help nor hurt). After `minutes` low minutes in a row the GPU
is flagged once; it can be flagged again only after an ok minute. `expected` per GPU is
the lowest of its per-benchmark median SM clocks in the profile runs (from the database);
a GPU without it is not watched.

Memory per GPU: a handful of numbers, whatever the run time. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["DriftEvent", "DriftMonitor", "DriftSettings"]


@dataclass(frozen=True, slots=True)
class DriftSettings:
    margin: float = 0.05
    minutes: int = 10
    load_threshold: float = 80.0


@dataclass(frozen=True, slots=True)
class DriftEvent:
    """Raised once per episode: this GPU ran `minutes` loaded minutes below expected."""

    uuid: str
    expected_mhz: float
    observed_mhz: float  # mean loaded clock over the low minutes
    minutes: int
    at: float  # sample time that completed the episode

    def describe(self, settings: DriftSettings) -> str:
        drop = 1.0 - self.observed_mhz / self.expected_mhz
        return (f"SM clock under load {self.observed_mhz:.0f} MHz for {self.minutes} min, "
                f"{drop:.1%} below the {self.expected_mhz:.0f} MHz it held when profiled "
                f"(margin {settings.margin:.0%}): re-profile")


class _GpuState:
    __slots__ = ("count", "flagged", "low_run", "low_sum", "minute", "sum")

    def __init__(self) -> None:
        self.minute = -1
        self.sum = 0.0
        self.count = 0
        self.low_run = 0  # low minutes in a row
        self.low_sum = 0.0  # sum of those minutes' mean clocks
        self.flagged = False


class DriftMonitor:
    """Feeds on samples, returns a DriftEvent when a GPU's episode completes."""

    def __init__(self, settings: DriftSettings, expected: Mapping[str, float] | None = None) -> None:
        self.settings = settings
        self._expected: dict[str, float] = dict(expected or {})
        self._state: dict[str, _GpuState] = {}

    def set_expected(self, expected: Mapping[str, float]) -> None:
        """New expectations (after re-profiling); the state of GPUs whose value changed restarts."""
        for uuid, value in expected.items():
            if self._expected.get(uuid) != value:
                self._state.pop(uuid, None)
        for uuid in set(self._expected) - set(expected):
            self._state.pop(uuid, None)
        self._expected = dict(expected)

    def expected(self, uuid: str) -> float | None:
        return self._expected.get(uuid)

    def flagged(self, uuid: str) -> bool:
        state = self._state.get(uuid)
        return bool(state and state.flagged)

    def observe(self, uuid: str, t: float, util: float | None, sm_clock: float | None) -> DriftEvent | None:
        expected = self._expected.get(uuid)
        if expected is None or util is None or sm_clock is None or util < self.settings.load_threshold:
            return None
        state = self._state.get(uuid)
        if state is None:
            state = self._state[uuid] = _GpuState()
        minute = int(t // 60)
        event = None
        if minute != state.minute:
            event = self._close_minute(uuid, state, expected, t)
            state.minute, state.sum, state.count = minute, 0.0, 0
        state.sum += sm_clock
        state.count += 1
        return event

    def _close_minute(self, uuid: str, state: _GpuState, expected: float, t: float) -> DriftEvent | None:
        if state.count == 0:
            return None
        mean = state.sum / state.count
        if mean >= expected * (1.0 - self.settings.margin):
            state.low_run, state.low_sum, state.flagged = 0, 0.0, False
            return None
        state.low_run += 1
        state.low_sum += mean
        if state.low_run >= self.settings.minutes and not state.flagged:
            state.flagged = True
            return DriftEvent(uuid, expected, state.low_sum / state.low_run, state.low_run, t)
        return None
