"""Parser for the PAL artifact's aggregated per-run CSVs (TACC Longhorn V100 measurements).

The data comes from the PAL artifact (SC'24; repository hal-uw/blox-pal, branch
``artifact``), MIT licensed. Files: ``variability/longhorn/{resnet,bert,pagerank,sgemm}-
longhorn-agg.csv``. Their headers differ, so every column is found by NAME, never by
position (see docs/import-formats.md for the full mapping).

Pure: text lines in, ProfileRecords out. `parse_file` is the convenience that opens a file.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pal_slurm.errors import InputError
from pal_slurm.ingest.artifact_fields import optional_int, optional_number, refuse_negative, start_time
from pal_slurm.ingest.records import GpuInfo, ProfileRecord, parse_path, slot_key

__all__ = [
    "SOURCE",
    "REQUIRED_COLUMNS",
    "artifact_run_key",
    "benchmark_from_filename",
    "canonical_node",
    "parse_artifact_csv",
    "parse_file",
]

SOURCE = "pal-artifact"
REQUIRED_COLUMNS = ("uuid", "perf", "ts")
RUN_KEY_NAMESPACE = "pal-artifact-csv/1"

def artifact_run_key(benchmark: str, fields: list[str], occurrence: int) -> str:
    """sha256 hex of the canonical JSON [namespace, benchmark, raw fields, occurrence (1-based)]."""
    canonical = json.dumps(
        [RUN_KEY_NAMESPACE, benchmark, list(fields), occurrence], ensure_ascii=False, separators=(",", ":")
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def benchmark_from_filename(path: str | Path) -> str:
    """'resnet-longhorn-agg.csv' -> 'resnet' (the text before the first '-')."""
    return Path(path).name.split("-", 1)[0].split(".", 1)[0]


def parse_file(
    path: str | Path,
    *,
    benchmark: str | None = None,
    model: str,
    unit: str = "ms",
    notes: list[str] | None = None,
) -> list[ProfileRecord]:
    """Open `path` (utf-8, newline='') and parse it; `benchmark` defaults to the file-name prefix."""
    path = Path(path)
    bench = benchmark if benchmark is not None else benchmark_from_filename(path)
    return parse_path(path, lambda stream, name: parse_artifact_csv(stream, source_file=name, benchmark=bench,
                                                                    model=model, unit=unit, notes=notes))


class _Columns:
    """Indices of the columns the parser uses, found by name in the header."""

    __slots__ = (
        "uuid", "perf", "ts", "cab_node", "cabinet", "node", "freq", "memfreq",
        "pwr", "temp", "reps", "train_time", "device", "device_name", "memfreq_name",
    )  # fmt: skip

    def __init__(self, header: list[str], src: str) -> None:
        names = [h.strip() for h in header]
        if names:
            names[0] = names[0].lstrip("\ufeff").strip()
        index: dict[str, int] = {}
        dupes: set[str] = set()
        for i, n in enumerate(names):
            if n in index:
                dupes.add(n)
            else:
                index[n] = i
        for name in REQUIRED_COLUMNS:
            if name not in index:
                raise InputError(
                    f"missing required column {name!r} (header has: {', '.join(repr(n) for n in names)})",
                    source=src,
                    line=1,
                )

        def col(*candidates: str) -> int | None:
            for c in candidates:
                if c in index:
                    if c in dupes:
                        raise InputError(f"column {c!r} appears more than once in the header", source=src, line=1)
                    return index[c]
            return None

        self.uuid = col("uuid")
        self.perf = col("perf")
        self.ts = col("ts")
        self.cab_node = col("cab-node")
        self.cabinet = col("cabinet")
        self.node = col("node")
        self.freq = col("freq")
        self.memfreq = col("memfreq", "median_memfreq")
        self.pwr = col("pwr")
        self.temp = col("temp")
        self.reps = col("reps")
        self.train_time = col("train_time")
        self.device = col("device", "dev_id")
        self.device_name = names[self.device] if self.device is not None else "device"
        self.memfreq_name = names[self.memfreq] if self.memfreq is not None else "memfreq"


_CAB_NODE = re.compile(r"^(.*\S)-0*([0-9]+)$")
_SLOT_NAME = re.compile(r"^(.*\S)-0*([0-9]+)-0*([0-9]+)$")


def canonical_node(cabinet: str, node: int) -> str:
    """'c002' + 4 -> 'c002-004': TACC's host name for cabinet c002, node 4.

    The files write the node number as 4 or 004; the canonical name zero-pads it to three
    digits (wider numbers are kept whole), so both name one node.
    """
    return f"{cabinet.strip()}-{node:03d}"


def _node_name(c: _Columns, row: list[str], src: str, line: int) -> str | None:
    if c.cabinet is not None and c.node is not None:
        cabinet = row[c.cabinet].strip()
        node_raw = row[c.node].strip()
        if cabinet and node_raw and not cabinet.startswith("-"):
            try:
                node = int(node_raw)
            except ValueError:
                raise InputError(f"column 'node': {node_raw!r} is not an integer", source=src, line=line) from None
            if node >= 0:
                return canonical_node(cabinet, node)
    if c.cab_node is not None:
        value = row[c.cab_node].strip()
        if value and value != "-1":
            m = _CAB_NODE.match(value)
            return canonical_node(m.group(1), int(m.group(2))) if m else value
    return None


def _slot_named(uuid: str, node: str | None, device: int | None) -> bool:
    """True when the uuid column holds the slot's name (``c002-4-1``), not a GPU UUID."""
    if node is None or device is None:
        return False
    m = _SLOT_NAME.match(uuid)
    return m is not None and canonical_node(m.group(1), int(m.group(2))) == node and int(m.group(3)) == device


