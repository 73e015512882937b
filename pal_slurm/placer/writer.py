"""Every change the placer makes to a job in Slurm, its read-back, and the audit entry that goes with it.

Why one writer: what reaches Slurm is where a placer can hurt a user's job, so each kind of
write is one call here that checks the mode, sends the change through the backend (argument
lists, never a shell), logs it (`job N: scontrol update Key=Value ...`, at debug level, so
the log reads as the dry run of a cycle: the single writes, in placer/job_writes.py) and
records its audit entry. The cycle decides *what* to write (placer/slurm_updates.py says what an update contains); this module decides
*how* it is written. The rules (docs/admin-guide.md, "What the placer touches"):

- Before the first change to a job its tag (pal_slurm.placer.tag) records the user's request
  and the placement, so every later step can be finished or undone by whoever comes next
  (this cycle, the next, a restarted placer, SIGTERM, release-stale); docs/admin-guide.md,
  "Crash points", lists each step and what repairs it.
- Retyping a job's GPU request is "clear, then set" on 22.05 (a direct set merges there) and
  one update on 24.11 (a direct set replaces); any error after a clear puts the request back
  before it is raised (`change`).
- A job is released only with a whole GPU request: its user's or the placement's, read back
  (`verify`, `make_whole`); one that Slurm gives neither stays held (`keep_held`) and the next
  step retries. A put-back Slurm refuses (22.05, once a job carried per-slot types) is not a
  release.
- An admin comment that cannot be set is logged, never raised: it is a label, the job's
  request is what matters.
- Each write checks the mode first (`MODES`): holding or placing a job only in enforce
  mode; ending a hold, giving a job its request back and labelling it in every mode.
- An administrator's writes go through here too, outside any placer mode: a node drained
  (`drain`), one GPU slot taken out of service and back (`quarantine`, `release_quarantine`,
  `restart_holder`, `profile_in_slot`: a holder job, pal_slurm/slurm/quarantine_model.py; the
  single writes in placer/slot_writes.py); the command that calls them prints what they did
  and records it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace

from pal_slurm.errors import SlurmError, SlurmUnavailable
from pal_slurm.placer import holds, slurm_updates
from pal_slurm.placer.audit import Record
from pal_slurm.placer.job_writes import FAIL_OPEN, GPU_KEYS, STEER, Fields, JobWrites
from pal_slurm.placer.tag import HELD, PLACED, RELEASED_UNCHANGED, REQUEST_KEYS, Tag, TagTooLong, site_comment
from pal_slurm.slurm.backend import SlurmBackend
from pal_slurm.slurm.model import SlurmJob
from pal_slurm.placer.slot_writes import profile_in_slot, quarantine, release_quarantine, restart_holder
from pal_slurm.slurm.tres import parse_tres

log = logging.getLogger(__name__)


class Writer(JobWrites):
    """The placer's one way to change jobs in Slurm: its steps (a placement and its read-back, a
    release that keeps the job's request whole, a re-plan), built on the single writes of
    `JobWrites`; `audit` receives the entry of each decision."""

    def make_whole(self, job: SlurmJob) -> SlurmJob | None:
        """The job as it now stands once its GPU request is whole, the user's or the placer's
        whole intended one (both recorded in its tag); None when it could not be made whole
        (then it must not be released: see `keep_held`). A job whose tag records no user's
        request was never changed by the placer and is whole as it is.

        Order: the user's request back (clear, then set), read back; where Slurm refuses it
        (22.05, once a job carried per-slot types) the intended per-slot request, read back."""
        tag = Tag.parse(job.admin_comment)
        if tag is None or tag.user_request() is None or whole(job, tag):
            return job
        log.warning("job %s: GPU request %r is neither its user's %r nor the placement's %r; repairing it",
                    job.job_id, job.tres_per_node or job.tres_per_job, dict(tag.was), tag.intent)
        attempts: list[Fields] = [user_fields(tag)]
        if tag.intent:
            attempts.append([("TresPerNode", tag.intent), ("NodeList", tag.nodes)])
        for fields in attempts:
            try:
                self.change(job.job_id, clear_keys(job, fields), fields)
            except SlurmError as exc:
                log.info("job %s: %s not set (%s)", job.job_id, fields[0][1], str(exc).splitlines()[0][:160])
            now = self.read(job.job_id)
            if now is not None and whole(now, tag):
                return now
        return None

    def keep_held(self, job: SlurmJob, why: str) -> None:
        """A job whose request is not whole stays held: its begin time is moved on when it ends
        within KEEP_HELD_S, so Slurm cannot start it with a partial request before the next step
        (cycle, fail-safe, release-stale) repairs it. Said in the log either way."""
        self._allow(job.job_id, "a hold", FAIL_OPEN)
        log.error("job %s: not released (%s): its GPU request %r is not whole; kept held with its tag, the next "
                  "step repairs it", job.job_id, why, job.tres_per_node or job.tres_per_job)
        if holds.held_by_priority(job) or job.begins_after(self.clock() + KEEP_HELD_S / 2):
            return
        now = self.clock()
        try:
            self.backend.set_begin(job.job_id, now + KEEP_HELD_S, now)
        except SlurmError as exc:
            log.error("job %s: hold not extended (%s): it may start before its request is repaired",
                      job.job_id, exc)

    # -- the placer's writes ---------------------------------------------------------------
    def apply(self, job: SlurmJob, update: slurm_updates.Update, placed: Tag) -> bool:
        """Record, then retype; the job stays held (`verify` reads it back and releases it).

        First the tag: the user's request and the placement are written into the job's admin
        comment (`pal:held ... was=... set=... on=...`) before its request changes, so whoever
        comes next after a crash can finish or undo the change. Then clear and set; an error
        after the clear puts the user's request back before anything else. On a Slurm error
        the job is released as its user submitted it (`release_unchanged`, which repairs it
        first) and False returned; Slurm unreachable is raised (the tag lets the next cycle
        repair the job). `job` is the job as this cycle read it."""
        self._allow(job.job_id, "a placement", STEER)
        old = Tag.parse(job.admin_comment)
        was = old.was if old is not None and old.was else recorded(job)
        site = site_comment(job.admin_comment)
        placing = Tag(head=HELD, job_class=placed.job_class, src=old.src if old else "", was=was,
                      intent=update.tres_per_node, nodes=update.node_list, site=site)
        try:
            text = placing.render()
        except TagTooLong as exc:
            log.error("job %s: placement not written (%s)", job.job_id, exc)
            self.release_unchanged(job, f"placement not written: {exc}")
            return False
        try:
            self.update(job.job_id, [("AdminComment", text)])
        except SlurmUnavailable:
            raise
        except SlurmError as exc:
            log.warning("job %s: tag not written (%s); the request is left as it is", job.job_id, exc)
            self.release_unchanged(job, f"placement failed: {exc}")
            return False
        job = replace(job, admin_comment=text)
        clear = [update.clear_field]
        if update.clear_field != "TresPerNode" and job.tres_per_node:
            clear.append("TresPerNode")
        try:
            self.change(job.job_id, clear, [("TresPerNode", update.tres_per_node), ("NodeList", update.node_list)],
                        undo=user_fields(placing))
        except SlurmUnavailable:
            raise
        except SlurmError as exc:
            log.warning("job %s: placement not applied (%s); releasing it as submitted", job.job_id, exc)
            # what the job has now, not what it had: a put-back may have failed as well (unread:
            # taken as emptied, so it is repaired before any release)
            now = self.read(job.job_id) or replace(job, tres_per_node="", tres_per_job="")
            self.release_unchanged(now, f"placement failed: {exc}")
            return False
        return True

    def verify(self, applied: Sequence[tuple[SlurmJob, slurm_updates.Update, Record, Tag]]
               ) -> tuple[list[str], list[str]]:
        """Read back the jobs `apply` retyped, then release them: a job that shows the placement
        is released and tagged `pal: placed`; one that shows another request is released as its
        user submitted it (repaired first). A job whose release Slurm refuses, or that could not
        be read back, stays held with its tag, whole: the next cycle places it again.
        (placed, failed) ids."""
        self._allow(", ".join(job.job_id for job, *_r in applied) or "-", "a placement", STEER)
        placed: list[str] = []
        failed: list[str] = []
        if not applied:
            return placed, failed
        try:
            now_jobs: dict[str, SlurmJob] | None = {
                j.job_id: j for j in self.backend.jobs(only={job.job_id for job, *_r in applied})}
        except SlurmError as exc:
            log.warning("placements not read back this cycle (%s); left held for the next cycle", exc)
            now_jobs = None
        stamp = self.stamp()
        for job, update, rec, tag in applied:
            got = None if now_jobs is None else now_jobs.get(job.job_id)
            if now_jobs is None:
                failed.append(job.job_id)
                self.audit.add(rec.failed(rec.reason + "; not read back, left held"))
                continue
            if got is None or not got.pending:
                placed.append(job.job_id)  # gone or started: nothing left to change
                self.audit.add(rec.confirmed(stamp))
                continue
            if slurm_updates.matches(got, update):
                try:
                    self.unhold(got)
                except SlurmError as exc:
                    log.error("job %s: release failed (%s); it stays held with the placement, whole", job.job_id,
                              exc)
                    failed.append(job.job_id)
                    self.audit.add(rec.failed(rec.reason + f"; release failed: {exc}"))
                    continue
                self.comment(job.job_id, replace(tag, site=site_comment(got.admin_comment),
                                                 was=_tag_was(got) or tag.was))
                placed.append(job.job_id)
                self.audit.add(rec.confirmed(stamp))
                continue
            log.warning("job %s: Slurm shows %r on %r, not our placement; releasing it as submitted", job.job_id,
                        got.tres_per_node, got.required_nodes)
            self.release_unchanged(got, "Slurm did not take the placement", audit=False)
            failed.append(job.job_id)
            self.audit.add(rec.failed(rec.reason + "; Slurm did not take it, released as submitted"))
        return placed, failed

    def put_back(self, job: SlurmJob) -> bool:
        """Give a placed job the request its user made (recorded in its tag), with the user's
        node list; True when Slurm shows it back. Where Slurm refuses it (22.05 keeps typed
        entries with count 0 after a clear and refuses an untyped request), the per-slot
        request the job had is set back at once (clear, then set; a clear alone would leave it
        with no GPUs) and False is returned."""
        self._allow(job.job_id, "a restore", FAIL_OPEN)
        tag = Tag.parse(job.admin_comment)
        if tag is None or tag.user_request() is None:
            return False
        now = job
        if not user_has(job, tag):
            back = [("TresPerNode", job.tres_per_node), ("NodeList", job.required_nodes)] if job.tres_per_node else None
            try:
                self.change(job.job_id, clear_keys(job, user_fields(tag)), user_fields(tag), undo=back)
            except SlurmError as exc:
                log.info("job %s: Slurm keeps its per-slot request (%s)", job.job_id,
                         str(exc).splitlines()[0][:120])
                return False
            got = self.read(job.job_id)
            if got is None or not user_has(got, tag):
                return False
            now = got
        if now.required_nodes != (tag.user_request() or {}).get("required_nodes", ""):
            try:
                self.update(job.job_id, [("NodeList", (tag.user_request() or {}).get("required_nodes", ""))])
            except SlurmError as exc:
                log.warning("job %s: node list not put back (%s)", job.job_id, exc)
        return True

    def hold_again(self, job: SlurmJob, tag: Tag | str, until: float) -> bool:
        """Tag a placed job held again (`tag`) and hold it through `until` (a re-plan); False,
        with its old comment put back, when Slurm refuses either. The tag goes first: once
        held, the job is ours to release (next cycle, SIGTERM, release-stale)."""
        self._allow(job.job_id, "a hold", STEER)
        try:
            self.update(job.job_id, [("AdminComment", tag if isinstance(tag, str) else tag.render())])
            self.set_begin(job.job_id, until)
        except SlurmError as exc:
            log.warning("job %s: not re-planned (%s)", job.job_id, exc)
            try:
                self.update(job.job_id, [("AdminComment", job.admin_comment)])
            except SlurmError:
                pass
            return False
        return True

    def release_unchanged(self, job: SlurmJob, why: str, *, audit: bool = True) -> bool:
        """End a held job's hold with the request its user made, tag and audit it; where Slurm
        will not take that request back (22.05, once per-slot types were set) with the
        placement's whole per-slot request, tagged placed. A job whose request is not whole
        and cannot be made so is not released (`keep_held`): the next step retries. False when
        the job was not released (the job keeps `pal:held`: the next cycle or release-stale
        tries again). Slurm being unreachable is raised: the cycle stops there."""
        self._allow(job.job_id, "a release", FAIL_OPEN)
        fixed = self.make_whole(job)
        if fixed is None:
            self.keep_held(job, why)
            return False
        try:
            self.unhold(fixed)
        except SlurmUnavailable:
            raise
        except SlurmError as exc:
            log.error("job %s: release failed: %s", job.job_id, exc)
            return False
        tag = Tag.parse(fixed.admin_comment)
        site = site_comment(fixed.admin_comment)
        if tag is not None and tag.was and not user_has(fixed, tag):
            label = Tag(head=PLACED, job_class=tag.job_class, was=tag.was, intent=tag.intent, nodes=tag.nodes,
                        note=f"released with the placement: {why}", site=site)
        else:
            label = Tag(head=RELEASED_UNCHANGED, note=why, site=site)
        self.comment(job.job_id, label)
        if audit:
            self.audit.add(Record.released(job, policy=self.policy, job_class=holds.held_class(job)[0], reason=why,
                                           at=self.stamp()))
        return True


#: how long `keep_held` holds a job whose request is not whole
KEEP_HELD_S = 120.0


def recorded(job: SlurmJob) -> tuple[tuple[str, str], ...]:
    """The request a job has now, as a tag's `was` records it: each GPU field and its node list
    that is set, and the GPU field of its shape even when empty of GPUs."""
    out = tuple((f, getattr(job, f)) for f in REQUEST_KEYS if getattr(job, f))
    return out or (("tres_per_node", ""),)


def clear_keys(job: SlurmJob, fields: Fields) -> list[str]:
    """The GPU fields to empty before `fields` are set: those the job has and those set."""
    have = {REQUEST_KEYS[f] for f in ("tres_per_node", "tres_per_job") if getattr(job, f)}
    return [k for k in GPU_KEYS if k in have or any(k == key for key, _v in fields)]


def _tag_was(job: SlurmJob) -> tuple[tuple[str, str], ...]:
    tag = Tag.parse(job.admin_comment)
    return tag.was if tag is not None else ()


def user_fields(tag: Tag) -> list[tuple[str, str]]:
    """The update that sets the user's request recorded in `tag` (after a clear)."""
    req = tag.user_request() or {}
    fields = [(REQUEST_KEYS[f], v) for f, v in req.items() if f != "required_nodes" and v]
    return fields + [("NodeList", req.get("required_nodes", ""))]


