"""Pal's marks on a job: the admin_comment tags of the submit filter and the placer, and what they say (pure).

Why apart: whether a job is ours at all, the class the filter gave it, when we placed it and
what it asked for before we retyped it all live in the job's admin_comment. The daemon, the
cluster view and the Slurm updates read them here, in one place, so a tag is written and read
one way. Pure like the placer's other rules (see pal_slurm.placer.shapes): tested without a cluster.

Rules (docs/admin-guide.md, "What the placer touches"):
- A job is ours only while it is pending, held, and its admin_comment starts `pal:held`
  (what job_submit.lua writes in enforce mode). Held means a begin time still ahead (or
  Slurm's reason BeginTime): job_submit.lua sets the begin time, because Slurm skips its
  submit-time checks for a job held with priority 0. A job held with priority 0 and the tag
  (what earlier releases of the filter did) still counts, so an upgrade leaves none behind.
- A job held by someone on purpose (JobHeldUser, JobHeldAdmin) is never ours to release.
- A job we released for Slurm's own first fit is Slurm's to place: until Slurm's scheduler
  has looked at it (`slurm_still_placing`) the placer places nothing else.
"""

from __future__ import annotations

from collections.abc import Sequence

from pal_slurm.placer.tag import HELD, PLACED, Tag
from pal_slurm.slurm.model import SlurmJob

HELD_TAG = HELD
PLACED_TAG = PLACED
RELEASED_TAG = "pal: released"

#: pending reasons under which a job is held by someone on purpose: never ours to release
HELD_BY_SOMEONE = frozenset({"JobHeldUser", "JobHeldAdmin"})


def is_held_by_pal(job: SlurmJob, now: float) -> bool:
    """A pending job tagged `pal:held` that is held: by its begin time (job_submit.lua, the
    placer's re-plans) or with priority 0 (earlier releases)."""
    if not (job.pending and job.admin_comment.startswith(HELD_TAG)):
        return False
    return job.priority == 0 or job.begins_after(now) or job.state_reason == "BeginTime"


def hold_lapsed(job: SlurmJob, now: float) -> bool:
    """A pending job still tagged `pal:held` whose begin-time hold ran out before we released it
    (placer down or too slow): Slurm schedules it as submitted; only its tag is left to fix."""
    return job.pending and job.admin_comment.startswith(HELD_TAG) and not is_held_by_pal(job, now)


def held_by_priority(job: SlurmJob) -> bool:
    """Which hold a held job has: priority 0 (`scontrol release` ends it) or else a begin
    time (`StartTime=now` ends it)."""
    return job.priority == 0


def is_placed_by_pal(job: SlurmJob) -> bool:
    return job.admin_comment.startswith(PLACED_TAG)


def tag_of(job: SlurmJob) -> Tag | None:
    """The job's pal-slurm tag (pal_slurm.placer.tag), None when it carries none."""
    return Tag.parse(job.admin_comment)


def held_class(job: SlurmJob) -> tuple[str, str]:
    """(class, source) from the filter's tag `pal:held class=X src=Y`."""
    tag = tag_of(job)
    return (tag and tag.job_class or "auto"), (tag and tag.src or "default")


def placed_at(job: SlurmJob) -> float | None:
    tag = tag_of(job)
    return float(tag.at) if tag is not None and tag.at is not None else None


def original_request(job: SlurmJob) -> tuple[str, str] | None:
    """The GPU field and value of the request the user made, recorded in the tag before the
    placer first changed the job (None: never recorded, the job has what its user asked for)."""
    tag = tag_of(job)
    if tag is None:
        return None
    gpu = [(f, v) for f, v in tag.was if f != "required_nodes" and v]
    return gpu[0] if gpu else None


#: how long a job left to Slurm may keep the placer from placing others: Slurm's next pass
#: comes within its batch_sched_delay (3 s by default) of a release, or at sched_interval
LEFT_TO_SLURM_GRACE_S = 10.0


def slurm_still_placing(left: dict[str, float], jobs: Sequence[SlurmJob], now: float) -> list[str]:
    """The jobs we left to Slurm's first fit that its scheduler has not looked at yet: still
    pending with the reason of their released hold (BeginTime) or none, within the grace.
    A job that started, ended, or waits for Resources/Priority (Slurm looked, and did not start
    it) is dropped from `left`, so the placer never waits on it again."""
    by_id = {j.job_id: j for j in jobs}
    out = []
    for job_id, since in list(left.items()):
        j = by_id.get(job_id)
        if (j is None or not j.pending or now - since > LEFT_TO_SLURM_GRACE_S
                or (j.state_reason or "None") not in ("BeginTime", "None")):
            del left[job_id]
        else:
            out.append(job_id)
    return out
