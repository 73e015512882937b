"""Every change the placer makes to a job in Slurm, its read-back, and the audit entry that goes with it.

Why one writer: what reaches Slurm is where a placer can hurt a user's job, so each kind of
write is one call here that checks the mode, sends the change through the backend (argument
lists, never a shell), logs it (`job N: scontrol update Key=Value ...`, at debug level, so
the log reads as the dry run of a cycle) and records its audit entry. The cycle decides
*what* to write (placer/slurm_updates.py says what an update contains); this module decides
*how* it is written. The rules (docs/admin-guide.md, "What the placer touches"):

- Retyping a job's GPU request is "clear, then set": a direct set merges on Slurm 22.05 and
  replaces on 24.11; clearing TresPerNode first gives both the same result (`retype`).
- A failed placement gets back the request the job had when the cycle read it and is
  released unchanged (`restore`); a placed job that cannot start gets its user's request
  back where Slurm takes it (`put_back`).
- An admin comment that cannot be set is logged, never raised: it is a label, the job's
  request is what matters.
- Each write checks the mode first (`MODES`): holding or placing a job only in enforce
  mode; ending a hold, giving a job its request back and labelling it in every mode.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from pal_slurm.errors import SlurmError, SlurmUnavailable
from pal_slurm.placer import holds, slurm_updates
from pal_slurm.placer.audit import AuditSink, Record
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


class Writer:
    """The placer's one way to change jobs in Slurm; `audit` receives the entry of each decision."""

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
        self.backend.set_begin(job_id, until)

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

    def comment(self, job_id: str, text: str) -> None:
        """Set the job's admin comment (900 characters at most); a failure is logged."""
        self._allow(job_id, "a comment", FAIL_OPEN)
        try:
            self.update(job_id, [("AdminComment", text[:900])])
        except SlurmError as exc:
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

    # -- the placer's writes ---------------------------------------------------------------
    def apply(self, job: SlurmJob, update: slurm_updates.Update, comment: str) -> bool:
        """Retype, release, tag; on a Slurm error restore the request and release unchanged
        (False). `job` is the job as this cycle read it (a re-planned one still carries our
        last slots). The tag changes only once the job is released: a job still held keeps
        `pal:held`, so the next cycle and release-stale still know it is ours."""
        self._allow(job.job_id, "a placement", STEER)
        clear = [update.clear_field]
        if update.clear_field != "TresPerNode" and job.tres_per_node:
            clear.append("TresPerNode")
        try:
            self.retype(job.job_id, [("TresPerNode", update.tres_per_node), ("NodeList", update.node_list)],
                        clear=clear)
            self.unhold(job)
        except SlurmUnavailable:
            raise
        except SlurmError as exc:
            log.warning("job %s: placement not applied (%s); restoring the request", job.job_id, exc)
            self.restore(job, f"placement failed: {exc}")
            return False
        self.comment(job.job_id, comment)
        return True

    def verify(self, applied: Sequence[tuple[SlurmJob, slurm_updates.Update, Record]]) -> tuple[list[str], list[str]]:
        """Read back the jobs `apply` placed: each is audited as applied, or, where Slurm shows
        another request than the one written, restored and audited as failed. (placed, failed) ids."""
        self._allow(", ".join(job.job_id for job, _u, _r in applied) or "-", "a placement", STEER)
        placed: list[str] = []
        failed: list[str] = []
        if not applied:
            return placed, failed
        try:
            now_jobs = {j.job_id: j for j in self.backend.jobs(only={job.job_id for job, _u, _r in applied})}
        except SlurmError as exc:
            log.warning("placements not verified this cycle (%s)", exc)
            now_jobs = {}
        stamp = self.stamp()
        for job, update, rec in applied:
            got = now_jobs.get(job.job_id)
            if got is None or not got.pending or slurm_updates.matches(got, update):
                placed.append(job.job_id)
                self.audit.add(rec.confirmed(stamp))
                continue
            log.warning("job %s: Slurm shows %r on %r, not our placement; restoring", job.job_id,
                        got.tres_per_node, got.required_nodes)
            self.restore(job, "Slurm did not take the placement")
            failed.append(job.job_id)
            self.audit.add(rec.failed(rec.reason + "; Slurm did not take it, restored"))
        return placed, failed

    def restore(self, job: SlurmJob, why: str) -> None:
        """Put back the GPU request `job` had when this cycle read it, and release it.

        What it had, not what the user first asked for: on 22.05 a job that once carried
        per-slot types refuses an untyped request afterwards ("with and without type
        identification") and would be left with no GPUs; a re-planned job keeps its last slots.
        Each step is tried even when one before it failed."""
        self._allow(job.job_id, "a restore", FAIL_OPEN)
        steps: list[Fields] = [[(key, getattr(job, f))] for f, key in slurm_updates.FIELD_KEY.items()
                               if getattr(job, f)]
        steps.append([("NodeList", job.required_nodes)])
        try:
            self.clear(job.job_id)
        except SlurmError as exc:
            log.error("job %s: restoring TresPerNode failed: %s", job.job_id, exc)
        for fields in steps:
            try:
                self.update(job.job_id, fields)
            except SlurmError as exc:
                log.error("job %s: restoring %s failed: %s", job.job_id, fields[0][0], exc)
        try:
            self.unhold(job)
        except SlurmError as exc:
            log.error("job %s: release failed: %s (release-stale will retry)", job.job_id, exc)
            return
        self.comment(job.job_id, f"{holds.RELEASED_TAG} unchanged: {why}")

    def put_back(self, job: SlurmJob) -> bool:
        """Give a placed job the GPU request its user made, with no node pinned; True when
        Slurm took it. Slurm 22.05 refuses an untyped request once a job carried per-slot
        types ("with and without type identification"; it keeps typed entries with count
        0 after a clear); then the job's per-slot request is set back at once (a clear left
        alone would leave it with no GPUs) and False is returned."""
        self._allow(job.job_id, "a restore", FAIL_OPEN)
        orig = holds.original_request(job)
        if orig is None:
            return False
        fld, value = orig
        try:
            self.clear(job.job_id)
        except SlurmError as exc:
            log.warning("job %s: request not cleared (%s)", job.job_id, exc)
            return False
        try:
            self.update(job.job_id, [(slurm_updates.FIELD_KEY[fld], value), ("NodeList", "")])
            return True
        except SlurmError as exc:
            log.info("job %s: Slurm keeps its per-slot request (%s)", job.job_id, str(exc).splitlines()[0][:120])
        try:
            self.update(job.job_id, [("TresPerNode", job.tres_per_node)])
        except SlurmError as exc:
            log.error("job %s: per-slot request not set back after a refused restore: %s", job.job_id, exc)
        return False

    def hold_again(self, job: SlurmJob, tag: str, until: float) -> bool:
        """Tag a placed job held again (`tag`) and hold it through `until` (a re-plan); False,
        with its old comment put back, when Slurm refuses either. The tag goes first: once
        held, the job is ours to release (next cycle, SIGTERM, release-stale)."""
        self._allow(job.job_id, "a hold", STEER)
        try:
            self.update(job.job_id, [("AdminComment", tag)])
            self.set_begin(job.job_id, until)
        except SlurmError as exc:
            log.warning("job %s: not re-planned (%s)", job.job_id, exc)
            try:
                self.update(job.job_id, [("AdminComment", job.admin_comment)])
            except SlurmError:
                pass
            return False
        return True

    def release_unchanged(self, job: SlurmJob, why: str) -> bool:
        """End a held job's hold with its request as submitted, tag and audit it; False when
        Slurm refused the release (the job keeps `pal:held`: the next cycle or release-stale
        tries again). Slurm being unreachable is raised: the cycle stops there."""
        self._allow(job.job_id, "a release", FAIL_OPEN)
        try:
            self.unhold(job)
        except SlurmUnavailable:
            raise
        except SlurmError as exc:
            log.error("job %s: release failed: %s", job.job_id, exc)
            return False
        self.comment(job.job_id, f"{holds.RELEASED_TAG} unchanged: {why}")
        self.audit.add(Record.released(job, policy=self.policy, job_class=holds.held_class(job)[0], reason=why,
                                       at=self.stamp()))
        return True


def drain(backend: SlurmBackend, node: str, reason: str) -> None:
    """Drain one node with `reason` (`pal gpus drain --apply`); raises SlurmError."""
    log.debug("node %s: drain (%s)", node, reason)
    backend.drain_node(node, reason)


__all__ = ["FAIL_OPEN", "MODES", "STEER", "Writer", "drain"]
