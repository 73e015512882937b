"""Job traces for the simulator: Sia-Philly CSVs and Slurm accounting exports, parsed into
frozen `TraceJob`s. Pure: text lines in, a `Trace` out; `read_trace_file` is the one
convenience that opens a file.

**Sia-Philly** (``job_id,num_gpus,submit_time,duration,model``), as the PAL artifact reads
it (hal-uw/blox-pal, ``workload/workload.py``, ``Workload.populate_from_trace``,
``get_per_iter_time`` and ``get_perfclass``; read, not copied):

- ``duration`` is a number of **iterations**: it goes unchanged into
  ``Job.job_total_iteration``, and the per-model iteration time from ``get_per_iter_time``
  goes into ``Job.job_iteration_time`` (the conversion from a duration that
  ``add_synergy_profile`` would do is commented out). The nominal run time of a job is
  therefore ``duration * iteration time``, independent of its GPU count.
- Models are matched **exactly and case-sensitively** (a dict lookup for the iteration
  time, ``==`` comparisons for the class). An unknown model makes the artifact's
  iteration-time lookup raise ``KeyError`` (its class lookup alone would fall back to A);
  we raise an `InputError` that lists the known models. We strip surrounding blanks of
  every field (pandas would keep them in the model name); nothing else is normalised.
- Jobs are taken in **file order**: ``Workload.generate_next_job`` hands out rows in order
  and renumbers them with a counter, so the artifact's job ids are the row numbers
  0..159. On the shipped traces the ``job_id`` column equals the row number and rows are
  sorted by submit time; we keep the file's ``job_id`` text as the id and refuse
  duplicates.

**Slurm accounting** (``sacct -P`` or ``-p``, with a header line): see `read_sacct`.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Literal

from pal_slurm.errors import InputError
from pal_slurm.placement.model import JOB_CLASSES

__all__ = [
    "JOB_CLASSES",
    "MODEL_CLASS",
    "MODEL_ITER_TIME_S",
    "PHILLY_COLUMNS",
    "Trace",
    "TraceJob",
    "count_hosts",
    "detect_format",
    "read_philly",
    "read_sacct",
    "read_trace_file",
    "slurm_shape",
    "tres_gpus",
]

#: Sia-Philly model -> PAL job class (artifact: ``Workload.get_perfclass``).
MODEL_CLASS: Mapping[str, str] = {
    "resnet50": "A",
    "BERT": "B",
    "GPT2": "B",
    "DCGAN": "B",
    "vgg19": "C",
    "PointNet": "D",
}

#: Sia-Philly model -> seconds per iteration (artifact: ``Workload.get_per_iter_time``).
MODEL_ITER_TIME_S: Mapping[str, float] = {
    "BERT": 0.179,
    "DCGAN": 0.0469266931,
    "GPT2": 3.5714,
    "PointNet": 0.28125,
    "resnet50": 0.17540429367763434,
    "vgg19": 0.300610341,
}

PHILLY_COLUMNS = ("job_id", "num_gpus", "submit_time", "duration", "model")

_WORK_UNITS = ("iterations", "seconds")


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One job of a trace. `line` is the 1-based line of `source` it came from (0 for
    generated jobs); `gpus_per_node`, when set, means the job needs exactly that many GPUs
    on each of its nodes."""

    job_id: str
    num_gpus: int
    submit_time: float  # seconds since the start of the trace
    work: float  # in `work_unit`
    work_unit: str  # "iterations" or "seconds"
    model: str
    job_class: str
    iter_time_s: float
    line: int
    source: str
    gpus_per_node: int | None = None
    name: str = ""
    #: the job's time limit in seconds when the trace has one (sacct's Timelimit); None otherwise
    limit_s: float | None = None

    def __post_init__(self) -> None:
        if self.work_unit not in _WORK_UNITS:
            raise ValueError(f"job {self.job_id}: work_unit must be one of {_WORK_UNITS}, got {self.work_unit!r}")

    @property
    def nominal_runtime_s(self) -> float:
        """Run time on a median GPU without locality penalty."""
        return self.work * self.iter_time_s if self.work_unit == "iterations" else self.work


@dataclass(frozen=True)
class Trace:
    """Jobs in the order a simulator should admit them, and the rows left out as (line, reason)."""

    name: str
    jobs: tuple[TraceJob, ...]
    skipped: tuple[tuple[int, str], ...] = ()

    def __len__(self) -> int:
        return len(self.jobs)


