"""The one record every import format is parsed into before it touches the database.

Parsers are pure (text in, records out); only `pal_slurm.db.measurement_store` writes them.
`parse_path` is the one way a format's `parse_file` opens its file.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TextIO

from pal_slurm.errors import InputError
from pal_slurm.slurm.gresconf import name_problem


@dataclass(frozen=True, slots=True)
class GpuInfo:
    """What a profile file tells about the GPU a run was measured on (all but uuid optional).

    `provisional`: the file names the GPU only by its slot (node + device index, e.g. the
    artifact's ``c002-4-1``), not by a real UUID. `uuid` is then the slot key that
    `slot_key` builds, and the store resolves it to the GPU known at that slot (or keeps it
    until the real UUID is learned): one physical GPU is one row, whatever names it.
    """

    uuid: str
    node: str | None = None
    model: str | None = None
    nvml_index: int | None = None
    minor_number: int | None = None
    pci_bus_id: str | None = None
    serial: str | None = None
    memory_mib: int | None = None
    provisional: bool = False


SLOT_PREFIX = "slot:"


def slot_key(node: str, device: int) -> str:
    """The identity of a GPU known only by its slot: ``slot:<node>:<device>``.

    The prefix keeps it apart from every NVML UUID (``GPU-...``, ``MIG-...``); it is what
    `pal gpus` shows until the GPU's real UUID is imported.
    """
    return f"{SLOT_PREFIX}{node}:{device}"


@dataclass(frozen=True, slots=True)
class ProfileRecord:
    """One benchmark run on one GPU.

    `run_key` makes imports idempotent: the same run imported twice has the same key,
    so the second import adds nothing. `source`/`line` point back at the input for errors.
    """

    run_key: str
    gpu: GpuInfo
    benchmark: str
    started_at: datetime  # timezone-aware, UTC
    score: float
    unit: str
    lower_is_better: bool
    source: str  # e.g. "pal-artifact", "pal-profiler"
    source_file: str
    line: int
    duration_s: float | None = None
    repeats: int | None = None
    spread: float | None = None  # relative spread of the repeats (e.g. IQR / median)
    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    power_w: float | None = None
    temperature_c: float | None = None
    throttle_reasons: int | None = None  # NVML clocks-event-reasons bitmask (OR over the run)
    driver_version: str | None = None
    cuda_version: str | None = None


def parse_path(path: str | Path, parse: Callable[[TextIO, str], list[ProfileRecord]]) -> list[ProfileRecord]:
    """Open `path` (utf-8, newline='') and parse the stream with `parse(stream, name)`: the one
    way every format's `parse_file` opens a file, each failure to read it an InputError naming it."""
    path = Path(path)
    name = str(path)
    try:
        with path.open("r", encoding="utf-8", newline="") as stream:
            return parse(stream, name)
    except FileNotFoundError:
        raise InputError("file not found", source=name) from None
    except IsADirectoryError:
        raise InputError("is a directory, not a file", source=name) from None
    except UnicodeDecodeError as exc:
        raise InputError(f"not valid UTF-8 text ({exc.reason} at byte {exc.start})", source=name) from None
    except OSError as exc:
        raise InputError(f"cannot read file: {exc.strerror or exc}", source=name) from None


def check_names(records: Sequence[ProfileRecord]) -> None:
    """Every node and GPU model name the records carry is one that may reach Slurm's
    configuration (`gresconf.name_problem`, the rule `pal slurm gres-conf --inventory` applies):
    `pal slurm gres-conf` writes the stored names into gres.conf and slurm.conf, so a name such
    as `gpu 01 Gres=evil` or `gpu[01-16]` is refused here, with FILE:LINE, before it is stored."""
    checked: set[tuple[str | None, str | None]] = set()
    for r in records:
        names = (r.gpu.node, r.gpu.model)
        if names in checked:
            continue
        if r.gpu.node is not None and (problem := name_problem(r.gpu.node, "node")) is not None:
            raise InputError(f"GPU {r.gpu.uuid}: {problem}", source=r.source_file, line=r.line)
        if r.gpu.model is not None and (problem := name_problem(r.gpu.model, "model")) is not None:
            raise InputError(f"GPU {r.gpu.uuid}: {problem}", source=r.source_file, line=r.line)
        checked.add(names)
