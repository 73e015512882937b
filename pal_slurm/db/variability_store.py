"""Per-GPU variability from the stored classification: the one loader the simulator
(`pal simulate --variability db`) and the placement daemon both read.

Why here: the model itself (pal_slurm.placement.variability) is pure; this adapter maps
the latest (or a given) classification run to it, with each GPU's node and device minor
number (which names its Slurm GRES slot), so what the daemon places by and what the
simulator credits come from the same rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlalchemy import select
from sqlalchemy.orm import Session

from pal_slurm.db import classification_store as cstore
from pal_slurm.db.models import Gpu
from pal_slurm.errors import PalError
from pal_slurm.placement.variability import ClassifiedGpu, GpuVariability, Measured, from_classification

if TYPE_CHECKING:
    from pal_slurm.db.models import Benchmark


@dataclass(frozen=True)
class StoredVariability:
    """The GPUs of one classification run (sorted by model, node, UUID) and its version;
    `without_slot`: the GPU identities left out because they hold no slot (`at_slots_only`)."""

    version: int
    gpus: tuple[GpuVariability, ...]
    without_slot: int = 0


def load_variability(session: Session, classes: Sequence[str], version: int | None = None, *,
                     at_slots_only: bool = False) -> StoredVariability:
    """The variability of every classified GPU for `classes`; PalError when there is no
    classification (or not that version). An unprofiled GPU gets its class's worst factor
    (see from_classification). With `at_slots_only`, only the GPUs on a known node at a known
    slot (device minor or NVML index): the fleet Slurm schedules, without the identities of
    runs no file placed (`pal simulate --variability db`); when no GPU holds a slot, all."""
    run = cstore.get_run(session, version)
    if run is None:
        if version is None:
            raise PalError("no classification yet: run `pal classify` first")
        raise PalError(f"classification version {version} does not exist")
    stored = cstore.load_classification(session, run)
    minors = {uuid: minor for uuid, minor in session.execute(select(Gpu.uuid, Gpu.minor_number))}
    by_bench = {(r.uuid, r.benchmark): r for r in stored.results}
    first = {r.uuid: r for r in reversed(stored.results)}  # each GPU's first result names it
    gpus = []
    for uuid, r in first.items():
        measured = {job_class: Measured(slowdown=res.slowdown, perfvar=res.perfvar, fast=res.fast)
                    for job_class, bench in stored.job_classes.items()
                    if (res := by_bench.get((uuid, bench))) is not None and res.profiled}
        gpus.append(ClassifiedGpu(uuid=uuid, node=r.node, model=r.model, minor=minors.get(uuid), classes=measured))
    ordered = sorted(gpus, key=lambda g: (g.model, g.node or "", g.uuid))
    left_out = 0
    if at_slots_only:
        slots = {r.uuid for r in stored.results if r.node and r.slot is not None}
        if slots:
            left_out = sum(1 for g in ordered if g.uuid not in slots)
            ordered = [g for g in ordered if g.uuid in slots]
    return StoredVariability(version=stored.version, gpus=tuple(from_classification(ordered, classes)),
                             without_slot=left_out)


def save_variability(session: Session, gpus: Sequence[GpuVariability], *, model: str, note: str,
                     benchmark_prefix: str = "drawn") -> int:
    """Store a fleet's per-GPU variability as a new classification run; returns its version.

    For fleets whose factors are given rather than measured (the PAL artifact's random
    draw that `pal replay` configures a test cluster with): one benchmark per job class
    (`<prefix>-<class>`, since the artifact's classes B and C are separate draws of one
    file), one result per GPU and class holding its PerfVar and slowdown factor. The
    placer and `--variability db` then read these rows like any classification, through
    `load_variability`. Every GPU needs a node, a device minor and a UUID.
    """
    from sqlalchemy import func

    from pal_slurm.db.models import ClassificationRun

    classes = _given_classes(gpus)
    bench_of = {c: f"{benchmark_prefix}-{c}" for c in classes}
    benches = _given_benchmarks(session, bench_of, note)
    rows = _placed_gpus(session, gpus, model)
    _point_job_classes(session, bench_of, benches)
    version = (session.scalar(select(func.max(ClassificationRun.version))) or 0) + 1
    run = ClassificationRun(version=version, note=note, previous_version=version - 1 or None,
                            params={"source": "given factors", "job_classes": bench_of})
    session.add(run)
    session.flush()
    _store_factors(session, run.id, rows, classes, {c: benches[name].id for c, name in bench_of.items()})
    return version


def _given_classes(gpus: Sequence[GpuVariability]) -> list[str]:
    """The job classes every GPU gives a factor for (the same for all); PalError when a GPU
    lacks a node, a minor or a UUID (it could not be placed on), or has other classes."""
    if not gpus:
        raise PalError("no GPUs to store")
    classes = sorted(gpus[0].slowdown)
    for g in gpus:
        if g.node is None or g.minor is None or not g.uuid:
            raise PalError(f"GPU {g.uuid or '?'} has no node, minor or UUID: it could not be placed on")
        if sorted(g.slowdown) != classes:
            raise PalError(f"GPU {g.uuid} has classes {sorted(g.slowdown)}, the first GPU {classes}")
    return classes


def _given_benchmarks(session: Session, bench_of: dict[str, str], note: str) -> dict[str, Benchmark]:
    """Each class's benchmark by name: the stored one, or a new one of relative, given factors."""
    from pal_slurm.db.models import Benchmark

    benches = {b.name: b for b in session.scalars(select(Benchmark).where(Benchmark.name.in_(bench_of.values())))}
    for c, name in bench_of.items():
        if name not in benches:
            benches[name] = Benchmark(name=name, unit="relative", lower_is_better=True,
                                      description=f"given slowdown factors of job class {c} ({note})")
            session.add(benches[name])
    return benches


