"""The profiling benchmarks: what each measures, which program runs it, how the simulator plays it.

Each benchmark is a standalone program in the top-level `profiler/` directory (see
profiler/_common.py for the contract). `--benchmarks gemm,stream,train` names groups;
a group may hold several benchmarks (gemm: fp16 and fp32). For `--backend sim` each
benchmark is played by the simulated benchmark with the same physics (how much of it
the SM clock governs) and its time converted to this benchmark's unit through a nominal
score of the median GPU, so simulated and real results look alike.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from pal_slurm.errors import InputError

__all__ = ["BENCHMARKS", "GROUPS", "BenchmarkDef", "program_dir", "select_benchmarks"]


@dataclass(frozen=True)
class BenchmarkDef:
    name: str  # stored benchmark name (profile_runs, classification)
    group: str  # what --benchmarks selects
    program: str  # file in the program directory
    args: tuple[str, ...]
    unit: str
    lower_is_better: bool
    sim_benchmark: str  # pal_slurm.gpu.sim_specs benchmark with the same clock sensitivity
    sim_nominal: tuple[tuple[str, float], ...]  # (model family, score of the median GPU)
    description: str

    def nominal(self, model_name: str) -> float:
        """The simulated median GPU's score in this benchmark's unit (first family in the name)."""
        for family, value in self.sim_nominal:
            if family in model_name:
                return value
        return self.sim_nominal[0][1]


BENCHMARKS: Mapping[str, BenchmarkDef] = MappingProxyType({
    "gemm-fp16": BenchmarkDef(
        "gemm-fp16", "gemm", "gemm.py", ("--dtype", "fp16"), "TFLOP/s", False, "sgemm",
        (("V100", 92.0), ("H100", 620.0)),
        "dense n x n matrix multiply, fp16 on tensor cores (compute-bound: tracks the SM clock)"),
    "gemm-fp32": BenchmarkDef(
        "gemm-fp32", "gemm", "gemm.py", ("--dtype", "fp32"), "TFLOP/s", False, "sgemm",
        (("V100", 14.2), ("H100", 51.0)),
        "dense n x n matrix multiply, fp32 FMA, TF32 off (compute-bound)"),
    "stream": BenchmarkDef(
        "stream", "stream", "stream.py", (), "GB/s", False, "pagerank",
        (("V100", 810.0), ("H100", 3000.0)),
        "STREAM triad a = b + s*c on 1 GiB arrays (memory-bound: barely depends on the clock)"),
    "train-resnet50": BenchmarkDef(
        "train-resnet50", "train", "train_step.py", (), "images/s", False, "resnet50",
        (("V100", 1250.0), ("H100", 3600.0)),
        "ResNet-50 training step, synthetic images, mixed precision (needs torch)"),
    "train-bert": BenchmarkDef(
        "train-bert", "train", "train_step.py", ("--model", "bert"), "sequences/s", False, "bert",
        (("V100", 180.0), ("H100", 620.0)),
        "BERT-base masked-language-model training step, synthetic tokens, mixed precision (needs torch)"),
})

GROUPS: tuple[str, ...] = tuple(dict.fromkeys(b.group for b in BENCHMARKS.values()))


def select_benchmarks(spec: str | None) -> list[BenchmarkDef]:
    """'gemm,stream' (groups) or exact names ('gemm-fp16'); None/'' = all. Order kept, no duplicates."""
    if spec is None or not spec.strip():
        return list(BENCHMARKS.values())
    out: dict[str, BenchmarkDef] = {}
    for item in (s.strip() for s in spec.split(",")):
        if not item:
            continue
        if item in BENCHMARKS:
            out.setdefault(item, BENCHMARKS[item])
            continue
        group = [b for b in BENCHMARKS.values() if b.group == item]
        if not group:
            raise InputError(f"--benchmarks: unknown benchmark {item!r} "
                             f"(groups: {', '.join(GROUPS)}; names: {', '.join(BENCHMARKS)})")
        for b in group:
            out.setdefault(b.name, b)
    return list(out.values())


def program_dir(explicit: str | os.PathLike[str] | None = None) -> Path:
    """Where the benchmark programs are: `explicit` (--program-dir, or $PAL_PROFILER_DIR, which
    the caller reads: the CLI option's environment variable), else the source checkout's
    profiler/, or <prefix>/share/pal-slurm/profiler (where `pip install` puts them)."""
    candidates: list[Path] = []
    if explicit:
        candidates.append(Path(explicit))
    else:
        candidates.append(Path(__file__).resolve().parents[2] / "profiler")
        candidates.append(Path(sys.prefix) / "share" / "pal-slurm" / "profiler")
    for path in candidates:
        if (path / "_common.py").is_file():
            return path
    raise InputError(f"benchmark programs not found in {', '.join(str(c) for c in candidates)}: "
                     "pass --program-dir DIR (the profiler/ directory of pal-slurm) or set PAL_PROFILER_DIR")
