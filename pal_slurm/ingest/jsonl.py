"""The pal JSON-lines profile format, ``pal-profile/1``: reader and writer.

One JSON object per line, one benchmark run on one GPU per object; blank lines and lines
starting with ``#`` are ignored. The node profiler and the demo write it with `dump_record`
/ `dump_jsonl`; `parse_jsonl` reads it back (schema: docs/import-formats.md).

Pure: text lines in, ProfileRecords out. `parse_file` is the convenience that opens a file.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pal_slurm.errors import InputError
from pal_slurm.ingest.records import GpuInfo, ProfileRecord, parse_path

__all__ = [
    "FORMAT",
    "DEFAULT_SOURCE",
    "dump_jsonl",
    "dump_record",
    "parse_file",
    "parse_jsonl",
    "run_key_for",
]

FORMAT = "pal-profile/1"
DEFAULT_SOURCE = "pal-profiler"


def run_key_for(run_id: str) -> str:
    """The run_key of a pal-profile/1 run: sha256 hex of "pal-profile/1\\0" + run_id."""
    return hashlib.sha256(f"{FORMAT}\0{run_id}".encode()).hexdigest()


class _Bad(Exception):
    """A schema violation at `path`; turned into InputError(file:line) by the caller."""

    def __init__(self, path: str | None, problem: str) -> None:
        super().__init__(problem if path is None else f"{path}: {problem}")


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, str):
        return json.dumps(value if len(value) <= 60 else value[:57] + "...", ensure_ascii=False)
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    return repr(value)


_MISSING = object()


def _get(obj: dict[str, Any], key: str, path: str, required: bool) -> Any:
    value = obj.get(key, _MISSING)
    if value is _MISSING or value is None:
        if required:
            raise _Bad(path, "missing" if value is _MISSING else "must not be null")
        return None
    return value


def _str(obj: dict[str, Any], key: str, path: str, *, required: bool = False, non_empty: bool = False) -> str | None:
    value = _get(obj, key, path, required)
    if value is None:
        return None
    if not isinstance(value, str):
        raise _Bad(path, f"must be a string, got {_show(value)}")
    if (non_empty or required) and not value.strip():
        raise _Bad(path, "must be a non-empty string")
    return value


def _int(obj: dict[str, Any], key: str, path: str, *, minimum: int) -> int | None:
    value = _get(obj, key, path, False)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Bad(path, f"must be an integer, got {_show(value)}")
    if isinstance(value, float):
        if not value.is_integer():
            raise _Bad(path, f"must be an integer, got {_show(value)}")
        value = int(value)
    if value < minimum:
        raise _Bad(path, f"must be at least {minimum}, got {value}")
    return value


def _float(
    obj: dict[str, Any],
    key: str,
    path: str,
    *,
    required: bool = False,
    check: Callable[[float], bool] = lambda v: True,
    expect: str = "a number",
) -> float | None:
    value = _get(obj, key, path, required)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Bad(path, f"must be {expect}, got {_show(value)}")
    number = float(value)
    if not math.isfinite(number) or not check(number):
        raise _Bad(path, f"must be {expect}, got {_show(value)}")
    return number


def _score(obj: dict[str, Any]) -> float:
    """Any JSON number: one that is not a plausible score (<= 0, or too large for a double, so
    inf) is for pal_slurm.ingest.validate to reject with FILE:LINE while the import goes on."""
    value = _get(obj, "score", "score", True)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Bad("score", f"must be a number, got {_show(value)}")
    try:
        return float(value)
    except OverflowError:  # an integer beyond a double
        return math.inf if value > 0 else -math.inf


def _non_negative(v: float) -> bool:
    return v >= 0


def _started_at(obj: dict[str, Any]) -> datetime:
    value = _get(obj, "started_at", "started_at", True)
    if not isinstance(value, str):
        raise _Bad("started_at", f"must be an ISO 8601 string, got {_show(value)}")
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise _Bad("started_at", f"{_show(value)} is not an ISO 8601 date-time") from None
    if when.tzinfo is None or when.utcoffset() is None:
        raise _Bad("started_at", f"{_show(value)} has no time zone (add 'Z' or an offset like +02:00)")
    return when.astimezone(UTC)


def _record_from_object(obj: Any, source_file: str, line: int) -> tuple[str, ProfileRecord]:
    """Validate one decoded object; return (run_id, record). Raises _Bad."""
    if not isinstance(obj, dict):
        raise _Bad(None, f"each line must be a JSON object, got {_show(obj)}")
    fmt = _get(obj, "format", "format", True)
    if fmt != FORMAT:
        raise _Bad("format", f"unsupported format {_show(fmt)} (this version reads {FORMAT!r})")
    run_id = _str(obj, "run_id", "run_id", required=True)
    gpu_obj = _get(obj, "gpu", "gpu", True)
    if not isinstance(gpu_obj, dict):
        raise _Bad("gpu", f"must be an object, got {_show(gpu_obj)}")
    gpu = GpuInfo(
        uuid=_str(gpu_obj, "uuid", "gpu.uuid", required=True),  # type: ignore[arg-type]
        node=_str(gpu_obj, "node", "gpu.node", non_empty=True),
        model=_str(gpu_obj, "model", "gpu.model", required=True),
        nvml_index=_int(gpu_obj, "nvml_index", "gpu.nvml_index", minimum=0),
        minor_number=_int(gpu_obj, "minor_number", "gpu.minor_number", minimum=0),
        pci_bus_id=_str(gpu_obj, "pci_bus_id", "gpu.pci_bus_id", non_empty=True),
        serial=_str(gpu_obj, "serial", "gpu.serial"),
        memory_mib=_int(gpu_obj, "memory_mib", "gpu.memory_mib", minimum=1),
    )
    benchmark = _str(obj, "benchmark", "benchmark", required=True)
    started_at = _started_at(obj)
    score = _score(obj)
    unit = _str(obj, "unit", "unit", required=True)
    lower_is_better = _get(obj, "lower_is_better", "lower_is_better", True)
    if not isinstance(lower_is_better, bool):
        raise _Bad("lower_is_better", f"must be true or false, got {_show(lower_is_better)}")
    source = _str(obj, "source", "source", non_empty=True) or DEFAULT_SOURCE
    nn = {"check": _non_negative, "expect": "a non-negative number"}
    record = ProfileRecord(
        run_key=run_key_for(run_id),  # type: ignore[arg-type]
        gpu=gpu,
        benchmark=benchmark,  # type: ignore[arg-type]
        started_at=started_at,
        score=score,  # type: ignore[arg-type]
        unit=unit,  # type: ignore[arg-type]
        lower_is_better=lower_is_better,
        source=source,
        source_file=source_file,
        line=line,
        duration_s=_float(obj, "duration_s", "duration_s", **nn),  # type: ignore[arg-type]
        repeats=_int(obj, "repeats", "repeats", minimum=1),
        spread=_float(obj, "spread", "spread", **nn),  # type: ignore[arg-type]
        sm_clock_mhz=_float(obj, "sm_clock_mhz", "sm_clock_mhz", **nn),  # type: ignore[arg-type]
        mem_clock_mhz=_float(obj, "mem_clock_mhz", "mem_clock_mhz", **nn),  # type: ignore[arg-type]
        power_w=_float(obj, "power_w", "power_w", **nn),  # type: ignore[arg-type]
        temperature_c=_float(obj, "temperature_c", "temperature_c"),
        throttle_reasons=_int(obj, "throttle_reasons", "throttle_reasons", minimum=0),
        driver_version=_str(obj, "driver_version", "driver_version"),
        cuda_version=_str(obj, "cuda_version", "cuda_version"),
    )
    return run_id, record  # type: ignore[return-value]


class _DuplicateKey(ValueError):
    pass


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise _DuplicateKey(f"duplicate key {key!r}")
        obj[key] = value
    return obj


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _decode(text: str) -> Any:
    return json.loads(text, object_pairs_hook=_no_duplicate_keys, parse_constant=_reject_constant)


def _csv_hint(text: str, source_file: str) -> str:
    """What to do when the file is the PAL artifact's CSV, imported as JSON lines by default."""
    if source_file.lower().endswith(".csv") or ("," in text and not text.lstrip().startswith(("{", "["))):
        return "; a CSV file? the PAL artifact's CSVs need --input-format pal-artifact (docs/import-formats.md)"
    return ""


