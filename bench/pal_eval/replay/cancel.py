"""Cancelling a replay arm's jobs: scancel them and wait until Slurm has let them go, so an
arm that stops leaves the cluster clean or names the jobs it could not confirm gone."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence

from pal_slurm.errors import SlurmError
from pal_slurm.slurm import parse_json
from pal_slurm.slurm.command import run_command

log = logging.getLogger(__name__)


def cancel_all(job_ids: Sequence[str], env: Mapping[str, str] | None, wait_s: float = 60.0) -> list[str]:
    """scancel the jobs (argument lists, in batches) and wait until none is pending or running.

    Returns the ids it could not confirm gone: those squeue still lists pending or running at
    the deadline, or every one when squeue never answered (slurmctld gone). Empty: all are gone.
    """
    ids = list(dict.fromkeys(j for j in job_ids if j))
    for i in range(0, len(ids), 200):
        batch = " ".join(ids[i:i + 200])
        try:
            proc = run_command(["scancel", *ids[i:i + 200]], timeout=60, env=env, check=False)
        except SlurmError as exc:  # slurmctld gone: say which jobs may be left, never hide the cause
            log.error("scancel %s failed (%s): cancel them by hand", batch, exc)
            continue
        if proc.returncode != 0:  # also for jobs that had already ended: squeue below decides
            first = next((ln.strip() for ln in (proc.stderr or proc.stdout or "").splitlines() if ln.strip()),
                         f"exit status {proc.returncode}")
            log.warning("scancel %s: %s", batch, first)
    left = ids
    deadline = time.time() + wait_s
    while left and time.time() < deadline:
        try:
            doc = parse_json.load(run_command(["squeue", "--all", "--json"], timeout=60, env=env).stdout,
                                  "squeue --json")
        except SlurmError:
            time.sleep(1)
            continue
        active = {j.job_id for j in parse_json.jobs_from_doc(doc, active_only=True, only=set(left))}
        left = [j for j in left if j in active]
        if left:
            time.sleep(0.5)
    if left:
        log.error("jobs %s may still be queued or running: scancel them by hand", " ".join(left))
    return left


def cancel_note(ids: Sequence[str], left: Sequence[str]) -> str:
    """What cancel_all did, for a message: `left` are the ids it could not confirm gone."""
    if not left:
        return f"cancelled {len(ids)} submitted jobs"
    return (f"cancelled {len(ids) - len(left)} of its {len(ids)} submitted jobs; {len(left)} may still be "
            f"queued or running: {' '.join(left)} (scancel them)")