def _process_local_device(records: list[ProfileRecord]) -> tuple[str, int] | None:
    """(node, GPUs there) when the device column cannot be the GPU's slot, else None.

    sgemm's ``dev_id`` is 0 on every row while each node has four GPUs: it is the CUDA
    device ordinal inside a job that saw one GPU. A column with one value on every row,
    while some node shows several GPUs, says nothing about the slot.
    """
    real = [r for r in records if not r.gpu.provisional]  # a slot-named row's device is in its name
    indices = {r.gpu.nvml_index for r in real}
    if len(indices) != 1 or None in indices:
        return None
    per_node: dict[str, set[str]] = {}
    for r in real:
        if r.gpu.node is not None:
            per_node.setdefault(r.gpu.node, set()).add(r.gpu.uuid)
    busiest = max(per_node.items(), key=lambda kv: (len(kv[1]), kv[0]), default=None)
    if busiest is None or len(busiest[1]) < 2:
        return None
    return busiest[0], len(busiest[1])


def parse_artifact_csv(
    lines: Iterable[str],
    *,
    source_file: str,
    benchmark: str,
    model: str,
    unit: str = "ms",
    notes: list[str] | None = None,
) -> list[ProfileRecord]:
    """Parse one PAL artifact aggregated CSV into records (one per data row, duplicates kept).

    `lines`: the file's text lines (with or without line endings, e.g. a stream opened with
    newline=''); `source_file`: the name used in records and error messages; `benchmark`,
    `model` (GPU model) and `unit` (of `perf`) are not in the file and come from the caller.
    Raises InputError(source_file:line) on the first bad row; nothing is returned then.
    A perf value that is a number but not a plausible one (NaN, inf, <= 0) is returned as
    is: `pal_slurm.ingest.validate` rejects it with FILE:LINE and the import goes on.
    `notes`, when given, receives one line per thing the caller should tell the user.
    """
    src = source_file
    reader = csv.reader(lines)
    try:
        header = next(reader, None)
    except csv.Error as exc:
        raise InputError(f"malformed CSV: {exc}", source=src, line=reader.line_num or 1) from None
    if header is None:
        raise InputError("no data rows (the file is empty)", source=src, line=1)
    rows = _Rows(_Columns(header, src), src, benchmark=benchmark, model=model, unit=unit)
    records = [rows.record(row, line) for line, row in _data_rows(reader, len(header), src)]
    if not records:
        raise InputError("no data rows (only a header)", source=src, line=1)
    return _without_process_local_device(records, rows.c.device_name, src, notes)


def _data_rows(reader: Any, width: int, src: str) -> Iterator[tuple[int, list[str]]]:
    """(the physical line a row starts on, the row) of every data row after the header; blank
    lines are skipped, a row of another width than the header's is refused."""
    last_line = reader.line_num
    while True:
        try:
            row = next(reader, None)
        except csv.Error as exc:
            raise InputError(f"malformed CSV: {exc}", source=src, line=last_line + 1) from None
        if row is None:
            return
        line = last_line + 1  # physical line where this record starts
        last_line = reader.line_num
        if not row:  # blank line
            continue
        if len(row) != width:
            raise InputError(f"expected {width} fields (as in the header), got {len(row)}", source=src, line=line)
        yield line, row


