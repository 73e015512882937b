"""Runtime history from Slurm accounting: `sacct -P` exports read into finished jobs, and
written from finished jobs (the replay stands in for sacct with it). Pure: text in, records
out, and back.

A site exports its history with

    sacct -P -a -X -S now-30days --format=JobID,JobName,User,Submit,Start,End,Elapsed,State,AllocTRES,NodeList

(`-P`: '|'-separated with a header line, `-a`: every user, `-X`: jobs only, not their steps)
and imports it with `pal jobs import-history FILE`. Columns are found by name (any order,
any case, extra ones ignored). JobID, JobName, User, Start, State and End or Elapsed are
required; AllocTRES (GPUs), NNodes or NodeList (node count) are optional.

- Job steps (a JobID with a '.', `123.batch`, `123.0`: what `-X` leaves out) are skipped.
- Jobs that never started (Start Unknown/None) or have not ended (PENDING, RUNNING, ...)
  are skipped with the reason; so are jobs whose AllocTRES shows no GPU (the placer only
  steers GPU jobs) and a JobID seen twice in one file.
- A job's runtime is Elapsed when the file has it (sacct's own figure), else End - Start.
- Timestamps are sacct's: ISO local time without a zone (`2026-11-30T07:00:00`), read in
  the importing machine's time zone (set TZ when importing an export made elsewhere).
- A row that cannot be read (wrong field count, a bad time, an unknown state, an empty
  JobID or User, End before Start) is an InputError naming FILE:LINE and what is wrong.

Every ended state is kept (the table is the site's history); only COMPLETED and TIMEOUT
runs are learned from (pal_slurm.jobs.runtimes.LEARNED_STATES).
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from pal_slurm.errors import InputError
from pal_slurm.simulate.sacct_trace import count_hosts, sacct_duration_s, tres_gpus

__all__ = ["ACTIVE_STATES", "ENDED_STATES", "EXPORT_COLUMNS", "SACCT_COMMAND", "ExportJob", "HistoryFile",
           "HistoryJob", "format_elapsed", "read_history", "write_export"]

#: the command a site runs to export its history (docs/agent.md, "Learned runtimes")
SACCT_COMMAND = ("sacct -P -a -X -S now-30days "
                 "--format=JobID,JobName,User,Submit,Start,End,Elapsed,State,AllocTRES,NodeList")
#: the columns `write_export` writes: those of SACCT_COMMAND, in its order
EXPORT_COLUMNS = ("JobID", "JobName", "User", "Submit", "Start", "End", "Elapsed", "State", "AllocTRES", "NodeList")

#: states of jobs that ran and ended (sacct's job state codes)
ENDED_STATES = frozenset({"BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY",
                          "PREEMPTED", "TIMEOUT"})
#: states of jobs not ended yet (or not in a state that says how long they ran)
ACTIVE_STATES = frozenset({"PENDING", "RUNNING", "SUSPENDED", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "RESIZING",
                           "CONFIGURING", "COMPLETING", "SPECIAL_EXIT", "STOPPED", "SIGNALING", "STAGE_OUT", "REVOKED",
                           "RESV_DEL_HOLD", "UPDATE_DB", "POWER_UP_NODE", "LAUNCH_FAILED"})
_NEVER = frozenset({"", "unknown", "none"})


@dataclass(frozen=True)
class HistoryJob:
    """One finished Slurm job of an export."""

    job_id: str
    user: str
    name: str
    started_at: datetime  # timezone-aware UTC
    elapsed_s: float
    state: str  # the state code: "CANCELLED by 123" is CANCELLED
    gpus: int | None  # None: the file has no AllocTRES
    nodes: int | None  # None: the file has neither NNodes nor NodeList
    line: int
    #: the NodeList as sacct wrote it (a Slurm hostlist; "" when the file has none): passive speed
    #: learns from a job that took whole nodes, whose GPUs it names (pal_slurm.db.passive_store)
    node_list: str = ""


@dataclass(frozen=True)
class HistoryFile:
    """What a file held: its jobs, (line, reason) for every row skipped on purpose (never
    started, no GPUs, ...), and (line, problem) for every row that could not be read."""

    source: str
    jobs: tuple[HistoryJob, ...]
    skipped: tuple[tuple[int, str], ...] = ()
    steps: int = 0  # job step lines (JobID with a '.'), skipped silently
    bad: tuple[tuple[int, str], ...] = ()

    def skipped_by_reason(self) -> dict[str, int]:
        """Reason -> how many rows (the reason's first words, without job-specific values); the
        rows that could not be read count as "bad row"."""
        out: dict[str, int] = {}
        for _line, reason in self.skipped:
            key = reason.split(" (")[0]
            out[key] = out.get(key, 0) + 1
        if self.bad:
            out["bad row"] = len(self.bad)
        return dict(sorted(out.items()))


class _RowError(Exception):
    """Internal: the row is invalid; the message is the reason."""


def _rows(lines: Iterable[str]) -> Iterator[tuple[int, list[str]]]:
    reader = csv.reader(lines, delimiter="|", quoting=csv.QUOTE_NONE)  # sacct -P never quotes
    for fields in reader:
        if not fields or all(not f.strip() for f in fields):
            continue
        yield reader.line_num, [f.strip() for f in fields]


def _time(value: str, column: str) -> datetime:
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise _RowError(f"{column} {value!r} is not a time like 2026-11-30T07:00:00") from None
    return parsed.astimezone(UTC)  # a naive time is local time, as sacct prints it


def _state(value: str) -> str:
    code = value.split()[0].upper() if value.strip() else ""
    if code not in ENDED_STATES and code not in ACTIVE_STATES:
        raise _RowError(f"State {value!r} is not a Slurm job state (COMPLETED, TIMEOUT, FAILED, CANCELLED, ...)")
    return code


def read_history(lines: Iterable[str], *, source: str) -> HistoryFile:
    """Parse an `sacct -P` export (see the module doc). A row that cannot be read (a '|' or a
    line break inside a job name, a bad time) is left out and listed in `bad` with its line,
    so one odd job does not stop the import of a month's history; InputError when the file
    itself is unusable (no header, a missing column) or no row at all could be read."""
    rows = _rows(lines)
    first = next(rows, None)
    if first is None:
        raise InputError("the file is empty: expected the header line of `sacct -P` and jobs", source=source)
    header_line, header = first
    cols = {c.lower(): i for i, c in enumerate(header) if c}
    missing = [c for c in ("JobID", "JobName", "User", "Start", "State") if c.lower() not in cols]
    if "end" not in cols and "elapsed" not in cols:
        missing.append("End or Elapsed")
    if missing:
        raise InputError(f"missing column(s) {', '.join(missing)}; export with `{SACCT_COMMAND}`",
                         source=source, line=header_line)
    jobs: list[HistoryJob] = []
    skipped: list[tuple[int, str]] = []
    bad: list[tuple[int, str]] = []
    seen: dict[str, int] = {}
    steps = rows_read = 0
    for line, fields in rows:
        rows_read += 1
        if len(fields) != len(header):
            bad.append((line, f"row has {len(fields)} fields, the header has {len(header)} (a '|' or a line break "
                              "inside a job name? sacct -P does not quote)"))
            continue

        def get(col: str, fields: Sequence[str] = fields) -> str:
            i = cols.get(col)
            return fields[i] if i is not None else ""

        job_id = get("jobid")
        if "." in job_id:
            steps += 1
            continue
        try:
            job = _job(get, job_id, line, has_tres="alloctres" in cols)
        except _Skip as s:
            skipped.append((line, str(s)))
            continue
        except _RowError as e:
            bad.append((line, str(e)))
            continue
        if job_id in seen:
            skipped.append((line, f"duplicate JobID (first on line {seen[job_id]})"))
            continue
        seen[job_id] = line
        jobs.append(job)
    if rows_read == 0:
        raise InputError("no jobs in the file, only its header", source=source)
    if bad and not jobs and not skipped:
        line, problem = bad[0]
        more = f" (and {len(bad) - 1} more bad row(s))" if len(bad) > 1 else ""
        raise InputError(problem + more, source=source, line=line)
    return HistoryFile(source=source, jobs=tuple(jobs), skipped=tuple(skipped), steps=steps, bad=tuple(bad))


class _Skip(Exception):
    """Internal: a well-formed row that is no finished GPU job; the message is why."""


def _job(get: Callable[[str], str], job_id: str, line: int, *, has_tres: bool) -> HistoryJob:
    if not job_id:
        raise _RowError("empty JobID")
    user = get("user")
    if not user:
        raise _RowError("empty User")
    state = _state(get("state"))
    start_text = get("start")
    if start_text.lower() in _NEVER:
        raise _Skip(f"never started (Start {start_text or 'empty'})")
    started = _time(start_text, "Start")
    if state in ACTIVE_STATES:
        raise _Skip(f"not ended ({state})")
    elapsed_text = get("elapsed")
    if elapsed_text:
        elapsed = sacct_duration_s(elapsed_text)
        if elapsed is None:
            raise _RowError(f"Elapsed {elapsed_text!r} is not [D-]HH:MM:SS")
    else:
        end_text = get("end")
        if end_text.lower() in _NEVER:
            raise _RowError(f"End {end_text or 'empty'} on a job that ended ({state}); give Elapsed or End")
        end = _time(end_text, "End")
        if end < started:
            raise _RowError(f"End {end_text} is before Start {start_text}")
        elapsed = (end - started).total_seconds()
    gpus = tres_gpus(get("alloctres")) if has_tres else None
    if gpus == 0:
        raise _Skip("no GPUs (AllocTRES has no gres/gpu)")
    nodes: int | None = None
    nnodes = get("nnodes")
    if nnodes.isdigit():
        nodes = int(nnodes)
    elif get("nodelist"):
        try:
            nodes = count_hosts(get("nodelist")) or None
        except ValueError as exc:
            raise _RowError(f"NodeList {get('nodelist')!r}: {exc}") from None
    node_list = get("nodelist").strip()
    return HistoryJob(job_id=job_id, user=user, name=get("jobname"), started_at=started, elapsed_s=elapsed,
                      state=state, gpus=gpus, nodes=nodes, line=line,
                      node_list="" if node_list.lower() in ("none assigned", "(null)") else node_list)


# --------------------------------------------------------------------------- writing


@dataclass(frozen=True)
class ExportJob:
    """A finished job as the writer takes it: epoch seconds, the nodes it ran on."""

    job_id: str
    name: str
    user: str
    submit: float
    start: float
    end: float
    state: str
    gpus: int
    nodes: Sequence[str]


def format_elapsed(seconds: float) -> str:
    """Seconds as sacct prints Elapsed: `HH:MM:SS`, `D-HH:MM:SS` from a day on."""
    total = max(0, int(seconds))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}" if days else f"{hours:02d}:{minutes:02d}:{secs:02d}"


def _local(epoch: float) -> str:
    return datetime.fromtimestamp(int(epoch)).strftime("%Y-%m-%dT%H:%M:%S")  # sacct: local time, whole seconds


def write_export(jobs: Iterable[ExportJob]) -> str:
    """`sacct -P --format=JobID,JobName,User,Submit,Start,End,Elapsed,State,AllocTRES,NodeList`
    output for `jobs`, as sacct prints it: whole seconds of local time, Elapsed = End - Start of
    those, AllocTRES with `gres/gpu=N` and `node=K`, NodeList as a comma-separated hostlist.
    A '|' or a line break in a name would break the format (sacct has the same limit): refused."""
    out = ["|".join(EXPORT_COLUMNS)]
    for j in jobs:
        for what, text in (("JobID", j.job_id), ("JobName", j.name), ("User", j.user)):
            if "|" in text or "\n" in text or "\r" in text:
                raise InputError(f"job {j.job_id}: {what} {text!r} has a '|' or a line break: "
                                 "it cannot be written as sacct -P")
        start, end = int(j.start), int(j.end)
        tres = f"billing={j.gpus},cpu={len(j.nodes) or 1},gres/gpu={j.gpus},node={len(j.nodes) or 1}"
        out.append("|".join([j.job_id, j.name, j.user, _local(j.submit), _local(start), _local(end),
                             format_elapsed(end - start), j.state, tres, ",".join(j.nodes)]))
    return "\n".join(out) + "\n"
