"""The event simulator's running jobs as the scheduler sees them: their GPUs and when each is
expected to end (`placement/belief.py`, the model the placement daemon shares). Pure.

A belief changes at two moments, and only then is it worked out again: when a job outlives its
learned runtime (`Running.outlived_at`: from then on it is expected at its limit) and when its
work ends while its GPUs are not yet released (COMPLETING: expected back at its release). The
expected ends are kept as `Snapshot.known_releases` wants them, sorted, by inserting each start
and deleting each end, rather than sorting every running job before every decision.
"""

from __future__ import annotations

import bisect
import heapq
from types import MappingProxyType

from pal_slurm.placement import belief
from pal_slurm.placement.belief import Running

__all__ = ["RunningJobs"]

Gpus = tuple[int, ...]


class RunningJobs:
    """Job -> GPUs (`gpus`), job -> expected end (`ends`) and the (expected end, GPUs) pairs
    sorted (`releases`); the mappings are live read-only views for the snapshots."""

    def __init__(self, release_s: float) -> None:
        #: how long after its work ends a job's GPUs are free again (epilog; 0: at once)
        self.release_s = release_s
        self._gpus: dict[str, Gpus] = {}
        self._ends: dict[str, float] = {}
        self.releases: list[tuple[float, Gpus]] = []
        self.gpus = MappingProxyType(self._gpus)
        self.ends = MappingProxyType(self._ends)
        self._beliefs: dict[str, Running] = {}  # jobs whose work has not ended
        self._outlived: list[tuple[float, str]] = []  # (outlived_at, job), a heap
        self._completing: list[tuple[float, str]] = []  # (end of its work, job), a heap

    @property
    def next_outlived(self) -> float | None:
        """The soonest moment a running job may outlive its learned runtime (None: none will)."""
        return self._outlived[0][0] if self._outlived else None

    def start(self, job_id: str, gpus: Gpus, known: Running, *, seen_at: float, work_end: float) -> None:
        """`job_id` runs on `gpus`; the scheduler knows `known` of it, seen at `seen_at` (its start as
        the scheduler sees it), and its work ends at `work_end` (its GPUs are free `release_s`
        later: `finish`)."""
        self._gpus[job_id] = gpus
        self._beliefs[job_id] = known
        self._expect(job_id, known.expected_end(seen_at))
        if (outlived := known.outlived_at) is not None:
            heapq.heappush(self._outlived, (outlived, job_id))
        if self.release_s > 0:
            heapq.heappush(self._completing, (work_end, job_id))

    def finish(self, job_id: str) -> Gpus:
        """`job_id`'s GPUs are free: forgotten, its GPUs returned."""
        self._expect(job_id, None)
        self._beliefs.pop(job_id, None)
        return self._gpus.pop(job_id)

    def catch_up(self, now: float) -> bool:
        """The beliefs as of `now`: jobs whose work has ended are COMPLETING (expected back at their
        release), jobs past their learned runtime are expected at their limit. True when one was
        (a pass may plan otherwise now; a COMPLETING job's expected end is its release, which a
        pass planned with already)."""
        while self._completing and self._completing[0][0] <= now:
            ended_at, job_id = heapq.heappop(self._completing)
            if job_id in self._gpus:
                self._beliefs.pop(job_id, None)
                self._expect(job_id, belief.completing_end(ended_at, now, self.release_s))
        moved = False
        while self._outlived and self._outlived[0][0] <= now:
            _, job_id = heapq.heappop(self._outlived)
            known = self._beliefs.get(job_id)
            if known is not None and (end := known.expected_end(now)) != self._ends.get(job_id):
                self._expect(job_id, end)
                moved = True
        return moved

    def _expect(self, job_id: str, end: float | None) -> None:
        """`job_id` expected at `end` (None: no longer expected), `releases` kept sorted."""
        before = self._ends.pop(job_id, None)
        if before is not None:
            del self.releases[bisect.bisect_left(self.releases, (before, self._gpus[job_id]))]
        if end is not None:
            self._ends[job_id] = end
            bisect.insort(self.releases, (end, self._gpus[job_id]))
