"""The jobs a cycle has seen: who runs what on GPUs, and when placed jobs start and end.

Why a step of its own: it looks at every job Slurm showed this cycle, before any is placed,
and feeds what is learned from jobs, not what places them: the job identities that
job-sensitivity learning reads (best effort: a database outage only delays them), and the
start and end marks `pal report fairness` counts GPU-hours by. Anything else that must see
jobs as they start or finish belongs here too.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from pal_slurm.placer import holds
from pal_slurm.placer.audit import AuditSink
from pal_slurm.placer.db_worker import Runner
from pal_slurm.slurm.model import SlurmJob

log = logging.getLogger(__name__)

Identities = Callable[[Sequence[SlurmJob]], None]


class SeenJobs:
    """What earlier cycles saw: the jobs whose identity is recorded, the placed jobs running."""

    def __init__(self, audit: AuditSink, identities: Identities | None = None, runner: Runner | None = None) -> None:
        self.audit = audit
        self.identities = identities
        #: the database thread (placer/db_worker.py) the identities are written on; None: inline
        self.runner = runner
        self.identified: set[str] = set()
        self.running_placed: set[str] = set()

    def see(self, jobs: Sequence[SlurmJob], now: float) -> None:
        """This cycle's jobs: new identities recorded, placed jobs' starts and ends marked."""
        self.record_identities(jobs)
        self.track_runs(jobs, now)

    def record_identities(self, jobs: Sequence[SlurmJob], limit: int = 500) -> None:
        """Who ran what on GPUs (user, name, command -> fingerprint), for job-sensitivity
        learning; best effort: a database outage only delays it to a later cycle."""
        if self.identities is None:
            return
        new = [j for j in jobs if j.job_id not in self.identified and (j.pending or j.running)
               and (j.tres("tres_per_node").gpu_count or j.tres("tres_per_job").gpu_count
                    or j.tres("tres_per_task").gpu_count)][:limit]
        if not new:
            return
        if len(self.identified) > 100_000:
            self.identified = {j.job_id for j in jobs if j.job_id in self.identified}
        if self.runner is not None:
            self.runner("identities", lambda: self._record(new, reraise=True))
        else:
            self._record(new, reraise=False)

    def _record(self, new: Sequence[SlurmJob], *, reraise: bool) -> None:
        identities = self.identities
        assert identities is not None
        try:
            identities(new)
        except Exception as exc:  # noqa: BLE001 - learning input must never stop placement
            log.warning("job identities not recorded (%s)", str(exc).splitlines()[0][:200])
            if reraise:
                raise
            return
        self.identified.update(j.job_id for j in new)

    def track_runs(self, jobs: Sequence[SlurmJob], now: float) -> None:
        """When placed jobs start and end (`pal report fairness` counts GPU-hours by them): a
        start when a placed job is first seen running, an end when it is gone from the active
        jobs (so within a cycle of the truth; a job that ended while no placer ran is marked
        when one runs again)."""
        running = {j.job_id: j for j in jobs if j.running and holds.is_placed_by_pal(j)}
        for job_id, job in running.items():
            if job_id not in self.running_placed:
                self.audit.mark(job_id, "started_at", datetime.fromtimestamp(job.start_time or now, UTC))
        active = {j.job_id for j in jobs}
        for job_id in self.running_placed - running.keys():
            if job_id not in active:
                self.audit.mark(job_id, "ended_at", datetime.fromtimestamp(now, UTC))
        self.running_placed = set(running)


__all__ = ["Identities", "SeenJobs"]
