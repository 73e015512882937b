"""How well classification recovers a simulated fleet's true classes (for the test and the bench).

A simulated GPU's true tier (`SimGpu.true_tier`) is 0 regular, 1 slow, 2 outlier. An
assigned class is turned into the same scale: an outlier bin is tier 2; a regular bin is
tier 0 when it is the fastest regular bin or its centroid (PerfVar) is at most
`regular_edge` (the truth's first tier edge, 1.04), else tier 1. Classification splits a
spread wider than the measurement noise into several bins (docs/classification.md), so
"slower than the fastest bin" no longer means "slow". "Within one" then means no healthy
GPU was fenced off as an outlier and no defective GPU landed in a regular-speed bin.

`bin_recovery` measures the same run bin by bin: a GPU's true bin is the bin of the run its
true PerfVar (`SimGpu.true_perfvar`, the noise-free value classification estimates) lies
nearest to (by centroid), among the regular bins for a GPU whose true tier is regular or slow
and among the outlier bins for a true outlier; its distance is how many places lie between that
and the bin it was given on the run's ladder of bins (ascending centroid: fast outliers,
regular bins, slow outliers), where each regular bin is one place and the outlier bins on
either side are one place together. Each outlier gets a bin of its own, so the order among
outliers of nearly the same speed is the measurement noise's, not a class: an outlier put in
any outlier bin on its side is in its class, one put in a regular bin is not.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine, select

from pal_slurm.db.engine import session_scope
from pal_slurm.db.models import (
    Benchmark,
    ClassificationBin,
    ClassificationResult,
    ClassificationRun,
    Gpu,
)

__all__ = ["Bin", "BinAssignment", "BinRecovery", "Recovery", "bin_recovery", "load_assignments", "load_bins", "recovery"]


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


def _run_of(s: Any, version: int | None) -> ClassificationRun | None:
    """Classification run `version`, or the latest when None; None when there is none."""
    q = select(ClassificationRun).order_by(ClassificationRun.version.desc())
    if version is not None:
        q = select(ClassificationRun).where(ClassificationRun.version == version)
    return s.scalars(q.limit(1)).first()


def load_assignments(engine: Engine, benchmark: str, version: int | None = None,
                     regular_edge: float = 1.04) -> dict[str, BinAssignment]:
    """UUID -> assignment in classification `version` (default: the latest) for `benchmark`."""
    with session_scope(engine) as s:
        run = _run_of(s, version)
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


@dataclass(frozen=True)
class Bin:
    """One bin of a run for one (model, benchmark): its number (its place in ascending centroid)."""

    bin: int
    centroid: float
    outlier: bool


@dataclass(frozen=True)
class BinRecovery:
    """Per GPU, how many places on the ladder of bins lie between the bin it was given and its
    true bin (see the module)."""

    benchmark: str
    #: per GPU: (uuid, true PerfVar, true bin, given bin, places between them)
    per_gpu: list[tuple[str, float, int, int, int]] = field(default_factory=list)

    @property
    def gpus(self) -> int:
        return len(self.per_gpu)

    @property
    def distances(self) -> dict[int, int]:
        """bins away -> GPUs, nearest first"""
        out: dict[int, int] = {}
        for *_rest, d in self.per_gpu:
            out[d] = out.get(d, 0) + 1
        return dict(sorted(out.items()))

    def within(self, bins: int = 1) -> int:
        return sum(1 for *_rest, d in self.per_gpu if d <= bins)


def load_bins(engine: Engine, benchmark: str, version: int | None = None,
              ) -> tuple[dict[str, list[Bin]], dict[str, tuple[str, int]]]:
    """(model -> its bins in order, uuid -> (model, bin given)) of classification `version`
    (default: the latest) for `benchmark`; GPUs without a bin (unprofiled) are left out."""
    with session_scope(engine) as s:
        run = _run_of(s, version)
        if run is None:
            return {}, {}
        bench_id = s.scalar(select(Benchmark.id).where(Benchmark.name == benchmark))
        rows = s.execute(select(ClassificationBin.model, ClassificationBin.bin, ClassificationBin.centroid,
                                ClassificationBin.outlier)
                         .where(ClassificationBin.run_id == run.id, ClassificationBin.benchmark_id == bench_id)
                         .order_by(ClassificationBin.model, ClassificationBin.bin)).all()
        given = s.execute(select(Gpu.uuid, Gpu.model, ClassificationResult.bin)
                          .join(Gpu, Gpu.id == ClassificationResult.gpu_id)
                          .where(ClassificationResult.run_id == run.id, ClassificationResult.benchmark_id == bench_id,
                                 ClassificationResult.bin.is_not(None))).all()
    bins: dict[str, list[Bin]] = {}
    for model, b, centroid, outlier in rows:
        bins.setdefault(model, []).append(Bin(b, centroid, bool(outlier)))
    return bins, {uuid: (model, b) for uuid, model, b in given}


def _places(ladder: list[Bin]) -> dict[int, int]:
    """bin -> its place on the ladder: each regular bin one place, the outlier bins on either
    side of them one place together."""
    out: dict[int, int] = {}
    place, before = -1, False
    for b in ladder:
        if not (b.outlier and before):
            place += 1
        out[b.bin] = place
        before = b.outlier
    return out


def bin_recovery(benchmark: str, true_perfvar: Mapping[str, float], true_outliers: Collection[str],
                 bins: Mapping[str, list[Bin]], given: Mapping[str, tuple[str, int]]) -> BinRecovery:
    """Bins between each GPU's given and true bin (see the module), over the GPUs that have both;
    `true_outliers`: the GPUs whose true tier is the outlier tier (`SimGpu.true_tier` 2)."""
    per_gpu: list[tuple[str, float, int, int, int]] = []
    place = {model: _places(ladder) for model, ladder in bins.items()}
    for uuid, pv in true_perfvar.items():
        if uuid not in given or given[uuid][0] not in bins:
            continue
        model, got = given[uuid]
        ladder = bins[model]
        kind = [b for b in ladder if b.outlier == (uuid in true_outliers)] or ladder
        true_bin = min(kind, key=lambda b: (abs(b.centroid - pv), b.bin)).bin
        per_gpu.append((uuid, pv, true_bin, got, abs(place[model][got] - place[model][true_bin])))
    return BinRecovery(benchmark, per_gpu)
