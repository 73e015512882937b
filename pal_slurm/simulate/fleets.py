"""Variability models that look like real fleets, for the simulator.

Why apart from the artifact's draw (pal_slurm.simulate.artifact_draw): that draw gives each
simulated GPU one random *run* of one random real GPU, so a single noisy run (on Longhorn,
a GPU's first, warm-up run) becomes a GPU's truth and fleets come out far wider than any
measured one. The models here give the simulator fleets shaped like measured ones:

- `PerGpuVariability`: each simulated GPU *is* one real GPU of the artifact's CSVs, its
  value the median of that GPU's runs (as ``pal classify`` sees a GPU);
- `ParametricVariability`: a fleet of any size with a chosen spread and outlier rate, for
  the question "from which spread on does variability-aware placement pay?".

Both bin with the artifact's own binning (`artifact_slowdowns`), so the old policies rank
these fleets exactly as they rank the artifact's draw. Pure: profiles come in already
loaded (`load_artifact_profiles`), nothing here reads a file.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Protocol

from pal_slurm.errors import InputError
from pal_slurm.placement.model import JOB_CLASSES, Cluster
from pal_slurm.placement.variability import GpuVariability, cluster_from_variability
from pal_slurm.simulate.artifact_draw import ArtifactProfiles, artifact_slowdowns

__all__ = [
    "COMPUTE_CLASSES",
    "PARAMETRIC_KEYS",
    "PRESETS",
    "SPREAD_RATIO",
    "ParametricVariability",
    "PerGpuVariability",
    "VariabilityModel",
    "parametric_from_spec",
    "per_gpu_medians",
]

#: The classes whose profile is a compute benchmark (ResNet-50, BERT): outliers and
#: stragglers slow these. Class D's PageRank is memory-bound and does not see them.
COMPUTE_CLASSES: tuple[str, ...] = ("A", "B", "C")

#: Each class's spread as a fraction of class A's when one ``spread`` is given. Our choice:
#: on Longhorn the per-GPU medians' p5-p95 is about 10 % for ResNet-50 and 2 % for BERT,
#: so half of A's for B and C errs towards more variability (never understating what a
#: variability-aware policy can gain); class D, memory-bound, gets a tenth.
SPREAD_RATIO: Mapping[str, float] = {"A": 1.0, "B": 0.5, "C": 0.5, "D": 0.1}


class VariabilityModel(Protocol):
    """What a simulation run asks of a variability source: the cluster this run sees.

    `rng` is the run's seeded random state; a model may draw from it (the artifact's draw
    does, and the random policies then continue from where it left off) or ignore it."""

    def cluster(self, rng: random.Random) -> Cluster: ...


def _fleet(perfvars: Sequence[Mapping[str, float]], uuids: Sequence[str | None], nodes: int,
           gpus_per_node: int) -> Cluster:
    classes = list(perfvars[0])
    sfs = {c: artifact_slowdowns([pv[c] for pv in perfvars]) for c in classes}
    var = [GpuVariability(perfvar=dict(pv), slowdown={c: sfs[c][g] for c in classes}, uuid=uuids[g])
           for g, pv in enumerate(perfvars)]
    return cluster_from_variability(var, nodes, gpus_per_node)


def _check_shape(nodes: int, gpus_per_node: int) -> None:
    for name, value in (("nodes", nodes), ("gpus_per_node", gpus_per_node)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise InputError(f"{name} must be a whole number >= 1, got {value!r}")


# --- per-GPU: real GPUs' medians -------------------------------------------------------------


def per_gpu_medians(raw: Sequence[float], ids: Sequence[str]) -> dict[str, float]:
    """GPU identity -> median of that GPU's runs / median over GPUs of those medians, in the
    order identities first appear. The fleet median, not the row median, is the reference:
    a GPU measured 14 times must not weigh more than one measured 3 times."""
    groups: dict[str, list[float]] = {}
    for value, gpu in zip(raw, ids, strict=True):
        groups.setdefault(gpu, []).append(value)
    medians = {gpu: statistics.median(values) for gpu, values in groups.items()}
    reference = statistics.median(medians.values())
    return {gpu: m / reference for gpu, m in medians.items()}


def _draw_distinct(pool: Sequence[str], k: int, rng: random.Random) -> list[str]:
    """k identities, each real GPU once while the pool lasts (a fleet has every GPU once);
    a fleet larger than the pool takes it again, in a fresh random order each time."""
    if k and not pool:
        raise ValueError("no GPU identities to draw from")
    out: list[str] = []
    while len(out) < k:
        out.extend(rng.sample(list(pool), min(k - len(out), len(pool))))
    return out


@dataclass(frozen=True)
class PerGpuVariability:
    """Simulated GPUs that are real GPUs: slot i takes one GPU identity of the CSVs and,
    per class, that GPU's median run normalised by the fleet's median GPU (`per_gpu_medians`).

    Identities are drawn with the run's `rng` (so every policy of a run sees the same
    fleet for a seed), without repetition while the fleet is no larger than the file's
    GPUs. They are drawn from the first class's file (A, ResNet-50: the most sensitive
    class is the one whose GPUs the fleet is made of); every other file gives the **same
    GPU's** value where it measured that identity. Where it did not (the files' identity
    sets differ), that class's value for the slot is an independent draw from its file's
    GPUs not already in the fleet. B and C read the same file, so they always agree. On
    Longhorn, 120 of ResNet-50's 336 GPUs are among BERT's 136, and PageRank names its GPUs
    by NVML UUID where the others use cabinet-node-device, so class D is always an
    independent draw: the correlation across classes is only as good as the files allow.
    """

    profiles: ArtifactProfiles
    nodes: int
    gpus_per_node: int

    def __post_init__(self) -> None:
        _check_shape(self.nodes, self.gpus_per_node)
        for cls in self.profiles.rows:
            ids = self.profiles.gpu_ids.get(cls)
            source = self.profiles.files.get(cls)
            if ids is None or cls not in self.profiles.raw:
                raise InputError(f"no 'uuid' column: the per-GPU model groups runs by GPU identity "
                                 f"(class {cls}); use the per-run model for this file", source=source)
            blank = sum(1 for i in ids if not i)
            if blank:
                raise InputError(f"{blank} row(s) have an empty 'uuid': the per-GPU model cannot tell "
                                 f"which GPU they measured", source=source)

    @cached_property
    def medians(self) -> Mapping[str, Mapping[str, float]]:
        """class -> GPU identity -> normalised median (computed once per profile file)."""
        by_file: dict[str, dict[str, float]] = {}
        out: dict[str, Mapping[str, float]] = {}
        for cls in self._classes:
            f = self.profiles.files[cls]
            if f not in by_file:
                by_file[f] = per_gpu_medians(self.profiles.raw[cls], self.profiles.gpu_ids[cls] or ())
            out[cls] = by_file[f]
        return out

    @property
    def _classes(self) -> list[str]:
        return [c for c in JOB_CLASSES if c in self.profiles.rows]

    def cluster(self, rng: random.Random) -> Cluster:
        n = self.nodes * self.gpus_per_node
        classes = self._classes
        primary = self.medians[classes[0]]
        slots = _draw_distinct(list(primary), n, rng)
        in_fleet = set(slots)
        per_file: dict[str, list[float]] = {}
        for cls in classes:
            f = self.profiles.files[cls]
            if f in per_file:
                continue
            table = self.medians[cls]
            values = [table.get(gpu, math.nan) for gpu in slots]
            missing = [k for k, gpu in enumerate(slots) if gpu not in table]
            if missing:
                spare = [gpu for gpu in table if gpu not in in_fleet] or list(table)
                for k, gpu in zip(missing, _draw_distinct(spare, len(missing), rng)):
                    values[k] = table[gpu]
            per_file[f] = values
        perfvars = [{c: per_file[self.profiles.files[c]][k] for c in classes} for k in range(n)]
        return _fleet(perfvars, slots, self.nodes, self.gpus_per_node)


# --- parametric: a chosen spread and outlier rate ----------------------------------------


@dataclass(frozen=True)
class ParametricVariability:
    """A fleet drawn from a few parameters, the same for every run of a seed.

    Exactly, with ``z_g`` uniform on [0, 1) per GPU g (one draw of ``random.Random(seed)``
    per GPU, in id order) and ``spread[c]`` the class's spread:

    - ordinary GPUs: PerfVar_c(g) = 1 + spread[c] * (z_g - 1/2). The median GPU is 1.0
      and the fastest and slowest are `spread` apart (max - min tends to spread on a large
      fleet; p95 - p5 is 0.9 x spread). The same z_g for every class: a slow GPU is slow
      for every class, by its class's spread (Sinha et al., SC'22, "Not All GPUs Are
      Created Equal": 8 % on average, up to 22 %, for compute-bound benchmarks; far less for
      memory-bound ones, hence class D's small share in `SPREAD_RATIO`);
    - outliers: round(outlier_fraction * GPUs) GPUs (``rng.sample`` after the z draws) get
      `outlier_factor` for every class in `outlier_classes` (the compute classes; the paper
      saw GPUs up to 1.5x slower than the median);
    - stragglers: `stragglers` more GPUs, none of them outliers, get `straggler_factor`
      for those classes (one failing GPU far off the rest).

    `rng` of `cluster` is ignored: a fleet is a property of the site, not of the run, so
    every run and policy of a seed sees the same fleet (and it is built once).
    """

    nodes: int
    gpus_per_node: int
    spread: Mapping[str, float]
    outlier_fraction: float = 0.0
    outlier_factor: float = 1.0
    seed: int = 42
    stragglers: int = 0
    straggler_factor: float = 2.0
    outlier_classes: tuple[str, ...] = field(default=COMPUTE_CLASSES)

    def __post_init__(self) -> None:
        _check_shape(self.nodes, self.gpus_per_node)
        unknown = sorted(set(self.spread) - set(JOB_CLASSES))
        if unknown:
            raise InputError(f"spread: unknown class(es) {', '.join(unknown)}; classes are {', '.join(JOB_CLASSES)}")
        for cls, s in self.spread.items():
            if not (isinstance(s, (int, float)) and math.isfinite(s) and 0 <= s < 2):
                raise InputError(f"spread for class {cls} must be >= 0 and < 2 (a GPU 1 - spread/2 fast "
                                 f"must still take time), got {s!r}")
        if not (math.isfinite(self.outlier_fraction) and 0 <= self.outlier_fraction <= 1):
            raise InputError(f"outlier fraction must be in [0, 1], got {self.outlier_fraction!r}")
        for name, f in (("outlier factor", self.outlier_factor), ("straggler factor", self.straggler_factor)):
            if not (math.isfinite(f) and f >= 1):
                raise InputError(f"{name} must be >= 1 (times the median GPU's time), got {f!r}")
        if not isinstance(self.stragglers, int) or self.stragglers < 0:
            raise InputError(f"stragglers must be a whole number >= 0, got {self.stragglers!r}")
        if self.outlier_count + self.stragglers > self.nodes * self.gpus_per_node:
            raise InputError(f"{self.outlier_count} outlier(s) and {self.stragglers} straggler(s) do not fit in "
                             f"{self.nodes * self.gpus_per_node} GPUs")
        bad = sorted(set(self.outlier_classes) - set(JOB_CLASSES))
        if bad:
            raise InputError(f"outlier classes: unknown class(es) {', '.join(bad)}")

    @property
    def outlier_count(self) -> int:
        """round(outlier_fraction x GPUs), halves rounded up."""
        return int(math.floor(self.outlier_fraction * self.nodes * self.gpus_per_node + 0.5))

    @cached_property
    def fleet(self) -> Cluster:
        n = self.nodes * self.gpus_per_node
        rng = random.Random(self.seed)
        z = [rng.random() for _ in range(n)]
        perfvars = [{c: 1.0 + float(self.spread.get(c, 0.0)) * (zg - 0.5) for c in JOB_CLASSES} for zg in z]
        outliers = rng.sample(range(n), self.outlier_count)
        rest = sorted(set(range(n)) - set(outliers))
        stragglers = rng.sample(rest, self.stragglers)
        for ids, factor in ((outliers, self.outlier_factor), (stragglers, self.straggler_factor)):
            for g in ids:
                for c in self.outlier_classes:
                    perfvars[g][c] = float(factor)
        return _fleet(perfvars, [None] * n, self.nodes, self.gpus_per_node)

    def cluster(self, rng: random.Random) -> Cluster:
        return self.fleet


def _spread(a: float) -> dict[str, float]:
    return {c: a * r for c, r in SPREAD_RATIO.items()}


#: Named fleets (parameters of `ParametricVariability` other than the shape and seed).
PRESETS: Mapping[str, Mapping[str, object]] = {
    # every GPU exactly the median: what variability-blind placement assumes
    "uniform": {"spread": _spread(0.0)},
    # the paper's average variability, no outliers: a healthy fleet
    "narrow": {"spread": _spread(0.08)},
    # up to 25 % for class A and 1 % of GPUs 1.5x slower: the paper's worst fleets
    "wide": {"spread": _spread(0.25), "outlier_fraction": 0.01, "outlier_factor": 1.5},
    # wide, plus one GPU at 2x for every compute class: a failing GPU nobody drained
    "wide-2x": {"spread": _spread(0.25), "outlier_fraction": 0.01, "outlier_factor": 1.5, "stragglers": 1,
                "straggler_factor": 2.0},
}

#: The keys of the compact syntax and the field each sets.
PARAMETRIC_KEYS: Mapping[str, str] = {
    "spread": "spread", "outliers": "outlier_fraction", "outlier-factor": "outlier_factor",
    "stragglers": "stragglers", "straggler-factor": "straggler_factor", "seed": "seed",
}


def parametric_from_spec(text: str, nodes: int, gpus_per_node: int, seed: int) -> ParametricVariability:
    """Parse ``PRESET`` or ``[PRESET,]KEY=VALUE[,KEY=VALUE...]`` (the part after
    ``parametric:``). Keys: spread (class A's; B, C and D by `SPREAD_RATIO`), outliers
    (fraction), outlier-factor, stragglers (count), straggler-factor, seed (default
    `seed`). Without a preset, unset keys are those of ``uniform``."""
    items = [t.strip() for t in text.split(",")]
    if not text.strip() or any(not t for t in items):
        raise InputError(f"{text!r}: expected a preset ({', '.join(PRESETS)}) or KEY=VALUE pairs "
                         f"({', '.join(PARAMETRIC_KEYS)})")
    params: dict[str, object] = {**PRESETS["uniform"], "seed": seed}
    if "=" not in items[0]:
        name = items.pop(0)
        if name in PARAMETRIC_KEYS:
            raise InputError(f"{name!r} needs a value: {name}=VALUE")
        if name not in PRESETS:
            raise InputError(f"unknown preset {name!r}; presets: {', '.join(PRESETS)}")
        params.update(PRESETS[name])
    seen: set[str] = set()
    for item in items:
        key, sep, value = (part.strip() for part in item.partition("="))
        if not sep and key in PARAMETRIC_KEYS:
            raise InputError(f"{key!r} needs a value: {key}=VALUE")
        if not sep or key not in PARAMETRIC_KEYS:
            raise InputError(f"{item!r}: unknown parameter; parameters: {', '.join(PARAMETRIC_KEYS)}")
        if key in seen:
            raise InputError(f"{key} given twice")
        seen.add(key)
        try:
            number: float | int = int(value) if key in ("seed", "stragglers") else float(value)
        except ValueError:
            kind = "a whole number" if key in ("seed", "stragglers") else "a number"
            raise InputError(f"{key}={value!r} is not {kind}") from None
        params[PARAMETRIC_KEYS[key]] = _spread(float(number)) if key == "spread" else number
    return ParametricVariability(nodes=nodes, gpus_per_node=gpus_per_node, **params)  # type: ignore[arg-type]
