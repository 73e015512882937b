"""Which benchmark measures which job class: the named sets of benchmark names the product knows.

Why a set and not free names: a job class is placed by the slowdown factors of one benchmark,
so a class whose benchmark nothing measures places by nothing, in silence. The names a class
may read are therefore fixed here, one set per source of measurements:

- ``profiler`` (the default): what `pal profile run` measures on a site's own GPUs
  (pal_slurm/profiler/benchmarks.py; a test keeps the two lists equal);
- ``pal-artifact``: the PAL artifact's profiles (ResNet-50, BERT, PageRank, SGEMM), as
  `pal profile import --input-format pal-artifact` stores them, under their own names.

Each class reads the benchmark whose share of SM-clock-bound time (the simulated backend's
``compute_fraction``: GEMM 1.0, ResNet-50 0.8, BERT 0.5, STREAM/PageRank 0.1) lies nearest
the jobs the class holds (the agent's compute score: A >= 0.50, B >= 0.35, C >= 0.20, D
below; ResNet-50 training scores ~0.58, BERT ~0.43, PageRank ~0.19). docs/classification.md,
"Which benchmark measures which class", gives the measurements behind the choice. Pure data.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

__all__ = ["BENCHMARK_SETS", "DEFAULT_SET", "BenchmarkSet", "known_benchmarks"]


@dataclass(frozen=True)
class BenchmarkSet:
    """One source's benchmark names, the job class each measures, and the compute-bound ones
    (an outlier slow on a compute benchmark is drained: [report] drain_perfvar)."""

    name: str
    benchmarks: tuple[str, ...]
    job_classes: Mapping[str, tuple[str, str]]  # class -> (benchmark, description)
    compute_benchmarks: tuple[str, ...]
    source: str


PROFILER = BenchmarkSet(
    name="profiler",
    benchmarks=("gemm-fp16", "gemm-fp32", "stream", "train-resnet50", "train-bert"),
    job_classes=MappingProxyType({
        "A": ("train-resnet50", "most variability-sensitive (compute-bound training)"),
        "B": ("train-bert", "sensitive (transformer training)"),
        "C": ("train-bert", "moderately sensitive"),
        "D": ("stream", "least sensitive (memory-bound)"),
    }),
    compute_benchmarks=("gemm-fp16", "gemm-fp32", "train-resnet50", "train-bert"),
    source="`pal profile run` / `pal profile submit` on the GPU nodes",
)

PAL_ARTIFACT = BenchmarkSet(
    name="pal-artifact",
    benchmarks=("resnet50", "bert", "pagerank", "sgemm"),
    job_classes=MappingProxyType({
        "A": ("resnet50", "most variability-sensitive (compute-bound training)"),
        "B": ("bert", "sensitive (transformer training)"),
        "C": ("bert", "moderately sensitive"),
        "D": ("pagerank", "least sensitive (memory-bound)"),
    }),
    compute_benchmarks=("resnet50", "bert", "sgemm"),
    source="`pal profile import --input-format pal-artifact` of the PAL artifact's CSV files",
)

BENCHMARK_SETS: Mapping[str, BenchmarkSet] = MappingProxyType({s.name: s for s in (PROFILER, PAL_ARTIFACT)})
DEFAULT_SET = PROFILER.name


def known_benchmarks() -> tuple[str, ...]:
    """Every benchmark name some supported source produces, in set order."""
    return tuple(dict.fromkeys(b for s in BENCHMARK_SETS.values() for b in s.benchmarks))


def set_of(benchmark: str) -> BenchmarkSet | None:
    """The set a benchmark name belongs to (None: no source produces it)."""
    for s in BENCHMARK_SETS.values():
        if benchmark in s.benchmarks:
            return s
    return None
