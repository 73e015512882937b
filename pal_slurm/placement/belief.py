"""What a scheduler believes about a running job: when it is expected to end. Pure.

The one model of it. The placement daemon believes it of what Slurm shows
(`placer/problem.expected_end`), the event simulator of the jobs it runs
(`simulate/running.RunningJobs`); both hand the answer to the policies as
`Snapshot.expected_end`, so neither can plan with a belief the other does not hold.

- A running job is expected at its start + its learned runtime (+ a grace: Slurm's StartTime is
  a whole second taken before the job's script starts, `jobs/runtimes.LEARNED_END_GRACE_S`)
  while that is still ahead and before its time limit ends; else when its time limit ends
  (Slurm's EndTime). A job that outlives its learned runtime is from then on expected at its
  limit: `Running.outlived_at` is that moment. A job with neither has no expected end
  (policies take it to run for ever).
- A job that has ended but still holds its GPUs (COMPLETING: its epilog runs) is expected back
  when they are released: at its end + the release latency where that is known (the simulator
  sets it), else just ahead of now (`COMPLETING_RELEASE_S`), for `COMPLETING_GRACE_S` after its
  end; past that its release counts as unknown (a node that does not answer can keep a job
  COMPLETING for hours, and no job should wait for it).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["COMPLETING_GRACE_S", "COMPLETING_RELEASE_S", "Running", "completing_end"]

#: How long GPUs still count as being given back after their job ended (a COMPLETING job's
#: epilog runs), or after they were first seen busy for no job (`placer/cluster_view.View.orphaned`).
#: Past this they are taken as stuck: their release is no longer known, so no job waits for it.
COMPLETING_GRACE_S = 60.0
#: How soon GPUs being given back are expected free, where the release latency is not known:
#: just ahead of now, so that a release under way counts as one (an expected end already past
#: counts as unknown).
COMPLETING_RELEASE_S = 1.0


@dataclass(frozen=True, slots=True)
class Running:
    """What a scheduler knows of one running job: its `start` (as the scheduler sees it:
    Slurm's StartTime; None: not known), when its time limit ends (`limit_end`: Slurm's
    EndTime; None: not known), and its learned runtime (None or 0: nothing learned) with
    the `grace_s` its expected end gets."""

    start: float | None
    limit_end: float | None
    learned_s: float | None = None
    grace_s: float = 0.0

    @property
    def outlived_at(self) -> float | None:
        """The end its learned runtime gives (start + learned runtime + grace) where that comes
        before its limit ends: the moment from which it is expected at its limit instead."""
        if self.start is None or not self.learned_s:
            return None
        end = self.start + (self.learned_s + self.grace_s)
        return end if self.limit_end is None or end < self.limit_end else None

    def expected_end(self, now: float) -> float | None:
        """When the job is expected to end, seen at `now`: the end its learned runtime gives
        while that is still ahead, else when its limit ends."""
        end = self.outlived_at
        return end if end is not None and end > now else self.limit_end


def completing_end(ended_at: float | None, now: float, release_s: float | None = None) -> float | None:
    """When a job that ended at `ended_at` and still holds its GPUs gives them back, seen at
    `now`: `release_s` after its end where the release latency is known, else just ahead of now
    for `COMPLETING_GRACE_S` after its end; None when its end, or its release, is not known."""
    if ended_at is None:
        return None
    if release_s is not None:
        return ended_at + release_s
    return now + COMPLETING_RELEASE_S if now - ended_at <= COMPLETING_GRACE_S else None
