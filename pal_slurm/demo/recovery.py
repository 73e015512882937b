"""How well classification recovers a simulated fleet's true classes (for the test and the bench).

A simulated GPU's true tier (`SimGpu.true_tier`) is 0 regular, 1 slow, 2 outlier. An
assigned class is turned into the same scale: an outlier bin is tier 2; a regular bin is
tier 0 when it is the fastest regular bin or its centroid (PerfVar) is at most
`regular_edge` (the truth's first tier edge, 1.04), else tier 1. Classification splits a
spread wider than the measurement noise into several bins (docs/classification.md), so
"slower than the fastest bin" no longer means "slow". "Within one" then means no healthy
GPU was fenced off as an outlier and no defective GPU landed in a regular-speed bin.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sqlalchemy import Engine, select

from pal_slurm.db.engine import session_scope
from pal_slurm.db.models import (
    Benchmark,
    ClassificationBin,
    ClassificationResult,
    ClassificationRun,
    Gpu,
)

__all__ = ["BinAssignment", "Recovery", "load_assignments", "recovery"]


@dataclass(frozen=True)
class BinAssignment:
    bin: int
    outlier: bool
    tier: int  # 0 fastest regular bin, 1 slower regular bin, 2 outlier


@dataclass(frozen=True)
class Recovery:
    benchmark: str
    gpus: int
    exact: int
    within_one: int
    matrix: dict[int, dict[str, int]]  # true tier -> assigned bin label -> GPUs
    columns: list[str]  # bin labels, fastest first; outlier bins end in '*'

    @property
    def exact_fraction(self) -> float:
        return self.exact / self.gpus if self.gpus else 0.0

    @property
    def within_one_fraction(self) -> float:
        return self.within_one / self.gpus if self.gpus else 0.0


def load_assignments(engine: Engine, benchmark: str, version: int | None = None,
                     regular_edge: float = 1.04) -> dict[str, BinAssignment]:
    """UUID -> assignment in classification `version` (default: the latest) for `benchmark`."""
    with session_scope(engine) as s:
        run_q = select(ClassificationRun).order_by(ClassificationRun.version.desc())
        if version is not None:
            run_q = select(ClassificationRun).where(ClassificationRun.version == version)
        run = s.scalars(run_q.limit(1)).first()
        if run is None:
            return {}
        bench_id = s.scalar(select(Benchmark.id).where(Benchmark.name == benchmark))
        bins = s.execute(select(ClassificationBin.bin, ClassificationBin.centroid, ClassificationBin.outlier)
                         .where(ClassificationBin.run_id == run.id, ClassificationBin.benchmark_id == bench_id)).all()
        regular = sorted((c, b) for b, c, o in bins if not o)
        rank = {b: 0 if i == 0 or c <= regular_edge else 1 for i, (c, b) in enumerate(regular)}
        rows = s.execute(select(Gpu.uuid, ClassificationResult.bin, ClassificationResult.outlier)
                         .join(Gpu, Gpu.id == ClassificationResult.gpu_id)
                         .where(ClassificationResult.run_id == run.id, ClassificationResult.benchmark_id == bench_id,
                                ClassificationResult.bin.is_not(None))).all()
    return {uuid: BinAssignment(b, bool(o), 2 if o else min(rank.get(b, 1), 1)) for uuid, b, o in rows}


def recovery(benchmark: str, truth: Mapping[str, int], assigned: Mapping[str, BinAssignment]) -> Recovery:
    """Compare true tiers with assignments over the GPUs that have both."""
    common = [u for u in truth if u in assigned]
    labels = {}
    for u in common:
        a = assigned[u]
        labels[u] = f"{a.bin}{'*' if a.outlier else ''}"
    columns = sorted(set(labels.values()), key=lambda lab: (lab.endswith("*"), int(lab.rstrip("*"))))
    matrix: dict[int, dict[str, int]] = {t: dict.fromkeys(columns, 0) for t in sorted({truth[u] for u in common})}
    for u in common:
        matrix[truth[u]][labels[u]] += 1
    exact = sum(1 for u in common if assigned[u].tier == truth[u])
    near = sum(1 for u in common if abs(assigned[u].tier - truth[u]) <= 1)
    return Recovery(benchmark, len(common), exact, near, matrix, columns)
