"""The import use case: profile files parsed whole, then stored, one transaction per file.

The CLI (`pal profile import`), the profiler, the demo and tests call these; each opens what it
needs and returns plain data. The formats are docs/import-formats.md.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from sqlalchemy import Engine

from pal_slurm.db.engine import session_scope
from pal_slurm.db.import_result import ImportResult
from pal_slurm.db.measurement_store import import_records
from pal_slurm.db.migrate import require_current
from pal_slurm.errors import InputError
from pal_slurm.ingest.records import ProfileRecord, check_names
from pal_slurm.slurm.gresconf import name_problem

log = logging.getLogger(__name__)

ImportFormat = Literal["pal-artifact", "jsonl"]


def read_profile_file(path: Path, fmt: ImportFormat, *, benchmark: str | None, model: str | None,
                      unit: str | None, notes: list[str] | None = None) -> list[ProfileRecord]:
    """Parse one file (no database): the artifact CSV needs --benchmark and --model. Node and
    model names are checked for what reaches Slurm's configuration (`check_names`).

    `notes` receives what the parser wants the user told (e.g. a device column it ignores)."""
    if fmt == "pal-artifact":
        from pal_slurm.ingest.artifact_csv import parse_file as parse_artifact_file

        if not benchmark or not model:
            raise InputError("--input-format pal-artifact needs --benchmark NAME and --model NAME (the CSV has neither)")
        if (problem := name_problem(model, "model")) is not None:
            raise InputError(f"--model: {problem}")
        records = parse_artifact_file(path, benchmark=benchmark, model=model, unit=unit or "ms", notes=notes)
    elif fmt == "jsonl":
        from pal_slurm.ingest.jsonl import parse_file as parse_jsonl_file

        if benchmark or model:
            raise InputError("--benchmark/--model are for --input-format pal-artifact; JSON-lines files carry both")
        records = parse_jsonl_file(path)
    else:
        raise InputError(f"unknown format {fmt!r}")
    check_names(records)
    return records


@dataclass(frozen=True)
class FileImport:
    path: str
    result: ImportResult


def import_files(engine: Engine, paths: Sequence[Path], fmt: ImportFormat, *, benchmark: str | None = None,
                 model: str | None = None, unit: str | None = None, max_factor: float | None = None,
                 keep_suspect: bool = False, allow_move: bool = False) -> list[FileImport]:
    """Each file is parsed whole first, then written in its own transaction (all or nothing).

    A suspect score is left out (or quarantined with `keep_suspect`) and the import goes on;
    `max_factor` defaults to pal_slurm.ingest.validate.DEFAULT_MAX_FACTOR. What the user should
    hear about each file is in its result's `warnings` ("FILE:LINE: reason"). `allow_move`: a GPU
    recorded on another node than a file says is moved there, not refused (an admin's decision;
    pal_slurm.db.measurement_store.import_records)."""
    from pal_slurm.ingest.validate import DEFAULT_MAX_FACTOR

    require_current(engine)
    done = []
    for path in paths:
        notes: list[str] = []
        records = read_profile_file(path, fmt, benchmark=benchmark, model=model, unit=unit, notes=notes)
        if not records:  # "0 runs" would read as an import that worked
            raise InputError("no runs in the file (it is empty, or only blank lines): nothing imported",
                             source=str(path))
        with session_scope(engine) as session:
            result = import_records(session, records, keep_suspect=keep_suspect,
                                    max_factor=DEFAULT_MAX_FACTOR if max_factor is None else max_factor,
                                    allow_move=allow_move)
        result.warnings[:0] = notes
        log.info("%s: %d runs read, %d added, %d already present", path, result.records, result.added,
                 result.already_present)
        done.append(FileImport(str(path), result))
    return done


def identity_summary(engine: Engine) -> dict[str, int]:
    """How the stored GPUs are identified (pal_slurm.db.gpu_identity.IdentityCounts), for the import summary."""
    from pal_slurm.db.gpu_identity import identity_counts

    with session_scope(engine) as session:
        return identity_counts(session).as_dict()


def import_records_now(engine: Engine, records: Sequence[ProfileRecord]) -> ImportResult:
    check_names(records)
    require_current(engine)
    with session_scope(engine) as session:
        return import_records(session, records)
