"""The placer's single writes to a job in Slurm: each one call, checked against the mode and logged.

Why apart from placer/writer.py: these are the bricks (one `scontrol update`, a release, a
begin time, a comment, a GPU request replaced with its undo), each refusing what the mode
does not allow (`STEER`, `FAIL_OPEN`) before anything reaches Slurm and logging itself at
debug level (`job N: scontrol update Key=Value ...`, so the log reads as the dry run of a
cycle). placer/writer.py's `Writer` builds the placer's steps from them: a placement, its
read-back, a release that keeps the job's request whole.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from pal_slurm.errors import SlurmError
from pal_slurm.placer import holds
from pal_slurm.placer.audit import AuditSink
from pal_slurm.placer.tag import Tag, TagTooLong
from pal_slurm.slurm.backend import SlurmBackend
from pal_slurm.slurm.model import SlurmJob

log = logging.getLogger(__name__)

Fields = Sequence[tuple[str, str]]

#: The writes that steer a job, holding it or placing it: enforce mode only.
STEER = frozenset({"enforce"})
#: The writes by which the placer fails open (ending a hold, a job's request back, its label):
#: every mode. Observe mode releases what an enforce run left held or placed, and SIGTERM and
#: release-stale release in either mode.
FAIL_OPEN = frozenset({"observe", "enforce"})
#: `[placer] mode`: observe logs what the placer would do and writes only to fail open;
#: enforce also holds and places jobs.
MODES = FAIL_OPEN | STEER
#: the first Slurm release on which one `scontrol update TresPerNode=...` replaces the request
#: (checked on 24.11.5; 22.05.8 merges it)
ONE_UPDATE_FROM = (24, 11)
#: the GPU request fields of `scontrol update`
GPU_KEYS = ("TresPerNode", "TresPerJob")


class JobWrites:
    """One write each to a job in Slurm, mode-checked and logged; `audit` receives the entries
    of the steps built on them (placer/writer.py)."""

    def __init__(self, backend: SlurmBackend, audit: AuditSink, *, policy: str, mode: str,
                 clock: Callable[[], float]) -> None:
        if mode not in MODES:
            raise ValueError(f"placer mode {mode!r}: one of {', '.join(sorted(MODES))}")
        self.backend = backend
        self.audit = audit
        self.policy = policy
        self.mode = mode
        self.clock = clock

    def stamp(self) -> datetime:
        """Now, from the injected clock (audit timestamps follow the clock the cycle runs on)."""
        return datetime.fromtimestamp(self.clock(), UTC)

    def _allow(self, job_id: str, what: str, modes: frozenset[str]) -> None:
        """Refuse a write the mode does not allow (a caller's bug: the cycle's gate stops an
        observe-mode cycle before anything steers), before anything reaches Slurm."""
        if self.mode not in modes:
            raise RuntimeError(f"job {job_id}: {what} is written only in {' or '.join(sorted(modes))} mode, "
                               f"not {self.mode}")

    # -- one write each ------------------------------------------------------------------
    def update(self, job_id: str, fields: Fields) -> None:
        """`scontrol update JobId=job_id Key=Value ...`; raises SlurmError."""
        self._allow(job_id, "an update", FAIL_OPEN)
        log.debug("job %s: scontrol update %s", job_id, " ".join(f"{k}={v}" for k, v in fields))
        self.backend.update_job(job_id, list(fields))

    def set_begin(self, job_id: str, until: float) -> None:
        """Hold the job through `until` (its begin time); raises SlurmError."""
        self._allow(job_id, "a hold", STEER)
        log.debug("job %s: begin time %.0f", job_id, until)
        self.backend.set_begin(job_id, until, self.clock())

    def release(self, job_id: str) -> None:
        """End a priority-0 hold (`scontrol release`); raises SlurmError."""
        self._allow(job_id, "a release", FAIL_OPEN)
        log.debug("job %s: scontrol release", job_id)
        self.backend.release(job_id)

    def start_now(self, job_id: str) -> None:
        """End a begin-time hold (StartTime=now); raises SlurmError."""
        self._allow(job_id, "a release", FAIL_OPEN)
        log.debug("job %s: start now", job_id)
        self.backend.start_now(job_id)

    def unhold(self, job: SlurmJob) -> None:
        """End the hold `job` has: priority 0 (scontrol release) or its begin time (StartTime=now)."""
        self._allow(job.job_id, "a release", FAIL_OPEN)
        if holds.held_by_priority(job):
            self.release(job.job_id)
        else:
            self.start_now(job.job_id)

    def comment(self, job_id: str, text: str | Tag) -> None:
        """Set the job's admin comment (a Tag, rendered within its bound); a failure is logged."""
        self._allow(job_id, "a comment", FAIL_OPEN)
        try:
            self.update(job_id, [("AdminComment", text if isinstance(text, str) else text.render())])
        except (SlurmError, TagTooLong) as exc:
            log.warning("job %s: admin comment not set (%s)", job_id, exc)

    def clear(self, job_id: str, keys: Sequence[str] = ("TresPerNode",)) -> None:
        """Empty each GPU field in `keys`, one update each (the first half of `retype`)."""
        self._allow(job_id, "a request", FAIL_OPEN)
        for key in keys:
            self.update(job_id, [(key, "")])

    def retype(self, job_id: str, fields: Fields, clear: Sequence[str] = ("TresPerNode",)) -> None:
        """Give a job another GPU request: clear the fields in `clear`, then set `fields`.
        Clearing first is what makes both Slurm versions end with exactly `fields` (22.05
        merges a direct set into the old request, 24.11 replaces it). A rescue retypes in any
        mode (a stranded placement onto slots that exist); a placement goes through `apply`."""
        self._allow(job_id, "a request", FAIL_OPEN)
        self.clear(job_id, clear)
        self.update(job_id, fields)

    # -- the request, changed so that any step can be finished or undone ------------------
    def _one_update(self) -> bool:
        """Whether one `scontrol update` replaces a GPU request: on Slurm 24.11 and later a
        direct set replaces it; 22.05 merges a direct set into the old request, so there the
        request is cleared first, in its own call. An unknown version clears first."""
        try:
            return self.backend.version() >= ONE_UPDATE_FROM
        except SlurmError:
            return False

    def change(self, job_id: str, clear: Sequence[str], fields: Fields, undo: Fields | None = None) -> None:
        """Replace the job's GPU request: empty each field in `clear`, then set `fields`; one
        update where it replaces (see `_one_update`) and only TresPerNode is replaced. Any error
        after a clear puts `undo` back (clear, then set) before it is raised, so a failed or
        hung set never leaves the job without its GPUs; `undo` failing too is logged, and the
        job's tag lets the next step repair it."""
        self._allow(job_id, "a request", FAIL_OPEN)
        if self._one_update() and set(clear) <= {"TresPerNode"} and any(k == "TresPerNode" for k, _v in fields):
            self.update(job_id, fields)
            return
        try:
            for key in clear:
                self.update(job_id, [(key, "")])
            self.update(job_id, fields)
        except BaseException as exc:
            # a clear that failed or hung may still have been applied: put back in every case
            if undo is not None:
                log.warning("job %s: request change failed after the clear (%s); putting the request back",
                            job_id, str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__)
                try:
                    self.clear(job_id, sorted({*clear, *(k for k, _v in undo if k in GPU_KEYS)}))
                    self.update(job_id, undo)
                except SlurmError as again:
                    log.error("job %s: request not put back (%s); the job stays held with its tag, the next "
                              "step repairs it", job_id, again)
            raise

    def read(self, job_id: str) -> SlurmJob | None:
        """The job as Slurm shows it now; None when it is gone or Slurm could not be read."""
        try:
            return next(iter(self.backend.jobs(only={job_id})), None)
        except SlurmError as exc:
            log.warning("job %s: not read back (%s)", job_id, exc)
            return None


__all__ = ["FAIL_OPEN", "GPU_KEYS", "MODES", "ONE_UPDATE_FROM", "STEER", "Fields", "JobWrites"]
