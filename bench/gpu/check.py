#!/usr/bin/env python3
"""The profiler on a real GPU machine: inventory, every benchmark, scores, clocks, throttle reasons.

Run by bench/gpu/check.sh (which finds Python and the packages). Needs only the standard
library plus whatever of nvidia-ml-py / cupy / torch the machine has: pal_slurm's
profiler core (GPU interface, runner, benchmark programs) imports nothing else, so this
works where the database and CLI dependencies are not installed. Telemetry comes from
NVML (nvidia-ml-py), or from `nvidia-smi` queries when nvidia-ml-py is missing.

Exit status: 0 every benchmark ran; 1 a benchmark failed or timed out; 2 no NVIDIA GPU;
3 nothing failed but some benchmarks were skipped (no cupy/torch).
`--self-test` runs the same code on a simulated GPU with the numpy CPU framework, for
machines without a GPU (tests/node_profiling/test_profiler_gpu_check.py).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from pal_slurm.profiler.benchmarks import BenchmarkDef, program_dir, select_benchmarks
from pal_slurm.profiler.executors import (
    BenchmarkOutcome,
    RunSettings,
    SubprocessExecutor,
)
from pal_slurm.gpu.interface import (
    BackendUnavailable,
    GpuError,
    GpuInventory,
    GpuProcess,
    GpuQueryError,
    GpuSample,
    scan_inventory,
)
from pal_slurm.profiler.runner import run_profile, write_jsonl
from pal_slurm.profiler.telemetry import reason_names

EXIT_NO_GPU = 2
EXIT_SKIPPED = 3
_NA = ("", "[N/A]", "N/A", "[Not Supported]", "Not Supported", "[Unknown Error]")


def say(text: str = "") -> None:
    print(text, flush=True)


# -- a GPU backend on nvidia-smi, for machines without nvidia-ml-py ------------------------------


def smi_value(text: str) -> str | None:
    text = text.strip()
    return None if text in _NA else text


def smi_number(text: str) -> float | None:
    v = smi_value(text)
    try:
        return None if v is None else float(v)
    except ValueError:
        return None


def parse_smi_csv(text: str, fields: int) -> list[list[str]]:
    """`nvidia-smi --format=csv,noheader,nounits` output: one list of fields per line."""
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != fields:
            raise ValueError(f"nvidia-smi line with {len(parts)} fields, expected {fields}: {line!r}")
        rows.append(parts)
    return rows


INVENTORY_FIELDS = ("index", "uuid", "name", "serial", "pci.bus_id", "memory.total", "power.limit", "driver_version",
                    "vbios_version", "ecc.errors.corrected.aggregate.total", "ecc.errors.uncorrected.aggregate.total")
SAMPLE_FIELDS = ("clocks.sm", "clocks.mem", "power.draw", "temperature.gpu", "{reasons}", "utilization.gpu",
                 "utilization.memory")


def inventory_from_smi(row: list[str], node: str) -> GpuInventory:
    idx, uuid, name, serial, bus, mem, limit, driver, vbios, ecc_c, ecc_u = row
    num = smi_number
    return GpuInventory(
        index=int(idx), uuid=uuid, node=node, name=name, nvml_index=int(idx), serial=smi_value(serial),
        pci_bus_id=smi_value(bus), memory_mib=None if num(mem) is None else int(num(mem)),
        power_limit_w=num(limit), driver_version=smi_value(driver), vbios_version=smi_value(vbios),
        ecc_corrected=None if num(ecc_c) is None else int(num(ecc_c)),
        ecc_uncorrected=None if num(ecc_u) is None else int(num(ecc_u)),
    )


def sample_from_smi(row: list[str], when: float) -> GpuSample:
    sm, mem, power, temp, reasons, util, util_mem = row
    r = smi_value(reasons)
    return GpuSample(timestamp=when, sm_clock_mhz=smi_number(sm), mem_clock_mhz=smi_number(mem),
                     power_w=smi_number(power), temperature_c=smi_number(temp),
                     throttle_reasons=None if r is None else int(r, 16),
                     utilization_gpu=None if smi_number(util) is None else int(smi_number(util)),
                     utilization_memory=None if smi_number(util_mem) is None else int(smi_number(util_mem)))


class SmiBackend:
    """The GPU interface through `nvidia-smi --query-*` (argument lists, a timeout per call)."""

    name = "nvidia-smi"

    def __init__(self, node: str, exe: str = "nvidia-smi") -> None:
        self._exe = exe
        self._node = node
        self._reasons = "clocks_event_reasons.active"
        try:
            self._rows = parse_smi_csv(self._query("--query-gpu=" + ",".join(INVENTORY_FIELDS)), len(INVENTORY_FIELDS))
        except (OSError, subprocess.SubprocessError, ValueError) as exc:
            raise BackendUnavailable(f"nvidia-smi does not answer: {exc}") from exc
        try:
            self._query(f"--query-gpu={self._reasons}")
        except subprocess.CalledProcessError:  # drivers before 535 know only the old name
            self._reasons = "clocks_throttle_reasons.active"

    def _query(self, *args: str) -> str:
        return subprocess.run([self._exe, *args, "--format=csv,noheader,nounits"], capture_output=True, text=True,
                              timeout=20, check=True, stdin=subprocess.DEVNULL).stdout

    def nodes(self) -> tuple[str, ...]:
        return (self._node,)

    def device_count(self) -> int:
        return len(self._rows)

    def inventory(self, index: int) -> GpuInventory:
        if not 0 <= index < len(self._rows):
            raise GpuQueryError(index, "no such GPU")
        return inventory_from_smi(self._rows[index], self._node)

    def sample(self, index: int) -> GpuSample:
        fields = [f.format(reasons=self._reasons) for f in SAMPLE_FIELDS]
        try:
            out = self._query("--query-gpu=" + ",".join(fields), f"--id={index}")
            return sample_from_smi(parse_smi_csv(out, len(fields))[0], time.time())
        except (OSError, subprocess.SubprocessError, ValueError, IndexError) as exc:
            raise GpuQueryError(index, f"nvidia-smi: {exc}") from exc

    def processes(self, index: int) -> list[GpuProcess]:
        uuid = self.inventory(index).uuid
        try:
            out = self._query("--query-compute-apps=gpu_uuid,pid,process_name,used_memory")
        except (OSError, subprocess.SubprocessError) as exc:
            raise GpuQueryError(index, f"nvidia-smi: {exc}") from exc
        return [GpuProcess(pid=int(pid), name=name, used_memory_mib=None if smi_number(mem) is None
                           else int(smi_number(mem)))
                for gpu, pid, name, mem in parse_smi_csv(out, 4) if gpu == uuid]

    def visible_device(self, index: int) -> str:
        return self.inventory(index).uuid

    def close(self) -> None:
        pass


# -- the check ------------------------------------------------------------------------------------


def open_backend(node: str) -> Any:
    from pal_slurm.gpu.nvml import NvmlBackend

    try:
        b = NvmlBackend(node=node)
        if b.device_count() > 0:
            return b
        b.close()
        nvml_error = "NVML sees no GPU"
    except BackendUnavailable as exc:
        nvml_error = str(exc)
    say(f"NVML: {nvml_error}")
    if shutil.which("nvidia-smi"):
        say("falling back to nvidia-smi for inventory and telemetry")
        return SmiBackend(node)
    raise BackendUnavailable(f"no NVIDIA GPU usable here (NVML: {nvml_error}; nvidia-smi not found)")


def fmt(value: Any, digits: int = 0) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def print_inventory(gpus: list[GpuInventory]) -> None:
    say(f"{'idx':>3} {'uuid':40} {'model':24} {'serial':14} {'pci':17} {'MiB':>6} {'limit W':>7} "
        f"{'driver':10} {'cuda':5} {'vbios':15} {'ecc c/u':>8} {'retired':>7}")
    for g in gpus:
        say(f"{g.index:>3} {g.uuid:40} {g.name[:24]:24} {fmt(g.serial):14} {fmt(g.pci_bus_id):17} "
            f"{fmt(g.memory_mib):>6} {fmt(g.power_limit_w):>7} {fmt(g.driver_version):10} {fmt(g.cuda_version):5} "
            f"{fmt(g.vbios_version):15} {fmt(g.ecc_corrected) + '/' + fmt(g.ecc_uncorrected):>8} "
            f"{fmt(g.retired_pages):>7}")


def print_sample(index: int, s: GpuSample) -> None:
    say(f"  GPU {index} now: SM {fmt(s.sm_clock_mhz)} MHz, mem {fmt(s.mem_clock_mhz)} MHz, {fmt(s.power_w, 1)} W, "
        f"{fmt(s.temperature_c)} C, util {fmt(s.utilization_gpu)} %, reasons "
        f"{','.join(reason_names(s.throttle_reasons)) or 'none'} ({fmt(s.throttle_reasons)})")


def print_outcome(o: BenchmarkOutcome) -> None:
    t = o.telemetry
    tele = "" if t is None else (
        f" | SM {fmt(t.sm_clock_mhz)} MHz (min {fmt(t.sm_clock_min_mhz)}), mem {fmt(t.mem_clock_mhz)} MHz, "
        f"{fmt(t.power_w, 1)} W, {fmt(t.temperature_c)} C (max {fmt(t.temperature_max_c)}), "
        f"reasons {','.join(reason_names(t.throttle_reasons)) or 'none'}, {t.loaded_samples}/{t.samples} samples")
    score = f"{o.score:.4g} {o.benchmark.unit} spread {fmt(o.spread, 4)} x{o.repeats}" if o.ok else o.error
    detail = "" if not o.details else f" [{o.details.get('framework', '')} {o.details.get('stopped', '')}]"
    say(f"  GPU {o.gpu.index} {o.benchmark.name:15} {o.status:8} {o.duration_s:5.1f}s  {score}{detail}{tele}")


def self_test_setup(args: argparse.Namespace) -> tuple[Any, list[BenchmarkDef]]:
    from pal_slurm.gpu.simulated import SimBackend
    from pal_slurm.gpu.simulated_fleet import make_fleet

    backend = SimBackend(make_fleet(nodes=1, gpus_per_node=2, seed=1), load=lambda i, t: 1.0)
    small = {"gemm": ("--framework", "numpy", "--size", "64"), "stream": ("--framework", "numpy", "--elements",
                                                                        "65536")}
    benches = [replace(b, args=(*b.args, *small[b.group])) for b in select_benchmarks(args.benchmarks)
               if b.group in small]
    return backend, benches


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--benchmarks", default="gemm,stream,train")
    ap.add_argument("--time-budget", type=float, default=10.0)
    ap.add_argument("--warmup", type=float, default=3.0)
    ap.add_argument("--timeout", type=float, default=70.0)
    ap.add_argument("--output", type=Path, default=Path("/tmp/pal-gpu-check.jsonl"))
    ap.add_argument("--self-test", action="store_true", help="simulated GPU + numpy on the CPU (no GPU needed)")
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    node = platform.node().split(".")[0] or "gpu-node"
    say(f"== environment: Python {platform.python_version()} on {node}")
    for mod in ("pynvml", "cupy", "torch", "numpy"):
        say(f"  {mod}: {'installed' if importlib.util.find_spec(mod) else 'MISSING'}")
    try:
        if args.self_test:
            backend, benches = self_test_setup(args)
        else:
            backend, benches = open_backend(node), select_benchmarks(args.benchmarks)
    except BackendUnavailable as exc:
        say(f"check: {exc}")
        return EXIT_NO_GPU
    say(f"== inventory ({backend.name})")
    scan = scan_inventory(backend)
    print_inventory(list(scan.gpus))
    for f in scan.faults:
        say(f"  FAULT: {f.error}")
    for g in scan.gpus:
        try:
            print_sample(g.index, backend.sample(g.index))
            procs = backend.processes(g.index)
            if procs:
                say(f"  GPU {g.index} in use by: " + ", ".join(f"pid {p.pid} {p.name or ''}" for p in procs))
        except GpuError as exc:
            say(f"  GPU {g.index}: {exc}")
    settings = RunSettings(time_budget_s=args.time_budget, timeout_s=args.timeout, warmup_s=args.warmup)
    say(f"== benchmarks ({', '.join(b.name for b in benches)}): budget {args.time_budget:g} s, warm-up "
        f"{args.warmup:g} s, timeout {args.timeout:g} s each; all GPUs at once")
    executor = SubprocessExecutor(backend, program_dir(os.environ.get("PAL_PROFILER_DIR")), settings)
    result = run_profile(backend, executor, benches, force=False, progress=print_outcome)
    for b in result.busy:
        say(f"  NOT RUN: {b.describe()}")
    records = write_jsonl(args.output, result)
    backend.close()
    say(f"== summary: {len(result.ok)} ok, {len(result.failed)} not ok, {records} records -> {args.output} "
        f"({time.monotonic() - t0:.0f} s)")
    for o in result.ok:
        t = o.telemetry
        say(f"  GPU {o.gpu.index} {o.benchmark.name:15} {o.score:10.4g} {o.benchmark.unit:9} "
            f"SM {fmt(t.sm_clock_mhz if t else None)} MHz  reasons "
            f"{','.join(reason_names(t.throttle_reasons if t else None)) or 'none'}")
    if any(o.status in ("failed", "timeout") for o in result.outcomes) or scan.faults:
        return 1
    if any(o.status == "skipped" for o in result.outcomes):
        return EXIT_SKIPPED
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
