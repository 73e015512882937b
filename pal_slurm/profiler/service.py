"""The use cases behind `pal profile inventory` and `pal profile run`: open, measure, write, store.

Results are written to a pal-profile/1 file before the database is touched, so a
database that is down loses nothing: the error names the file to import later.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from pal_slurm.errors import PalError
from pal_slurm.profiler.benchmarks import BenchmarkDef, program_dir
from pal_slurm.profiler.executors import (
    BenchmarkOutcome,
    Executor,
    RunSettings,
    SimExecutor,
    SubprocessExecutor,
)
from pal_slurm.gpu.interface import GpuBackend, GpuError, InventoryScan, scan_inventory
from pal_slurm.profiler.inventory import InventoryResult
from pal_slurm.profiler.runner import ProfileRunResult, run_profile, write_jsonl
from pal_slurm.gpu.choose import (
    BackendChoice,
    NvidiaProbe,
    SimOptions,
    choose_backend,
    open_backend,
    probe_nvidia,
)

__all__ = ["BackendRequest", "InventoryOutcome", "RunOutcome", "RunRequest", "inventory_node", "node_name",
           "open_requested_backend", "profile_node"]

log = logging.getLogger(__name__)


def node_name() -> str:
    """This node as Slurm calls it (SLURMD_NODENAME inside a job), else the short host name."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


@dataclass(frozen=True)
class BackendRequest:
    backend: BackendChoice = "auto"
    force_sim: bool = False
    sim: SimOptions = field(default_factory=SimOptions)
    node: str | None = None  # None: node_name()


def open_requested_backend(req: BackendRequest, *, probe: NvidiaProbe | None = None,
                           nvml_module: Any = None) -> GpuBackend:
    choice = choose_backend(req.backend, probe if probe is not None else probe_nvidia(), force_sim=req.force_sim)
    return open_backend(choice, node=req.node or node_name(), sim=req.sim, nvml_module=nvml_module)


def _store_error(exc: Exception) -> str:
    if isinstance(exc, SQLAlchemyError):
        from pal_slurm.db.engine import describe_error

        return f"database error: {describe_error(exc)}"
    return str(exc)


@dataclass(frozen=True)
class InventoryOutcome:
    scan: InventoryScan
    stored: InventoryResult | None
    db_error: str | None


def inventory_node(backend: GpuBackend, engine_factory: Callable[[], Engine] | None, *,
                   allow_move: bool = False) -> InventoryOutcome:
    """Scan the backend; store the scan unless engine_factory is None (`allow_move`: an admin
    moves GPUs recorded on another node here, pal_slurm.profiler.inventory)."""
    from pal_slurm.profiler.run_store import save_inventory

    scan = scan_inventory(backend)
    if engine_factory is None:
        return InventoryOutcome(scan, None, None)
    try:
        return InventoryOutcome(scan, save_inventory(engine_factory(), scan, allow_move=allow_move), None)
    except (PalError, SQLAlchemyError) as exc:
        return InventoryOutcome(scan, None, _store_error(exc))


@dataclass(frozen=True)
class RunRequest:
    benchmarks: tuple[BenchmarkDef, ...]
    settings: RunSettings = field(default_factory=RunSettings)
    indices: tuple[int, ...] | None = None
    #: the GPUs by device minor number (/dev/nvidiaN, what Slurm's gres.conf and a quarantined slot
    #: name), mapped to the backend's indices on the node: inside a job whose devices are
    #: constrained NVML numbers the visible GPUs from 0, while the minor stays the slot's
    minors: tuple[int, ...] | None = None
    passes: int = 1
    force: bool = False
    output: Path | None = None  # None: <data_dir>/profiles/<node>-<time>.jsonl
    program_dir: Path | None = None
    sim_start: datetime | None = None  # simulated backend: virtual start time (default now)


@dataclass(frozen=True)
class RunOutcome:
    result: ProfileRunResult
    output: Path
    records: int
    saved: Any  # pal_slurm.profiler.run_store.SavedRun | None
    db_error: str | None


def make_executor(backend: GpuBackend, req: RunRequest) -> Executor:
    if backend.name == "sim":
        return SimExecutor(backend, req.sim_start or datetime.now(UTC))
    return SubprocessExecutor(backend, program_dir(req.program_dir), req.settings)


def default_output(data_dir: Path, nodes: tuple[str, ...], now: datetime | None = None) -> Path:
    label = nodes[0] if len(nodes) == 1 else f"{nodes[0]}-{nodes[-1]}" if nodes else "none"
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
    return data_dir / "profiles" / f"{label}-{stamp}.jsonl"


def indices_of_minors(backend: GpuBackend, minors: tuple[int, ...]) -> tuple[int, ...]:
    """The backend indices of the GPUs with these device minor numbers; PalError naming the minors
    this node has when one is not among them."""
    by_minor: dict[int, int] = {}
    for index in range(backend.device_count()):
        try:
            minor = backend.inventory(index).minor_number
        except GpuError:
            continue  # a GPU that cannot be read is not the one asked for, or fails in the run itself
        if minor is not None:
            by_minor.setdefault(minor, index)
    missing = [m for m in minors if m not in by_minor]
    if missing:
        raise PalError(f"--minors: no GPU with minor number {', '.join(map(str, missing))} on this node (minors: "
                       f"{', '.join(map(str, sorted(by_minor))) or 'none readable'})")
    return tuple(by_minor[m] for m in minors)


def profile_node(backend: GpuBackend, req: RunRequest, *, data_dir: Path,
                 engine_factory: Callable[[], Engine] | None,
                 progress: Callable[[BenchmarkOutcome], None] | None = None) -> RunOutcome:
    """Run the benchmarks, write the file, then store everything (unless engine_factory is None)."""
    from pal_slurm.profiler.run_store import save_run

    if req.passes < 1:
        raise PalError(f"--passes must be >= 1, got {req.passes}")
    executor = make_executor(backend, req)
    indices = req.indices if req.minors is None else indices_of_minors(backend, req.minors)
    result = run_profile(backend, executor, req.benchmarks, indices=indices, passes=req.passes, force=req.force,
                         progress=progress)
    output = req.output or default_output(data_dir, result.nodes)
    try:
        records = write_jsonl(output, result)
    except OSError as exc:
        raise PalError(f"cannot write the results to {output}: {exc.strerror or exc}") from exc
    if engine_factory is None:
        return RunOutcome(result, output, records, None, None)
    try:
        saved = save_run(engine_factory(), result)
    except (PalError, SQLAlchemyError) as exc:
        log.error("results kept in %s but not stored: %s", output, exc)
        return RunOutcome(result, output, records, None, _store_error(exc))
    return RunOutcome(result, output, records, saved, None)