def parse_jsonl(lines: Iterable[str], *, source_file: str) -> list[ProfileRecord]:
    """Parse pal-profile/1 JSON lines into records, in file order.

    `lines`: the file's text lines (line endings optional); `source_file`: the name used in
    records and error messages. Raises InputError(source_file:line, "<key path>: <problem>")
    on the first bad line; nothing is returned then. A file with no records gives [].
    """
    records: list[ProfileRecord] = []
    run_ids: dict[str, int] = {}
    for lineno, raw in enumerate(lines, start=1):
        text = raw.strip()
        if not text or text.startswith("#"):
            continue
        try:
            obj = _decode(text)
        except _DuplicateKey as exc:
            raise InputError(f"invalid JSON object: {exc}", source=source_file, line=lineno) from None
        except json.JSONDecodeError as exc:
            raise InputError(
                f"invalid JSON: {exc.msg} (column {exc.colno}){_csv_hint(text, source_file)}", source=source_file,
                line=lineno
            ) from None
        except (ValueError, RecursionError) as exc:
            raise InputError(f"invalid JSON: {exc}", source=source_file, line=lineno) from None
        try:
            run_id, record = _record_from_object(obj, source_file, lineno)
        except _Bad as exc:
            raise InputError(str(exc), source=source_file, line=lineno) from None
        first = run_ids.setdefault(run_id, lineno)
        if first != lineno:
            raise InputError(
                f"run_id: {_show(run_id)} already used on line {first} (run_id must be unique per run)",
                source=source_file,
                line=lineno,
            )
        records.append(record)
    return records


