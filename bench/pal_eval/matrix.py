"""The matrix of fleets, traces and lambdas that bench/vs_slurm.py and bench/faster_fleet.py run
their cells over: event mode, FIFO, runtimes known x U[1, 5], each cell's trace shaken into
copies (seeds 1..N) that every arm sees alike. Two cluster shapes of workload: the Sia-Philly
traces on 16 x 4 GPUs (the default), and today's shape, the LLM-era mix
(pal_slurm.simulate.llm_workload) on nodes of 8 GPUs (`--shape 32x8 --workload llm`), where a
"trace" number is the seed of a generated trace."""

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
    nodes: int = 16
    gpus_per_node: int = 4
    workload: str = "philly"
    jobs: int = 0  # the llm workload's jobs per trace


def fleet_cluster(name: str, nodes: int = 16, gpn: int = 4):  # noqa: ANN201 - a Cluster
    """The fleet's cluster on `nodes` x `gpn` GPUs, the same in every run (its own seed)."""
    from pal_slurm.simulate.artifact_draw import load_artifact_profiles
    from pal_slurm.simulate.fleets import PerGpuVariability, parametric_from_spec
    from pal_slurm.simulate.runner import ArtifactVariability

    if name.startswith("longhorn"):
        profiles = load_artifact_profiles(longhorn(ARTIFACT))
        if name == "longhorn-gpu":
            return PerGpuVariability(profiles, nodes, gpn).cluster(random.Random(42))
        return ArtifactVariability(profiles, nodes, gpn).cluster(random.Random(int(name.rsplit("-", 1)[1])))
    preset, _, seed = name.rpartition("-") if name != "uniform" else ("uniform", "", "1")
    return parametric_from_spec(preset, nodes, gpn, int(seed)).cluster(random.Random(0))


def cell_inputs(cell: Cell) -> tuple[Any, Any]:
    """The cell's trace (its Sia-Philly workload, or the LLM-era mix drawn with the trace number
    as its seed) and the event simulator's options (its lambda, runtimes known to the policies
    x U[1, 5])."""
    from pal_slurm.simulate.estimates import parse_runtime_estimate
    from pal_slurm.simulate.event import EventOptions
    from pal_slurm.simulate.llm_workload import generate_llm
    from pal_slurm.simulate.trace_files import read_trace_file

    if cell.workload == "llm":
        trace = generate_llm(cell.jobs, nodes=cell.nodes, gpus_per_node=cell.gpus_per_node, seed=cell.trace)
    else:
        trace = read_trace_file(sia_philly(ARTIFACT, cell.trace), max_gpus=cell.nodes * cell.gpus_per_node)
    return trace, EventOptions(locality_penalty=cell.lam, runtime_estimate=parse_runtime_estimate("uniform:1:5"))


def mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def matrix_cells(args: argparse.Namespace) -> list[Cell] | str:
    """The cells of `--fleets`, `--traces` and `--lambdas` (and `--shakes`, `--shape`,
    `--workload` checked), or what is wrong with them, in words."""
    shape = _shape(getattr(args, "shape", "16x4"))
    workload, jobs = getattr(args, "workload", "philly"), getattr(args, "llm_jobs", 0)
    if isinstance(shape, str):
        return shape
    if workload == "philly" and not (ARTIFACT / "traces").is_dir():
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
        return f"--traces takes workload numbers (1,...,6; seeds with --workload llm) and --lambdas numbers: {exc}"
    if workload == "llm" and jobs < 1:
        return "--llm-jobs must be at least 1"
    missing = [t for t in traces if workload == "philly" and not sia_philly(ARTIFACT, t).is_file()]
    if missing:
        return f"no such trace(s) {missing} under {ARTIFACT / 'traces/sia-philly'}"
    if not fleets or not traces or not lambdas:
        return "--fleets, --traces and --lambdas need at least one value each"
    return [Cell(f, t, lam, shape[0], shape[1], workload, jobs) for f in fleets for t in traces for lam in lambdas]


def _shape(value: str) -> tuple[int, int] | str:
    """--shape NODESxGPUS, or what is wrong with it."""
    nodes, _, gpn = value.lower().partition("x")
    if not (nodes.isdigit() and gpn.isdigit() and int(nodes) >= 1 and int(gpn) >= 1):
        return f"--shape takes NODESxGPUS, e.g. 32x8, not {value!r}"
    return int(nodes), int(gpn)
