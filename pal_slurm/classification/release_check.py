"""Whether a GPU out of service passed its re-profile, so that it may go back in service (pure).

The action ladder (docs/admin-guide.md, "Keeping the fleet true") takes a GPU out of service
when it fails or is far too slow, re-profiles it in its slot, and releases it when it passes.
*Passes* means: the classification in force holds profile runs of it newer than its quarantine
(the runs were taken and classified since), and it is graded nothing stronger than `placement`
(pal_slurm/classification/actions.py): not an outlier, or one only mildly slow, which placement
steers the sensitive classes around. A GPU graded `drain` (failing hardware counters, severely
slow) or `re-profile` (its runs too noisy, an impossible speed-up) stays out of service.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from pal_slurm.classification.actions import ACTION_TEXT, PLACEMENT, GpuAction

__all__ = ["Verdict", "verdict"]


@dataclass(frozen=True)
class Verdict:
    """`passed` and why, in one line an operator reads."""

    passed: bool
    why: str


def verdict(profiled: Sequence[datetime | None], action: GpuAction | None, since: datetime, *,
            classified_at: datetime, version: int | None = None) -> Verdict:
    """The verdict on one GPU out of service since `since`: `profiled` are the times of its last
    stored profile run per benchmark, `action` its graded action in the classification in force
    (`version`, computed at `classified_at`; None: an outlier on no benchmark there). The
    classification holds a run since the quarantine when one of them lies between the two."""
    where = f"classification {version}" if version is not None else "the classification"
    times = [t for t in profiled if t is not None]
    if not times:
        return Verdict(False, f"not profiled in {where}")
    newest = max(times)
    fresh = [t for t in times if t > since]
    if not fresh:
        return Verdict(False, f"no profile run since it went out of service in {where} (its newest: "
                              f"{newest:%Y-%m-%d %H:%M} UTC): profile it (`pal profile submit --gpus GPU`), then "
                              "`pal classify`")
    if not any(t < classified_at for t in fresh):
        return Verdict(False, f"profiled {min(fresh):%Y-%m-%d %H:%M} UTC, after {where} was computed: run "
                              "`pal classify`")
    if action is None:
        return Verdict(True, f"profiled {newest:%Y-%m-%d %H:%M} UTC; an outlier on no benchmark in {where}")
    if action.action == PLACEMENT:
        return Verdict(True, f"profiled {newest:%Y-%m-%d %H:%M} UTC; {ACTION_TEXT[PLACEMENT]}: {action.reason}")
    return Verdict(False, f"profiled {newest:%Y-%m-%d %H:%M} UTC, graded {action.action} in {where}: {action.reason}")
