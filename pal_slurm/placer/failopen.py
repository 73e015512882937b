"""The placer's fail-open paths: no job is left held, stranded or started mid-change because of it.

The rules (docs/admin-guide.md, "Failure modes"):
- A held job the placer does not place is released as submitted, with the reason in its
  admin comment (`release_unchanged`).
- A held job whose request a crash or a failed write left neither its user's nor the
  placement's gets the one its tag records back before anything else (`repair`, first in
  every cycle; `release_unchanged` does the same on SIGTERM and release-stale); one Slurm
  gives neither stays held and is tried again. No path releases a job without a whole request.
- A held job whose begin time comes close gets a new one before the cycle retypes it or keeps
  it waiting; one whose begin time cannot be moved is released unchanged (`extend`).
- A placed job that cannot start (BadConstraints, priority 0, its node gone or drained, a
  slot type missing) gets its user's request back, or the same shape on slots that exist,
  and is released (`rescue`: every cycle, on SIGTERM and by `release-stale`).
- A placed job that has not started long after its placement is held again and placed anew
  (`replan_stalled`).
- Stopping, or a placer that keeps failing, releases every job it holds (`release_all`).
Every change goes through placer/writer.py.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace

from pal_slurm.errors import SlurmError, SlurmUnavailable
from pal_slurm.placer import cluster_view, holds, slurm_updates
from pal_slurm.placer.audit import Record
from pal_slurm.placer.cycle_report import CycleReport
from pal_slurm.placer.tag import HELD, PLACED, RELEASED_RESTORED, RELEASED_UNCHANGED, Tag, TagTooLong, site_comment
from pal_slurm.placer.writer import Writer, carries_intent, clear_keys, user_has, whole
from pal_slurm.slurm.backend import SlurmBackend
from pal_slurm.slurm.model import SlurmJob, SlurmNode

log = logging.getLogger(__name__)


def release_unchanged(writer: Writer, job: SlurmJob, why: str, report: CycleReport) -> None:
    """Release a held job as submitted (see Writer.release_unchanged) and count it."""
    (report.released if writer.release_unchanged(job, why) else report.failed).append(job.job_id)


def note_lapsed(writer: Writer, jobs: Sequence[SlurmJob], now: float) -> None:
    """Re-tag jobs whose begin-time hold ended before we released them: Slurm already
    schedules them; the tag must say with what. One the placer had changed is tagged placed
    when it carries the whole placement, and released unchanged when it carries its user's
    request; one that carries neither (the placer died mid-change) is held again and repaired."""
    for job in jobs:
        if not holds.hold_lapsed(job, now):
            continue
        tag = Tag.parse(job.admin_comment)
        site = site_comment(job.admin_comment)
        why = "the hold ended before a placement"
        if tag is None or tag.user_request() is None or user_has(job, tag):
            writer.comment(job.job_id, Tag(head=RELEASED_UNCHANGED, note=why, site=site))
        elif carries_intent(job, tag):
            writer.comment(job.job_id, Tag(head=PLACED, job_class=tag.job_class, was=tag.was, intent=tag.intent,
                                           nodes=tag.nodes, at=int(now), note="the hold ended after the placement",
                                           site=site))
        else:
            writer.keep_held(job, "the hold ended while its request was being changed")
            fixed = writer.make_whole(job)
            if fixed is not None:
                writer.release_unchanged(fixed, "the hold ended while its request was being changed")


def repair(writer: Writer, held: Sequence[SlurmJob], report: CycleReport) -> list[SlurmJob]:
    """Held jobs whose GPU request is neither their user's nor the placer's whole intended one
    (a placer, a set or a release that failed mid-change) get the one their tag records
    back before anything else looks at them. Returns the held jobs as they now stand; one that
    cannot be repaired stays held (its hold moved on) and is left out of this cycle."""
    out: list[SlurmJob] = []
    for job in held:
        fixed = writer.make_whole(job)
        if fixed is None:
            writer.keep_held(job, "its request could not be repaired this cycle")
            report.failed.append(job.job_id)
            continue
        out.append(fixed)
    return out


def extend(writer: Writer, held: Sequence[SlurmJob], now: float, *, hold_s: float, margin_s: float,
           report: CycleReport) -> list[SlurmJob]:
    """Move the begin time of held jobs whose hold ends within `margin_s` to now + hold_s,
    before this cycle places them (a job Slurm could start while we retype it) or keeps them
    waiting. A job whose begin time cannot be moved is released unchanged (never started
    mid-change). Returns the jobs still held, as they now stand."""
    keep: list[SlurmJob] = []
    for job in held:
        if holds.held_by_priority(job) or (job.begin_time or 0) - now >= margin_s:
            keep.append(job)
            continue
        until = now + hold_s
        try:
            writer.set_begin(job.job_id, until)
        except SlurmUnavailable:
            raise
        except SlurmError as exc:
            log.warning("job %s: hold not extended (%s); releasing it unchanged", job.job_id, exc)
            release_unchanged(writer, job, f"hold could not be extended: {exc}", report)
            continue
        report.extended.append(job.job_id)
        keep.append(replace(job, begin_time=until))
    return keep


def rescue(writer: Writer, jobs: Sequence[SlurmJob], nodes: Sequence[SlurmNode], classes: Sequence[str], why: str,
           report: CycleReport) -> None:
    """Placed jobs that cannot start (see slurm_updates.stranded): the user's request back
    (or, where Slurm refuses that, the same shape on slots that exist, see
    slurm_updates.fallback_update, recorded in the tag first), then released. A job whose
    request is not whole after that (its user's or the tag's intended one) is not released."""
    by_name = {n.name: n for n in nodes}
    view: cluster_view.View | None = None
    for job in jobs:
        reason = slurm_updates.stranded(job, by_name)
        if reason is None:
            continue
        tag = Tag.parse(job.admin_comment) or Tag(head=PLACED)
        if writer.put_back(job):
            how = "its request restored"
        else:
            if view is None:
                view = cluster_view.build_view(nodes, jobs, {}, tuple(classes) or ("A",))
            update = slurm_updates.fallback_update(job, view)
            try:
                if update is None:
                    raise SlurmError("no slots of its shape on the nodes it may use")
                tag = replace(tag, intent=update.tres_per_node, nodes=update.node_list)
                writer.update(job.job_id, [("AdminComment", tag.render())])
                fields = [("TresPerNode", update.tres_per_node), ("NodeList", update.node_list)]
                writer.change(job.job_id, clear_keys(job, fields), fields)
                how = (f"re-typed to {update.tres_per_node}"
                       + (f" on {update.node_list}" if update.node_list else " on any node"))
            except (SlurmError, TagTooLong) as exc:
                log.error("job %s: stranded (%s) and not re-typed: %s", job.job_id, reason, exc)
                how = "request unchanged (Slurm refused both)"
        now = writer.read(job.job_id)
        if now is None or (tag.user_request() is not None and not whole(now, tag)):
            log.error("job %s: stranded (%s), its request is not whole after the rescue; not released, the "
                      "next step retries", job.job_id, reason)
            report.failed.append(job.job_id)
            continue
        try:
            if job.priority == 0 or job.state_reason == "BadConstraints":
                writer.release(job.job_id)
            elif job.begins_after(writer.clock()):
                writer.start_now(job.job_id)
        except SlurmError as exc:
            log.error("job %s: release after restore failed: %s", job.job_id, exc)
        writer.comment(job.job_id, Tag(head=RELEASED_RESTORED, was=tag.was,
                                       intent=tag.intent if not user_has(now, tag) else "",
                                       nodes=tag.nodes if not user_has(now, tag) else "",
                                       note=f"{reason}; {why}; {how}", site=site_comment(job.admin_comment)))
        log.warning("job %s: %s (%s); %s", job.job_id, why, reason, how)
        report.restored.append(job.job_id)
        writer.audit.add(Record.restored(job, policy=writer.policy, job_class=holds.held_class(job)[0],
                                         reason=f"{reason}: {how}", at=writer.stamp()))


def replan_stalled(writer: Writer, jobs: Sequence[SlurmJob], now: float, *, replan_after_s: float, hold_s: float,
                   report: CycleReport) -> None:
    """Re-plan every job we placed and released that is still waiting for resources
    `replan_after_s` after its placement (a job rescued this cycle is left alone)."""
    done = set(report.restored)
    for job in jobs:
        if (job.pending and holds.is_placed_by_pal(job) and job.priority != 0 and job.job_id not in done
                and job.state_reason not in cluster_view.NOT_WAITING_FOR_RESOURCES):
            at = holds.placed_at(job)
            if at is not None and now - at > replan_after_s:
                replan(writer, job, hold_s=hold_s, replan_after_s=replan_after_s, report=report)


def replan(writer: Writer, job: SlurmJob, *, hold_s: float, replan_after_s: float, report: CycleReport) -> None:
    """A job we placed and released that has not started: the user's request back first
    (where Slurm takes it), then tagged held (`src=replan`, keeping the `was` record),
    held through its begin time (now + hold_s, so it ends by itself if the placer goes),
    with no node pinned; the next cycle plans it from the user's request (see
    slurm_updates.as_submitted) and retypes it. Where Slurm keeps the per-slot request (22.05)
    the job waits with it until then."""
    if holds.original_request(job) is None:
        return
    cls, _src = holds.held_class(job)
    old = Tag.parse(job.admin_comment) or Tag(head=PLACED)
    tag = Tag(head=HELD, job_class=cls, src="replan", was=old.was, intent=old.intent or job.tres_per_node,
              nodes=old.nodes or job.required_nodes, site=old.site)
    if not writer.hold_again(job, tag, writer.clock() + hold_s):
        return
    restored = writer.put_back(job)
    if not restored:
        try:
            writer.update(job.job_id, [("NodeList", "")])
        except SlurmError as exc:
            log.warning("job %s: re-planning, NodeList not cleared (%s)", job.job_id, exc)
    report.replanned.append(job.job_id)
    writer.audit.add(Record.replanned(
        job, policy=writer.policy, job_class=cls, at=writer.stamp(),
        reason=f"not started {replan_after_s:.0f} s after its placement; held again to "
               f"re-place it ({'request restored' if restored else 'per-slot request kept'})"))


def release_all(backend: SlurmBackend, writer: Writer, classes: Sequence[str], why: str,
                publish_stopping: Callable[[], None]) -> CycleReport:
    """Release every job we hold and rescue every placement that cannot start (SIGTERM,
    fail-safe); never raises for one job. `publish_stopping` writes the stopping heartbeat
    first, so the filter stops holding new jobs before these are released."""
    try:
        publish_stopping()
    except OSError as exc:
        log.error("filter state not written: %s", exc)
    now = writer.clock()
    jobs = backend.jobs()
    report = CycleReport()
    for job in jobs:
        if holds.is_held_by_pal(job, now):
            release_unchanged(writer, job, why, report)
    try:
        nodes = backend.nodes()
    except SlurmError as exc:
        log.error("nodes not read, stranded placements not checked: %s", exc)
        nodes = []
    if nodes:
        rescue(writer, jobs, nodes, classes, why, report)
    writer.audit.flush()
    return report


__all__ = ["extend", "note_lapsed", "repair", "release_all", "release_unchanged", "replan", "replan_stalled", "rescue"]
