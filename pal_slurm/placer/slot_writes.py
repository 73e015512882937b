"""An administrator's writes to one GPU slot, outside any placer mode: taken out of service by a
holder job and back, its holder started again after a node failure, and the hand-over that lets
a profiling job into the slot (pal_slurm/slurm/quarantine_model.py says what a holder is). Part
of the one writer: pal_slurm/placer/writer.py re-exports each, and the commands call them there.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from pal_slurm.errors import SlurmError
from pal_slurm.slurm import quarantine_model
from pal_slurm.slurm.quarantine import QuarantineSlurm
from pal_slurm.slurm.quarantine_model import Holder, QuarantineTag

log = logging.getLogger("pal_slurm.placer.writer")


def quarantine(slurm: QuarantineSlurm, partition: str, tag: QuarantineTag) -> str:
    """Take one GPU slot out of service (`pal gpus quarantine --apply`): submit its holder job
    and tag it (admin comment; no time limit); the holder's job id. A holder whose tag cannot be
    written is cancelled again and SlurmError raised: untagged, it would end at its partition's
    time limit and no reader would know it for a quarantine."""
    log.info("gpu %s: quarantine (%s)", tag.slot.name, tag.reason)
    job_id = slurm.submit(quarantine_model.submit_argv(tag.slot, partition, tag))
    try:
        slurm.tag(job_id, tag)
    except SlurmError as exc:
        try:
            slurm.cancel(job_id)
        except SlurmError as again:
            raise SlurmError(f"holder job {job_id} not tagged ({exc}) and not cancelled ({again}): cancel it "
                             f"by hand (scancel {job_id})") from exc
        raise SlurmError(f"holder job {job_id} not tagged ({exc}); cancelled again") from exc
    return job_id


def restart_holder(slurm: QuarantineSlurm, holder: Holder) -> None:
    """A holder requeued after its node failed: eligible now instead of in two minutes (until it
    runs, its slot takes other jobs)."""
    log.info("gpu %s: holder job %s requeued; started at once", holder.slot.name, holder.job_id)
    slurm.start_now(holder.job_id)


def profile_in_slot(slurm: QuarantineSlurm, holder: Holder, partition: str, profile_argv: Sequence[str]
                    ) -> tuple[str, str]:
    """Profile a GPU out of service in its slot, held throughout (`pal profile submit --gpus`): the
    profiling job (holder's priority) and a new holder (same tag, younger) are submitted, then the
    old holder cancelled. Slurm gives the slot to the highest priority, of equal ones the older: the
    profiling job, then the new holder. (profiling job, new holder); a failed step undoes the ones
    before it (SlurmError), and the old holder keeps the slot. A cancel that fails may still have
    been carried out (a timed-out scancel): then only the profiling job is withdrawn and the new holder
    kept, so that the slot is held whichever way it went (a holder left waiting beside the old one is
    cancelled with it by `pal gpus release`)."""
    log.info("gpu %s: profiled in its slot (holder job %s hands it over)", holder.slot.name, holder.job_id)
    profile_job = slurm.submit(profile_argv)
    try:
        new_holder = quarantine(slurm, partition, holder.tag)
    except SlurmError as exc:
        _undo(slurm, [profile_job], exc)
        raise SlurmError(f"no new holder for {holder.slot.name} ({exc}): profiling job {profile_job} cancelled; "
                         f"holder job {holder.job_id} keeps the slot") from exc
    try:
        slurm.cancel(holder.job_id)
    except SlurmError as exc:
        _undo(slurm, [profile_job], exc)
        raise SlurmError(f"holder job {holder.job_id} maybe not cancelled ({exc}): profiling job {profile_job} "
                         f"cancelled; holder job {new_holder} kept, so one of the two holds the slot") from exc
    return profile_job, new_holder


def _undo(slurm: QuarantineSlurm, jobs: Sequence[str], cause: SlurmError) -> None:
    """Cancel `jobs` after a failed step; SlurmError naming those left."""
    left = [job for job in jobs if not _cancelled(slurm, job)]
    if left:
        raise SlurmError(f"{cause}; and job(s) {', '.join(left)} not cancelled: cancel them by hand "
                         f"(scancel {' '.join(left)})") from cause


def _cancelled(slurm: QuarantineSlurm, job: str) -> bool:
    try:
        slurm.cancel(job)
    except SlurmError:
        return False
    return True


def release_quarantine(slurm: QuarantineSlurm, holder: Holder) -> None:
    """Put a quarantined slot back in service (`pal gpus release --apply`): cancel its holder."""
    log.info("gpu %s: released (holder job %s)", holder.slot.name, holder.job_id)
    slurm.cancel(holder.job_id)


__all__ = ["profile_in_slot", "quarantine", "release_quarantine", "restart_holder"]
