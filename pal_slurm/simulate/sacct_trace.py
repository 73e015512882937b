"""Slurm accounting exports (``sacct -P`` or ``-p``, with a header line) parsed into a trace of
GPU jobs (see `read_sacct`), and the readers of sacct's fields the job-history import shares:
GPUs in a TRES string, hosts in a hostlist, a ``[D-]HH:MM:SS`` duration. Pure: text lines in,
a `Trace` out.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from pal_slurm.errors import InputError
from pal_slurm.placement.model import JOB_CLASSES
from pal_slurm.simulate.trace_rows import RowCollector, RowError, check_cluster, read_rows, trace_name
from pal_slurm.simulate.traces import Trace, TraceJob

__all__ = ["count_hosts", "read_sacct", "sacct_duration_s", "tres_gpus"]

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
        raise RowError(f"{column} {value!r} is not a timestamp like 2026-11-30T07:00:00") from None


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
    out = RowCollector(source, skip_invalid)
    rows = read_rows(lines, "|", quoted=False)
    header_line, header = next(rows, (1, []))
    cols = _columns(header, source, header_line)
    kept = _kept_rows(rows, len(header), cols, max_gpus, default_class, out)
    kept.sort(key=lambda r: r.submit)
    t0 = kept[0].submit if kept else None
    jobs = tuple(
        TraceJob(job_id=r.job_id, num_gpus=r.gpus, submit_time=(r.submit - t0).total_seconds(), work=r.run_s,
                 work_unit="seconds", model="", job_class=r.job_class, iter_time_s=1.0, line=r.line,
                 source=source, gpus_per_node=r.gpus_per_node, name=r.name, limit_s=r.limit_s)
        for r in kept
    )
    return Trace(name=name or trace_name(source), jobs=jobs, skipped=tuple(out.skipped))


def _columns(header: list[str], source: str, header_line: int) -> dict[str, int]:
    """Column index by lower-cased name; InputError naming the required columns the header lacks."""
    cols = {c.lower(): i for i, c in enumerate(header) if c}
    missing = [c for c in ("JobID", "Submit", "Start", "End") if c.lower() not in cols]
    if "alloctres" not in cols and "reqtres" not in cols:
        missing.append("AllocTRES or ReqTRES")
    if missing:
        raise InputError(f"missing column(s) {', '.join(missing)}; expected the header of "
                         "`sacct -P --format=JobID,JobName,Submit,Start,End,AllocTRES,NodeList`",
                         source=source, line=header_line)
    return cols


def _kept_rows(rows: Iterable[tuple[int, list[str]]], width: int, cols: Mapping[str, int], max_gpus: int | None,
               default_class: str, out: RowCollector) -> list[_SacctRow]:
    """The rows that are GPU jobs, in file order: job steps dropped, bad rows reported to `out`."""
    kept: list[_SacctRow] = []
    seen: dict[str, int] = {}
    for line, fields in rows:
        if len(fields) != width:
            out.invalid(line, f"row has {len(fields)} fields, the header has {width} "
                              "(a '|' inside a job name?)")
            continue
        get = _getter(fields, cols)
        job_id = get("jobid")
        if "." in job_id:
            continue
        try:
            if not job_id:
                raise RowError("empty JobID")
            if job_id in seen:
                raise RowError(f"duplicate JobID {job_id!r} (first on line {seen[job_id]})")
            row = _sacct_row(get, line, job_id, max_gpus, default_class, out)
        except RowError as e:
            out.invalid(line, str(e))
            continue
        seen[job_id] = line
        if row is not None:
            kept.append(row)
    return kept


def _getter(fields: list[str], cols: Mapping[str, int]) -> Callable[[str], str]:
    def get(col: str) -> str:
        i = cols.get(col)
        return fields[i] if i is not None else ""
    return get


def _sacct_row(get: Callable[[str], str], line: int, job_id: str, max_gpus: int | None,
               default_class: str, out: RowCollector) -> _SacctRow | None:
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
        raise RowError(f"End {get('end')} is before Start {get('start')}")
    run_s = (end - start).total_seconds()
    if run_s == 0:
        out.skip(line, "ran 0 s")
        return None
    check_cluster(gpus, max_gpus)
    job_name = get("jobname")
    marker = _CLASS_MARKER.search(job_name)
    job_class = default_class
    if marker is not None:
        job_class = marker.group(1).upper()
        if job_class not in JOB_CLASSES:
            raise RowError(f"unknown class {marker.group(1)!r} in job name (known: {', '.join(JOB_CLASSES)})")
    nnodes = get("nnodes")
    try:
        nodes = int(nnodes) if nnodes.isdigit() else count_hosts(get("nodelist"))
    except ValueError as e:
        raise RowError(str(e)) from None
    per_node = gpus // nodes if nodes > 1 and gpus % nodes == 0 else None
    limit = get("timelimit").strip()
    limit_s = sacct_duration_s(limit) if limit and limit.upper() not in ("UNLIMITED", "PARTITION_LIMIT", "INVALID") \
        else None
    if limit and limit_s is None and limit.upper() not in ("UNLIMITED", "PARTITION_LIMIT", "INVALID"):
        raise RowError(f"Timelimit {limit!r} is not [D-]HH:MM:SS")
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
