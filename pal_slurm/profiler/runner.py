"""`pal profile run`: inventory this node's GPUs, refuse busy ones, run every benchmark on the rest.

The runner reads as the procedure: scan, select, check who uses each GPU, then run the
benchmarks on each GPU (all GPUs at once for real GPUs, each GPU's benchmarks in turn),
collecting one `BenchmarkOutcome` per (GPU, benchmark, pass). It never raises for one
GPU's trouble: a GPU that fails its inventory, is busy, or whose benchmark crashes or
hangs is reported in the result and the others go on.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pal_slurm.ingest.jsonl import FORMAT, dump_record
from pal_slurm.profiler.benchmarks import BenchmarkDef
from pal_slurm.profiler.executors import BenchmarkOutcome, Executor, new_run_id
from pal_slurm.gpu.interface import (
    GpuBackend,
    GpuError,
    GpuFault,
    GpuInventory,
    GpuProcess,
    InventoryScan,
    scan_inventory,
)
from pal_slurm.gpu.choose import indices_in_range

__all__ = ["BusyGpu", "ProfileRunResult", "run_profile", "write_jsonl"]

log = logging.getLogger(__name__)

FAILURE_PREFIX = "# pal-failure "


@dataclass(frozen=True)
class BusyGpu:
    """A GPU that another process uses: not benchmarked (unless --force)."""

    index: int
    uuid: str
    processes: tuple[GpuProcess, ...]

    def describe(self) -> str:
        procs = ", ".join(f"pid {p.pid}" + (f" ({p.name})" if p.name else "") for p in self.processes)
        return f"GPU {self.index} ({self.uuid}) is in use by {procs}"


@dataclass
class ProfileRunResult:
    backend: str
    nodes: tuple[str, ...]
    scan: InventoryScan
    outcomes: list[BenchmarkOutcome] = field(default_factory=list)
    busy: list[BusyGpu] = field(default_factory=list)
    faults: list[GpuFault] = field(default_factory=list)

    @property
    def ok(self) -> list[BenchmarkOutcome]:
        return [o for o in self.outcomes if o.ok]

    @property
    def failed(self) -> list[BenchmarkOutcome]:
        return [o for o in self.outcomes if not o.ok]

    def as_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend, "nodes": list(self.nodes),
            "gpus": len(self.scan.gpus), "runs_ok": len(self.ok), "runs_failed": len(self.failed),
            "busy": [{"index": b.index, "uuid": b.uuid, "processes": [p.pid for p in b.processes],
                      "reason": b.describe()} for b in self.busy],
            "faults": [{"index": f.index, "uuid": f.uuid, "lost": f.lost, "error": f.error} for f in self.faults],
            "outcomes": [o.as_dict() for o in self.outcomes],
        }


def _check_busy(backend: GpuBackend, gpus: Sequence[GpuInventory],
                faults: list[GpuFault]) -> tuple[list[GpuInventory], list[BusyGpu]]:
    free, busy = [], []
    for g in gpus:
        try:
            procs = backend.processes(g.index)
        except GpuError as exc:
            faults.append(GpuFault(index=g.index, uuid=g.uuid, error=str(exc)))
            continue
        (busy.append(BusyGpu(g.index, g.uuid, tuple(procs))) if procs else free.append(g))
    return free, busy


def _failed(gpu: GpuInventory, bench: BenchmarkDef, error: str) -> BenchmarkOutcome:
    now = datetime.now(UTC)
    return BenchmarkOutcome(new_run_id(gpu, bench, now), gpu, bench, now, 0.0, "failed", error=error)


def run_profile(backend: GpuBackend, executor: Executor, benchmarks: Sequence[BenchmarkDef], *,
                indices: Sequence[int] | None = None, passes: int = 1, force: bool = False,
                progress: Callable[[BenchmarkOutcome], None] | None = None) -> ProfileRunResult:
    """Profile the selected GPUs (default all): `passes` times every benchmark on each."""
    if indices is not None:
        indices_in_range(indices, backend.device_count())
    scan = scan_inventory(backend)
    result = ProfileRunResult(backend=backend.name, nodes=scan.nodes, scan=scan)
    wanted = set(range(backend.device_count()) if indices is None else indices)
    result.faults = [f for f in scan.faults if f.index in wanted]
    gpus = [g for g in scan.gpus if g.index in wanted]
    free, busy = _check_busy(backend, gpus, result.faults)
    if force:
        for b in busy:
            log.warning("--force: benchmarking although %s", b.describe())
        forced = {b.index for b in busy}
        free = [g for g in gpus if g in free or g.index in forced]
    else:
        result.busy = busy
        for b in busy:
            log.warning("skipping: %s (use --force to benchmark anyway)", b.describe())
    lock = threading.Lock()

    def one_gpu(gpu: GpuInventory) -> None:
        for _ in range(passes):
            for bench in benchmarks:
                try:
                    outcome = executor.run(gpu, bench)
                except GpuError as exc:  # e.g. the GPU fell off the bus between benchmarks
                    outcome = _failed(gpu, bench, str(exc))
                with lock:
                    result.outcomes.append(outcome)
                    if progress:
                        progress(outcome)

    if executor.parallel and len(free) > 1:
        with ThreadPoolExecutor(max_workers=len(free), thread_name_prefix="bench") as pool:
            list(pool.map(one_gpu, free))
    else:
        for gpu in free:
            one_gpu(gpu)
    result.outcomes.sort(key=lambda o: (o.gpu.index, o.started_at))
    return result


def write_jsonl(path: Path, result: ProfileRunResult) -> int:
    """Write the successful runs as pal-profile/1 lines and the failures as comment lines.

    The failures (`# pal-failure {...}`) are ignored by `pal profile import` but keep the
    file a complete account of the run. Returns the number of records written.
    """
    lines = [(f"# {FORMAT} written by pal profile run at {datetime.now(UTC).isoformat()} "
              f"(backend {result.backend}, nodes {','.join(result.nodes)})")]
    records = 0
    for o in result.outcomes:
        if o.ok:
            lines.append(dump_record(o.record(), o.run_id))
            records += 1
        else:
            lines.append(FAILURE_PREFIX + json.dumps({k: v for k, v in o.as_dict().items() if k != "telemetry"},
                                                     default=str, ensure_ascii=False))
    for b in result.busy:
        lines.append(FAILURE_PREFIX + json.dumps({"uuid": b.uuid, "gpu_index": b.index, "status": "busy",
                                                  "error": b.describe()}, ensure_ascii=False))
    for f in result.faults:
        lines.append(FAILURE_PREFIX + json.dumps({"uuid": f.uuid, "gpu_index": f.index, "status": "fault",
                                                  "error": f.error}, ensure_ascii=False))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part")
    tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    tmp.replace(path)
    return records