def parse_file(path: str | Path) -> list[ProfileRecord]:
    """Open `path` (utf-8, newline='') and parse it with `parse_jsonl`."""
    return parse_path(path, lambda stream, name: parse_jsonl(stream, source_file=name))


def _iso_utc(when: datetime) -> str:
    if when.tzinfo is None or when.utcoffset() is None:
        raise ValueError(f"started_at {when.isoformat()} has no time zone")
    text = when.astimezone(UTC).isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def _to_object(record: ProfileRecord, run_id: str) -> dict[str, Any]:
    g = record.gpu
    gpu = {
        "uuid": g.uuid,
        "node": g.node,
        "model": g.model,
        "nvml_index": g.nvml_index,
        "minor_number": g.minor_number,
        "pci_bus_id": g.pci_bus_id,
        "serial": g.serial,
        "memory_mib": g.memory_mib,
    }
    obj = {
        "format": FORMAT,
        "run_id": run_id,
        "gpu": {k: v for k, v in gpu.items() if v is not None},
        "benchmark": record.benchmark,
        "started_at": _iso_utc(record.started_at),
        "duration_s": record.duration_s,
        "score": record.score,
        "unit": record.unit,
        "lower_is_better": record.lower_is_better,
        "repeats": record.repeats,
        "spread": record.spread,
        "sm_clock_mhz": record.sm_clock_mhz,
        "mem_clock_mhz": record.mem_clock_mhz,
        "power_w": record.power_w,
        "temperature_c": record.temperature_c,
        "throttle_reasons": record.throttle_reasons,
        "driver_version": record.driver_version,
        "cuda_version": record.cuda_version,
        "source": record.source,
    }
    return {k: v for k, v in obj.items() if v is not None}


def dump_record(record: ProfileRecord, run_id: str | None = None) -> str:
    """One pal-profile/1 line (no trailing newline) for `record`.

    `run_id` defaults to `record.run_key`. Parsing the line back gives run_key
    `run_key_for(run_id)`, so a writer that wants its record's key preserved builds the
    record with run_key=run_key_for(run_id) and passes the same run_id here. None-valued
    optional fields are left out. Raises ValueError if the record would not parse back
    (e.g. a non-positive score, a naive started_at): writers never emit a bad line.
    """
    rid = record.run_key if run_id is None else run_id
    if not (math.isfinite(record.score) and record.score > 0):
        raise ValueError(f"cannot dump record {record.run_key[:12]}: score: must be a positive number, "
                         f"got {record.score!r}")
    obj = _to_object(record, rid)
    try:
        _record_from_object(obj, record.source_file, record.line)
    except _Bad as exc:
        raise ValueError(f"cannot dump record {record.run_key[:12]}: {exc}") from None
    return json.dumps(obj, ensure_ascii=False, allow_nan=False)


def dump_jsonl(records: Iterable[ProfileRecord], run_ids: Iterable[str | None] | None = None) -> str:
    """The records as a pal-profile/1 file body: one line each, newline-terminated.

    `run_ids`, if given, pairs one run_id (or None for the default) with each record.
    """
    recs = list(records)
    ids: list[str | None] = [None] * len(recs) if run_ids is None else list(run_ids)
    if len(ids) != len(recs):
        raise ValueError(f"dump_jsonl: {len(recs)} records but {len(ids)} run_ids")
    return "".join(dump_record(r, i) + "\n" for r, i in zip(recs, ids, strict=True))
