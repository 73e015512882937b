"""Reading raw `squeue --json` job records the same way in every Slurm test, on 22.05 and 24.11.

The tests look at what Slurm itself reports, not at pal-slurm's parsed view of it (that
parser is under test elsewhere), so they need their own small reading of the fields whose
shape changed between the versions. One copy, so a version difference is fixed once.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

HELD_TAG = "pal:held"  # the admin comment job_submit.lua gives a job it holds


def int_field(value: Any) -> int | None:
    """An integer field: a plain int (22.05) or {set, infinite, number} (24.11); None when unset."""
    if isinstance(value, dict):
        return int(value["number"]) if value.get("set", True) else None
    return None if value is None else int(value)


def job_state(job: dict[str, Any]) -> str:
    """'PENDING', 'COMPLETED', ...: a string on 22.05, a list of state and flags on 24.11."""
    state = job.get("job_state")
    return (state[0] if isinstance(state, list) and state else str(state or "")).upper()


def return_code(job: dict[str, Any]) -> Any:
    """The job script's exit status (24.11 nests it in an object; see exit_code)."""
    code = job.get("exit_code")
    return int_field(code.get("return_code")) if isinstance(code, dict) else code


def exit_code(job: dict[str, Any]) -> Any:
    """The whole exit code as the version reports it: an int, or (status, return code, signal) on 24.11."""
    code = job.get("exit_code")
    if isinstance(code, dict):  # 24.11: {status, return_code: {number}, signal: {...}}
        return (code.get("status"), int_field(code.get("return_code")),
                int_field((code.get("signal") or {}).get("id")))
    return code


def tagged_held(job: dict[str, Any]) -> bool:
    """Pending and still tagged `pal:held`, whether or not the hold has run out: pal-slurm has
    not let go of it (what "nobody stranded" must rule out)."""
    return job_state(job) == "PENDING" and (job.get("admin_comment") or "").startswith(HELD_TAG)


def held_by_pal(job: dict[str, Any], now: float) -> bool:
    """Tagged `pal:held` and actually held now: a begin time ahead (reason BeginTime) or
    priority 0 (what earlier releases of the filter did)."""
    if not tagged_held(job):
        return False
    return (int_field(job.get("priority")) == 0 or job.get("state_reason") == "BeginTime"
            or (int_field(job.get("eligible_time")) or 0) > now)


def records_of(jobs: Iterable[dict[str, Any]], job_id: str) -> list[dict[str, Any]]:
    """Every record that belongs to JOB_ID: the job itself, its array tasks, its het components."""
    want = int(job_id)
    return [j for j in jobs
            if want in (int_field(j.get("job_id")), int_field(j.get("array_job_id")), int_field(j.get("het_job_id")))]
