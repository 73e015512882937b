"""The replay's runtime history: an arm's finished jobs as the `sacct -P` export a site would
have of an earlier run. Pure.

The test clusters run without slurmdbd (AccountingStorageType=accounting_storage/none), so
`sacct` has nothing to report there. The replay already records every job's submission (just
before sbatch), start and end (the job script's own clock) and the GPUs it got, so it writes
what sacct would print for those jobs instead (pal_slurm.jobs.sacct_history.write_export: the
columns and formats of the documented sacct command). Such a file goes through the same
`pal jobs import-history` a site runs; the pal+history arm is seeded with the exports of
earlier runs only (the arms of this and earlier repetitions that ran before it: another shake
seed or another arm), never with its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pal_slurm.errors import PalError
from pal_slurm.jobs.sacct_history import ExportJob, write_export
from pal_eval.replay.plan import job_name

__all__ = ["HISTORY_PREFIX", "arm_export", "export_jobs", "history_label"]

#: the `--cluster` label of every history the replay imports starts with this: an arm that must
#: run without history (pal) removes them all first
HISTORY_PREFIX = "replay:"


def history_label(trace: str, rep: int, arm: str) -> str:
    """The `--cluster` an arm's export is imported under (job ids restart with the cluster)."""
    return f"{HISTORY_PREFIX}{trace}:rep{rep}:{arm}"


def export_jobs(result: Mapping[str, Any], *, user: str, t0_fallback: float | None = None) -> list[ExportJob]:
    """The finished jobs of one stored arm result (ArmReport.as_dict(): its `run` with `t0` and
    per job the submission, start and end relative to it, and the GPUs it ran on), as
    submitted: job name `replay-<trace id>` (plan.job_name), by `user`. A job without a record or with an
    error did not finish its work and is left out (sacct would say FAILED or CANCELLED: no
    runtime to learn). A result written before `t0` was stored takes `t0_fallback` (its file's
    time less the arm's wall time: what is learned are the elapsed times and their order);
    PalError when there is neither."""
    run = result.get("run") or {}
    t0 = run.get("t0", t0_fallback)
    if t0 is None:
        raise PalError(f"the stored {result.get('arm', '?')} result has no start time (t0): it was written "
                       "before the replay exported runtimes; run that arm again")
    out = []
    for j in run.get("jobs", []):
        if "error" in j or "failure" in j or j.get("start") is None or j.get("end") is None:
            continue
        nodes = sorted({str(n) for n, _minor in j.get("placed_on") or []})
        out.append(ExportJob(job_id=str(j["slurm_id"]), name=job_name(str(j["trace_id"])), user=user,
                             submit=t0 + float(j["submitted"]), start=t0 + float(j["start"]),
                             end=t0 + float(j["end"]), state="COMPLETED", gpus=int(j["gpus"]), nodes=nodes))
    return out


def arm_export(result: Mapping[str, Any], *, user: str, t0_fallback: float | None = None) -> str:
    """`export_jobs` as `sacct -P` text."""
    return write_export(export_jobs(result, user=user, t0_fallback=t0_fallback))
