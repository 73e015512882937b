"""Classifying a whole fleet: group runs by (GPU model, benchmark), classify each group,
and map benchmarks onto job classes. Pure: the database layer loads and stores.

Each model is normalised on its own (an A100 is never compared with a V100), and a job
class is classified by the benchmark that measures it (A: resnet50, ... by default).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pal_slurm.classification.classify import classify_group
from pal_slurm.classification.model import ClassifyParams, GroupResult


@dataclass(frozen=True)
class GroupRuns:
    """All runs of one (GPU model, benchmark): the input of one classification group."""

    model: str
    benchmark: str
    lower_is_better: bool
    runs: Mapping[str, Sequence[float]]


@dataclass(frozen=True)
class GroupClassification:
    model: str
    benchmark: str
    lower_is_better: bool
    result: GroupResult


@dataclass(frozen=True)
class ClassAssignment:
    """What a placement policy reads: a GPU's bin and slowdown factor for one job class."""

    uuid: str
    model: str
    job_class: str
    benchmark: str
    bin: int | None
    slowdown: float | None
    outlier: bool
    profiled: bool


PreviousSlowdowns = Mapping[tuple[str, str], Mapping[str, float]]


def classify_fleet(
    groups: Sequence[GroupRuns],
    params: ClassifyParams,
    previous: PreviousSlowdowns | None = None,
) -> list[GroupClassification]:
    """One classification per (model, benchmark), in a stable order."""
    out = []
    for grp in sorted(groups, key=lambda g: (g.model, g.benchmark)):
        prev = previous.get((grp.model, grp.benchmark)) if previous else None
        result = classify_group(grp.runs, lower_is_better=grp.lower_is_better, params=params, previous=prev)
        out.append(GroupClassification(grp.model, grp.benchmark, grp.lower_is_better, result))
    return out


def assign_job_classes(
    classified: Sequence[GroupClassification],
    class_benchmarks: Mapping[str, str],
    gpus_by_model: Mapping[str, Sequence[str]],
) -> list[ClassAssignment]:
    """Every GPU of every model gets a row per job class; a GPU never measured with the
    class's benchmark is unprofiled for it (the daemon treats that as unknown, not as fast)."""
    by_group = {(c.model, c.benchmark): c for c in classified}
    rows: list[ClassAssignment] = []
    for model in sorted(gpus_by_model):
        for job_class, bench in sorted(class_benchmarks.items()):
            grp = by_group.get((model, bench))
            results = {g.uuid: g for g in grp.result.gpus} if grp else {}
            for uuid in sorted(gpus_by_model[model]):
                g = results.get(uuid)
                if g is None or not g.profiled:
                    rows.append(ClassAssignment(uuid, model, job_class, bench, None, None, False, False))
                else:
                    rows.append(ClassAssignment(uuid, model, job_class, bench, g.bin, g.slowdown, g.outlier, True))
    return rows
