"""The matrix of fleets, traces and lambdas that bench/vs_slurm.py and bench/faster_fleet.py run
their cells over: event mode, 16 x 4 GPUs, FIFO, runtimes known x U[1, 5], each cell's trace
shaken into copies (seeds 1..N) that every arm sees alike."""

from __future__ import annotations

import argparse
import random
from dataclasses import dataclass
from typing import Any

from pal_eval.paths import artifact_dir, longhorn, sia_philly

METRICS = ("avg_jct_s", "p99_jct_s", "makespan_s")
ARTIFACT = artifact_dir()
FLEETS = ("longhorn-run-42", "longhorn-run-1", "longhorn-run-2", "longhorn-run-3", "longhorn-gpu",
          "narrow-1", "narrow-2", "wide-1", "wide-2", "wide-2x-1", "wide-2x-2", "uniform")
#: fleets whose GPUs really differ: the gain targets apply to them
SPREAD = ("wide-1", "wide-2", "wide-2x-1", "wide-2x-2")


@dataclass(frozen=True)
class Cell:
    fleet: str
    trace: int
    lam: float


def fleet_cluster(name: str):  # noqa: ANN201 - a Cluster
    """The fleet's cluster, the same in every run (its own seed)."""
    from pal_slurm.simulate.artifact_draw import load_artifact_profiles
    from pal_slurm.simulate.fleets import PerGpuVariability, parametric_from_spec
    from pal_slurm.simulate.runner import ArtifactVariability

    if name.startswith("longhorn"):
        profiles = load_artifact_profiles(longhorn(ARTIFACT))
        if name == "longhorn-gpu":
            return PerGpuVariability(profiles, 16, 4).cluster(random.Random(42))
        return ArtifactVariability(profiles, 16, 4).cluster(random.Random(int(name.rsplit("-", 1)[1])))
    preset, _, seed = name.rpartition("-") if name != "uniform" else ("uniform", "", "1")
    return parametric_from_spec(preset, 16, 4, int(seed)).cluster(random.Random(0))


def cell_inputs(cell: Cell) -> tuple[Any, Any]:
    """The cell's trace (its Sia-Philly workload on 64 GPUs) and the event simulator's options
    (its lambda, runtimes known to the policies x U[1, 5])."""
    from pal_slurm.simulate.estimates import parse_runtime_estimate
    from pal_slurm.simulate.event import EventOptions
    from pal_slurm.simulate.trace_files import read_trace_file

    trace = read_trace_file(sia_philly(ARTIFACT, cell.trace), max_gpus=64)
    return trace, EventOptions(locality_penalty=cell.lam, runtime_estimate=parse_runtime_estimate("uniform:1:5"))


def mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def matrix_cells(args: argparse.Namespace) -> list[Cell] | str:
    """The cells of `--fleets`, `--traces` and `--lambdas` (and `--shakes` checked), or what is wrong
    with them, in words."""
    if not (ARTIFACT / "traces").is_dir():
        return f"no artifact data at {ARTIFACT} (set PAL_ARTIFACT_DIR)"
    fleets = [f for f in args.fleets.split(",") if f]
    unknown = sorted(set(fleets) - set(FLEETS))
    if unknown:
        return f"unknown fleet(s) {unknown}; known: {', '.join(FLEETS)}"
    if args.shakes < 1:
        return "--shakes must be at least 1"
    try:
        traces = [int(t) for t in args.traces.split(",") if t]
        lambdas = [float(lam) for lam in args.lambdas.split(",") if lam]
    except ValueError as exc:
        return f"--traces takes workload numbers (1,...,6) and --lambdas numbers: {exc}"
    missing = [t for t in traces if not sia_philly(ARTIFACT, t).is_file()]
    if missing:
        return f"no such trace(s) {missing} under {ARTIFACT / 'traces/sia-philly'}"
    if not fleets or not traces or not lambdas:
        return "--fleets, --traces and --lambdas need at least one value each"
    return [Cell(f, t, lam) for f in fleets for t in traces for lam in lambdas]