def _gpus(value: str) -> list[tuple[str, str | None, int]]:
    return sorted((i.name, i.type, i.count) for i in parse_tres(value).items)


def user_has(job: SlurmJob, tag: Tag) -> bool:
    """Whether the job carries exactly the GPU request its user made (as its tag records it)."""
    req = tag.user_request()
    if req is None:
        return True
    return all(_gpus(getattr(job, f)) == _gpus(req[f]) for f in ("tres_per_node", "tres_per_job"))


def carries_intent(job: SlurmJob, tag: Tag) -> bool:
    """Whether the job carries exactly the placer's whole intended per-slot request."""
    return bool(tag.intent) and _gpus(job.tres_per_node) == _gpus(tag.intent) and not _gpus(job.tres_per_job)


def whole(job: SlurmJob, tag: Tag) -> bool:
    """The only requests a job may start with: its user's, or the placer's whole intended one."""
    return user_has(job, tag) or carries_intent(job, tag)


def drain(backend: SlurmBackend, node: str, reason: str) -> None:
    """Drain one node with `reason` (`pal gpus drain --apply`); raises SlurmError."""
    log.debug("node %s: drain (%s)", node, reason)
    backend.drain_node(node, reason)


__all__ = ["Writer", "carries_intent", "drain", "profile_in_slot", "quarantine", "release_quarantine", "restart_holder",
           "user_has", "whole"]