@dataclass
class _Rows:
    """One file's rows to records: its columns, what the caller gives (benchmark, model, unit),
    how often each identical row came before (its run key) and one GpuInfo per GPU and slot."""

    c: _Columns
    src: str
    benchmark: str
    model: str
    unit: str
    seen: dict[tuple[str, ...], int] = field(default_factory=dict)
    gpus: dict[tuple[str, str | None, int | None], GpuInfo] = field(default_factory=dict)

    def record(self, row: list[str], line: int) -> ProfileRecord:
        """One data row as a record; InputError(FILE:LINE) on a bad field."""
        c, src = self.c, self.src
        uuid = row[c.uuid].strip()
        if not uuid:
            raise InputError("column 'uuid': empty", source=src, line=line)
        perf_raw = row[c.perf]
        if not perf_raw.strip():
            raise InputError("column 'perf': empty", source=src, line=line)
        try:  # NaN, inf and values <= 0 are kept: import validation rejects them with FILE:LINE
            perf = float(perf_raw)
        except ValueError:
            raise InputError(f"column 'perf': {perf_raw!r} is not a number", source=src, line=line) from None
        started_at = start_time(row[c.ts], src, line)

        key_fields = tuple(row)
        occurrence = self.seen.get(key_fields, 0) + 1
        self.seen[key_fields] = occurrence
        run_key = artifact_run_key(self.benchmark, row, occurrence)

        nvml_index = None
        if c.device is not None:
            nvml_index = optional_int(c.device_name, row[c.device], src, line)
            if nvml_index is not None and nvml_index < 0:
                nvml_index = None
        repeats = None
        if c.reps is not None:
            repeats = optional_int("reps", row[c.reps], src, line)
            if repeats is not None and repeats < 1:
                raise InputError(f"column 'reps': must be at least 1, got {row[c.reps].strip()}", source=src, line=line)

        def opt(index: int | None, column: str, non_negative: bool = True) -> float | None:
            if index is None:
                return None
            raw = row[index]
            value = optional_number(column, raw, src, line)
            return refuse_negative(column, value, raw, src, line) if non_negative else value

        gpu = self._gpu(uuid, _node_name(c, row, src, line), nvml_index)
        return ProfileRecord(
            run_key=run_key,
            gpu=gpu,
            benchmark=self.benchmark,
            started_at=started_at,
            score=perf,
            unit=self.unit,
            lower_is_better=True,
            source=SOURCE,
            source_file=src,
            line=line,
            duration_s=opt(c.train_time, "train_time"),
            repeats=repeats,
            sm_clock_mhz=opt(c.freq, "freq"),
            mem_clock_mhz=opt(c.memfreq, c.memfreq_name),
            power_w=opt(c.pwr, "pwr"),
            temperature_c=opt(c.temp, "temp", non_negative=False),
        )

    def _gpu(self, uuid: str, node: str | None, nvml_index: int | None) -> GpuInfo:
        """One GpuInfo per GPU and slot, shared by its rows (a slot-named row's: its slot identity)."""
        gpu = self.gpus.get((uuid, node, nvml_index))
        if gpu is None:
            if _slot_named(uuid, node, nvml_index):
                gpu = GpuInfo(uuid=slot_key(node, nvml_index), node=node, model=self.model,  # type: ignore[arg-type]
                              nvml_index=nvml_index, provisional=True)
            else:
                gpu = GpuInfo(uuid=uuid, node=node, model=self.model, nvml_index=nvml_index)
            self.gpus[(uuid, node, nvml_index)] = gpu
        return gpu


def _without_process_local_device(records: list[ProfileRecord], device_name: str, src: str,
                                  notes: list[str] | None) -> list[ProfileRecord]:
    """The records as they are, or, when the device column is the job's CUDA ordinal rather
    than the GPU's slot (:func:`_process_local_device`), with the UUID-named GPUs' slot dropped
    (and a note saying so)."""
    local = _process_local_device(records)
    if local is None:
        return records
    if notes is not None:
        ordinal = next(r.gpu.nvml_index for r in records if not r.gpu.provisional)
        notes.append(f"{src}: column {device_name!r} is {ordinal} on every row while node "
                     f"{local[0]} has {local[1]} GPUs: it is the job's CUDA device ordinal, not the GPU's "
                     f"slot; ignored (GPUs are known by UUID and node)")
    unslotted = {id(r.gpu): dataclasses.replace(r.gpu, nvml_index=None) for r in records if not r.gpu.provisional}
    return [r if r.gpu.provisional else dataclasses.replace(r, gpu=unslotted[id(r.gpu)]) for r in records]