def _placed_gpus(session: Session, gpus: Sequence[GpuVariability], model: str) -> list[tuple[Gpu, GpuVariability]]:
    """Each GPU's row (created where missing) on its node and minor, as `model`, beside its factors."""
    from pal_slurm.db.models import Node

    nodes = {n.name: n for n in session.scalars(select(Node))}
    known = {g.uuid: g for g in session.scalars(select(Gpu))}
    rows = []
    for v in gpus:
        node = nodes.get(v.node)  # type: ignore[arg-type]
        if node is None:
            node = nodes[v.node] = Node(name=v.node)  # type: ignore[index]
            session.add(node)
        gpu = known.get(v.uuid)  # type: ignore[arg-type]
        if gpu is None:
            gpu = known[v.uuid] = Gpu(uuid=v.uuid, model=model)  # type: ignore[index]
            session.add(gpu)
        gpu.node, gpu.minor_number, gpu.model = node, v.minor, model
        rows.append((gpu, v))
    session.flush()
    return rows


def _point_job_classes(session: Session, bench_of: dict[str, str], benches: dict[str, Benchmark]) -> None:
    """Each job class (created where missing) measured by its given benchmark."""
    from pal_slurm.db.models import JobClass

    existing = {jc.name: jc for jc in session.scalars(select(JobClass))}
    for c, name in bench_of.items():
        jc = existing.get(c) or JobClass(name=c)
        jc.benchmark_id = benches[name].id
        session.add(jc)
    session.flush()


def _store_factors(session: Session, run_id: int, rows: list[tuple[Gpu, GpuVariability]], classes: list[str],
                   bench_id: dict[str, int]) -> None:
    """One result and one per-class row per GPU and class, holding its PerfVar and factor."""
    from pal_slurm.db.models import ClassificationResult, GpuClass

    results, per_class = [], []
    for gpu, v in rows:
        for c in classes:
            bid = bench_id[c]
            results.append({"run_id": run_id, "gpu_id": gpu.id, "benchmark_id": bid, "runs": 1,
                            "median_score": v.perfvar[c], "perfvar": v.perfvar[c], "bin": None,
                            "slowdown": v.slowdown[c], "outlier": False, "profiled": True})
            per_class.append({"run_id": run_id, "gpu_id": gpu.id, "job_class": c, "benchmark_id": bid, "bin": None,
                              "slowdown": v.slowdown[c], "outlier": False, "profiled": True})
    session.execute(ClassificationResult.__table__.insert(), results)
    session.execute(GpuClass.__table__.insert(), per_class)
