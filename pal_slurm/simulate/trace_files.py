"""Opening a trace file: the one convenience of the trace readers that does I/O. It reads the
file's lines and hands them to the parser of its format (`traces.read_philly`,
`sacct_trace.read_sacct`), telling the two apart by the header line unless told.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pal_slurm.errors import InputError
from pal_slurm.simulate.sacct_trace import read_sacct
from pal_slurm.simulate.traces import Trace, read_philly

__all__ = ["detect_format", "read_trace_file"]


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