class _Collector:
    """Raise on a bad row, or record it when `skip_invalid` is set."""

    def __init__(self, source: str, skip_invalid: bool) -> None:
        self.source = source
        self.skip_invalid = skip_invalid
        self.skipped: list[tuple[int, str]] = []

    def invalid(self, line: int, reason: str) -> None:
        if not self.skip_invalid:
            raise InputError(reason, source=self.source, line=line)
        self.skipped.append((line, reason))

    def skip(self, line: int, reason: str) -> None:
        """A well-formed row that is not a job for the simulator (never an error)."""
        self.skipped.append((line, reason))


class _RowError(Exception):
    """Internal: one row is invalid; the message is the reason."""


def _trace_name(source: str) -> str:
    return Path(source).stem or source


def _number(value: str, column: str) -> float:
    try:
        x = float(value)
    except ValueError:
        raise _RowError(f"{column} {value!r} is not a number") from None
    if not math.isfinite(x):
        raise _RowError(f"{column} {value!r} is not a finite number")
    return x


def _gpu_count(value: str, column: str) -> int:
    x = _number(value, column)
    if not x.is_integer():
        raise _RowError(f"{column} {value!r} is not a whole number")
    if x < 1:
        raise _RowError(f"{column} must be at least 1, got {value}")
    return int(x)


def _check_cluster(num_gpus: int, max_gpus: int | None) -> None:
    if max_gpus is not None and num_gpus > max_gpus:
        raise _RowError(f"job needs {num_gpus} GPUs, more than the cluster's {max_gpus}")


def _rows(lines: Iterable[str], delimiter: str, *, quoted: bool = True) -> Iterator[tuple[int, list[str]]]:
    """(line number, fields) for each non-blank record; line numbers are physical lines.
    `quoted` False reads quote characters as text (sacct -P never quotes)."""
    reader = csv.reader(lines, delimiter=delimiter, quoting=csv.QUOTE_MINIMAL if quoted else csv.QUOTE_NONE)
    for fields in reader:
        if not fields or all(not f.strip() for f in fields):
            continue
        yield reader.line_num, [f.strip() for f in fields]


# --------------------------------------------------------------------------- Sia-Philly


def read_philly(lines: Iterable[str], *, source: str, max_gpus: int | None = None,
                skip_invalid: bool = False, name: str | None = None) -> Trace:
    """Parse a Sia-Philly trace (header ``job_id,num_gpus,submit_time,duration,model``,
    columns in any order, extra columns ignored). Jobs keep file order.

    Bad rows (non-numeric or non-positive values, negative submit time, unknown model, more
    GPUs than `max_gpus`, duplicate job id) raise `InputError` naming ``source:line``, or
    with `skip_invalid` are left out and listed in `Trace.skipped`. A missing column is
    always an error (line 1).
    """
    out = _Collector(source, skip_invalid)
    rows = _rows(lines, ",")
    header_line, header = next(rows, (1, []))
    index = {col: i for i, col in enumerate(header)}
    missing = [c for c in PHILLY_COLUMNS if c not in index]
    if missing:
        raise InputError(f"missing column(s) {', '.join(missing)}; expected a header with "
                         f"{','.join(PHILLY_COLUMNS)}", source=source, line=header_line)
    jobs: list[TraceJob] = []
    seen: dict[str, int] = {}
    for line, fields in rows:
        try:
            job = _philly_job(fields, index, len(header), line, source, max_gpus)
            if job.job_id in seen:
                raise _RowError(f"duplicate job_id {job.job_id!r} (first on line {seen[job.job_id]})")
        except _RowError as e:
            out.invalid(line, str(e))
            continue
        seen[job.job_id] = line
        jobs.append(job)
    return Trace(name=name or _trace_name(source), jobs=tuple(jobs), skipped=tuple(out.skipped))


