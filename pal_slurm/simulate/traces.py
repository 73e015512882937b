"""Job traces for the simulator: the frozen `TraceJob`s a `Trace` holds, and Sia-Philly CSVs
parsed into them. Pure: text lines in, a `Trace` out. Slurm accounting exports are read by
`pal_slurm.simulate.sacct_trace`; `pal_slurm.simulate.trace_files.read_trace_file` opens a
file of either format.

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

**Slurm accounting** (``sacct -P`` or ``-p``, with a header line): see
`pal_slurm.simulate.sacct_trace.read_sacct`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from pal_slurm.errors import InputError
from pal_slurm.placement.model import JOB_CLASSES
from pal_slurm.simulate.trace_rows import (
    RowCollector,
    RowError,
    check_cluster,
    gpu_count,
    number,
    read_rows,
    trace_name,
)

__all__ = [
    "JOB_CLASSES",
    "MODEL_CLASS",
    "MODEL_ITER_TIME_S",
    "PHILLY_COLUMNS",
    "Trace",
    "TraceJob",
    "read_philly",
    "slurm_shape",
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
    out = RowCollector(source, skip_invalid)
    rows = read_rows(lines, ",")
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
                raise RowError(f"duplicate job_id {job.job_id!r} (first on line {seen[job.job_id]})")
        except RowError as e:
            out.invalid(line, str(e))
            continue
        seen[job.job_id] = line
        jobs.append(job)
    return Trace(name=name or trace_name(source), jobs=tuple(jobs), skipped=tuple(out.skipped))


def _philly_job(fields: list[str], index: Mapping[str, int], width: int, line: int, source: str,
                max_gpus: int | None) -> TraceJob:
    if len(fields) != width:
        raise RowError(f"row has {len(fields)} fields, the header has {width}")
    get = {c: fields[index[c]] for c in PHILLY_COLUMNS}
    if not get["job_id"]:
        raise RowError("empty job_id")
    num_gpus = gpu_count(get["num_gpus"], "num_gpus")
    submit = number(get["submit_time"], "submit_time")
    if submit < 0:
        raise RowError(f"submit_time must not be negative, got {get['submit_time']}")
    duration = number(get["duration"], "duration")
    if duration <= 0:
        raise RowError(f"duration must be positive, got {get['duration']}")
    model = get["model"]
    if model not in MODEL_CLASS:
        raise RowError(f"unknown model {model!r} (known, case-sensitive: {', '.join(sorted(MODEL_CLASS))})")
    check_cluster(num_gpus, max_gpus)
    return TraceJob(job_id=get["job_id"], num_gpus=num_gpus, submit_time=submit, work=duration,
                    work_unit="iterations", model=model, job_class=MODEL_CLASS[model],
                    iter_time_s=MODEL_ITER_TIME_S[model], line=line, source=source)


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