def _philly_job(fields: list[str], index: Mapping[str, int], width: int, line: int, source: str,
                max_gpus: int | None) -> TraceJob:
    if len(fields) != width:
        raise _RowError(f"row has {len(fields)} fields, the header has {width}")
    get = {c: fields[index[c]] for c in PHILLY_COLUMNS}
    if not get["job_id"]:
        raise _RowError("empty job_id")
    num_gpus = _gpu_count(get["num_gpus"], "num_gpus")
    submit = _number(get["submit_time"], "submit_time")
    if submit < 0:
        raise _RowError(f"submit_time must not be negative, got {get['submit_time']}")
    duration = _number(get["duration"], "duration")
    if duration <= 0:
        raise _RowError(f"duration must be positive, got {get['duration']}")
    model = get["model"]
    if model not in MODEL_CLASS:
        raise _RowError(f"unknown model {model!r} (known, case-sensitive: {', '.join(sorted(MODEL_CLASS))})")
    _check_cluster(num_gpus, max_gpus)
    return TraceJob(job_id=get["job_id"], num_gpus=num_gpus, submit_time=submit, work=duration,
                    work_unit="iterations", model=model, job_class=MODEL_CLASS[model],
                    iter_time_s=MODEL_ITER_TIME_S[model], line=line, source=source)


# --------------------------------------------------------------------------- sacct

_NEVER = frozenset({"", "unknown", "none"})
_GPU_TRES = re.compile(r"^gres[/:]gpu(?::(?P<type>[^=]+))?=(?P<n>\d+)$")
_CLASS_MARKER = re.compile(r"pal:class=([A-Za-z]+)")
_SACCT_REQUIRED = ("jobid", "submit", "start", "end")


@dataclass(frozen=True)
class _SacctRow:
    line: int
    job_id: str
    submit: datetime
    run_s: float
    gpus: int
    job_class: str
    gpus_per_node: int | None
    name: str
    limit_s: float | None = None


def tres_gpus(tres: str) -> int:
    """GPUs in a TRES string (``cpu=4,gres/gpu=2,gres/gpu:a100=2,...``): the untyped
    ``gres/gpu=N`` when present (sacct lists it as the total beside the typed ones), else
    the sum of the typed ``gres/gpu:TYPE=N``; 0 when there is none."""
    total: int | None = None
    typed = 0
    for item in tres.split(","):
        m = _GPU_TRES.match(item.strip())
        if m is None:
            continue
        if m.group("type") is None:
            total = int(m.group("n"))
        else:
            typed += int(m.group("n"))
    return typed if total is None else total


def count_hosts(nodelist: str) -> int:
    """Number of hosts in a Slurm hostlist (``gpu[01-03,07],login1``); 0 for "None assigned".
    Raises ValueError for a bracket it cannot read."""
    text = nodelist.strip()
    if not text or text.lower().startswith("none"):
        return 0
    total, depth, start = 0, 0, 0
    for i, ch in enumerate(text + ","):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch == "," and depth == 0:
            total += _count_one_host_pattern(text[start:i])
            start = i + 1
    return total


def _count_one_host_pattern(pattern: str) -> int:
    n = 1 if pattern else 0
    for group in re.findall(r"\[([^\]]*)\]", pattern):
        k = 0
        for part in group.split(","):
            lo, _, hi = part.partition("-")
            if not lo.strip().isdigit() or (hi and not hi.strip().isdigit()):
                raise ValueError(f"cannot read the hostlist {pattern!r}")
            k += int(hi) - int(lo) + 1 if hi else 1
        n *= k
    return n


def _timestamp(value: str, column: str) -> datetime:
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        raise _RowError(f"{column} {value!r} is not a timestamp like 2026-11-30T07:00:00") from None


def read_sacct(lines: Iterable[str], *, source: str, max_gpus: int | None = None,
               skip_invalid: bool = False, default_class: str = "A", name: str | None = None) -> Trace:
    """Parse ``sacct -P`` (or ``-p``) output with its header line into a trace of GPU jobs.

    Columns are found by name (case-insensitive, any order, extra ones ignored): JobID,
    Submit, Start, End and AllocTRES or ReqTRES are required; JobName (for a
    ``pal:class=X`` marker, else `default_class`), NodeList, NNodes and Timelimit (the
    runtime estimate `--runtime-estimate limit` gives policies) are optional.

    - Job steps (a JobID with a '.', e.g. ``123.batch``, ``123.0``) are dropped silently;
      array elements (``123_4``) and het-job components (``123+0``) keep their id.
    - GPUs come from AllocTRES, or from ReqTRES when AllocTRES is absent or empty
      (see `tres_gpus`). Jobs without GPUs, jobs that never started (Start
      Unknown/None), jobs still running (End Unknown) and jobs that ran 0 s are left out
      with a reason in `Trace.skipped`.
    - ``work`` is End - Start in seconds (``work_unit`` "seconds", ``iter_time_s`` 1.0);
      ``submit_time`` is relative to the earliest Submit of the jobs kept. Timestamps are
      read as sacct prints them (local ISO time, naive): they only need to be consistent.
    - A job on k > 1 nodes whose GPUs divide evenly gets ``gpus_per_node = GPUs / k``
      (multi-node GPU jobs ask per node in practice: ``--gres=gpu:K -N k``); otherwise None.
    - Jobs are ordered by submit time (stable: file order among equal times).
    """
    if default_class not in JOB_CLASSES:
        raise InputError(f"default class must be one of {', '.join(JOB_CLASSES)}, got {default_class!r}")
    out = _Collector(source, skip_invalid)
    rows = _rows(lines, "|", quoted=False)
    header_line, header = next(rows, (1, []))
    cols = {c.lower(): i for i, c in enumerate(header) if c}
    missing = [c for c in ("JobID", "Submit", "Start", "End") if c.lower() not in cols]
    if "alloctres" not in cols and "reqtres" not in cols:
        missing.append("AllocTRES or ReqTRES")
    if missing:
        raise InputError(f"missing column(s) {', '.join(missing)}; expected the header of "
                         "`sacct -P --format=JobID,JobName,Submit,Start,End,AllocTRES,NodeList`",
                         source=source, line=header_line)
    kept: list[_SacctRow] = []
    seen: dict[str, int] = {}
    for line, fields in rows:
        if len(fields) != len(header):
            out.invalid(line, f"row has {len(fields)} fields, the header has {len(header)} "
                              "(a '|' inside a job name?)")
            continue
        get = _getter(fields, cols)
        job_id = get("jobid")
        if "." in job_id:
            continue
        try:
            if not job_id:
                raise _RowError("empty JobID")
            if job_id in seen:
                raise _RowError(f"duplicate JobID {job_id!r} (first on line {seen[job_id]})")
            row = _sacct_row(get, line, job_id, max_gpus, default_class, out)
        except _RowError as e:
            out.invalid(line, str(e))
            continue
        seen[job_id] = line
        if row is not None:
            kept.append(row)
    kept.sort(key=lambda r: r.submit)
    t0 = kept[0].submit if kept else None
    jobs = tuple(
        TraceJob(job_id=r.job_id, num_gpus=r.gpus, submit_time=(r.submit - t0).total_seconds(), work=r.run_s,
                 work_unit="seconds", model="", job_class=r.job_class, iter_time_s=1.0, line=r.line,
                 source=source, gpus_per_node=r.gpus_per_node, name=r.name, limit_s=r.limit_s)
        for r in kept
    )
    return Trace(name=name or _trace_name(source), jobs=jobs, skipped=tuple(out.skipped))


def _getter(fields: list[str], cols: Mapping[str, int]) -> Callable[[str], str]:
    def get(col: str) -> str:
        i = cols.get(col)
        return fields[i] if i is not None else ""
    return get


def _sacct_row(get: Callable[[str], str], line: int, job_id: str, max_gpus: int | None,
               default_class: str, out: _Collector) -> _SacctRow | None:
    tres = get("alloctres") or get("reqtres")
    gpus = tres_gpus(tres)
    if gpus == 0:
        out.skip(line, "no GPUs")
        return None
    submit = _timestamp(get("submit"), "Submit")
    if get("start").lower() in _NEVER:
        out.skip(line, f"never started (Start {get('start') or 'empty'})")
        return None
    start = _timestamp(get("start"), "Start")
    if get("end").lower() in _NEVER:
        out.skip(line, f"still running (End {get('end') or 'empty'})")
        return None
    end = _timestamp(get("end"), "End")
    if end < start:
        raise _RowError(f"End {get('end')} is before Start {get('start')}")
    run_s = (end - start).total_seconds()
    if run_s == 0:
        out.skip(line, "ran 0 s")
        return None
    _check_cluster(gpus, max_gpus)
    job_name = get("jobname")
    marker = _CLASS_MARKER.search(job_name)
    job_class = default_class
    if marker is not None:
        job_class = marker.group(1).upper()
        if job_class not in JOB_CLASSES:
            raise _RowError(f"unknown class {marker.group(1)!r} in job name (known: {', '.join(JOB_CLASSES)})")
    nnodes = get("nnodes")
    try:
        nodes = int(nnodes) if nnodes.isdigit() else count_hosts(get("nodelist"))
    except ValueError as e:
        raise _RowError(str(e)) from None
    per_node = gpus // nodes if nodes > 1 and gpus % nodes == 0 else None
    limit = get("timelimit").strip()
    limit_s = sacct_duration_s(limit) if limit and limit.upper() not in ("UNLIMITED", "PARTITION_LIMIT", "INVALID") \
        else None
    if limit and limit_s is None and limit.upper() not in ("UNLIMITED", "PARTITION_LIMIT", "INVALID"):
        raise _RowError(f"Timelimit {limit!r} is not [D-]HH:MM:SS")
    return _SacctRow(line=line, job_id=job_id, submit=submit, run_s=run_s, gpus=gpus, job_class=job_class,
                     gpus_per_node=per_node, name=job_name, limit_s=limit_s)


def sacct_duration_s(text: str) -> float | None:
    """sacct's `[D-]HH:MM:SS` / `MM:SS` as seconds; None when unreadable."""
    import re

    m = re.fullmatch(r"(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+)", text.strip())
    if not m:
        return None
    days, hours, minutes, seconds = (int(x) if x else 0 for x in m.groups())
    return float(((days * 24 + hours) * 60 + minutes) * 60 + seconds)


# --------------------------------------------------------------------------- files


def detect_format(first_line: str) -> Literal["philly", "sacct"] | None:
    """'sacct' for a pipe-separated header with JobID, 'philly' for a CSV header with job_id."""
    if "|" in first_line and "jobid" in (c.strip().lower() for c in first_line.split("|")):
        return "sacct"
    if "job_id" in (c.strip() for c in first_line.split(",")):
        return "philly"
    return None


def read_trace_file(path: str | Path, *, format: Literal["auto", "philly", "sacct"] = "auto",
                    max_gpus: int | None = None, skip_invalid: bool = False,
                    default_class: str = "A") -> Trace:
    """Open and parse a trace; `format` "auto" tells Philly from sacct by the header line.
    `default_class` applies to sacct only."""
    p = Path(path)
    try:
        with p.open(encoding="utf-8-sig", newline="") as f:  # -sig: a BOM from spreadsheet exports
            lines = f.read().splitlines(keepends=True)
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"cannot read the trace: {e}", source=str(p)) from e
    fmt = format
    if fmt == "auto":
        first = next((ln for ln in lines if ln.strip()), "")
        detected = detect_format(first)
        if detected is None:
            raise InputError("cannot tell the trace format from the header (expected a Sia-Philly CSV "
                             "header with job_id or a `sacct -P` header with JobID)", source=str(p), line=1)
        fmt = detected
    if fmt == "philly":
        return read_philly(lines, source=str(p), max_gpus=max_gpus, skip_invalid=skip_invalid)
    if fmt == "sacct":
        return read_sacct(lines, source=str(p), max_gpus=max_gpus, skip_invalid=skip_invalid,
                          default_class=default_class)
    raise InputError(f"unknown trace format {format!r} (auto, philly, sacct)", source=str(p))


def slurm_shape(num_gpus: int, gpus_per_node: int) -> tuple[int, int]:
    """(nodes, GPUs per node) a trace job is submitted as: one node when it fits, else the
    fewest nodes that split the job evenly (8 GPUs on 4-GPU nodes: 2 x 4; 6 GPUs: 2 x 3).
    The replay submits jobs in this shape and the event simulator places them in it, so
    no simulated figure relies on a split Slurm was never asked for. ValueError when no
    even split exists."""
    if num_gpus <= gpus_per_node:
        return 1, num_gpus
    for nodes in range(math.ceil(num_gpus / gpus_per_node), num_gpus + 1):
        if num_gpus % nodes == 0 and num_gpus // nodes <= gpus_per_node:
            return nodes, num_gpus // nodes
    raise ValueError(f"{num_gpus} GPUs cannot be split evenly over nodes of {gpus_per_node}")  # pragma: no cover
