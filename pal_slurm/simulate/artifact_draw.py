"""The PAL artifact's per-GPU variability draw, for the simulator: raw PerfVar and binned
slowdown factor per job class A-D drawn from the artifact's profile CSVs. (Real GPUs'
variability, from a stored classification, is pal_slurm.placement.variability; this
module only draws the artifact's random fleets.)

**The artifact's draw**, as read in hal-uw/blox-pal (branch ``artifact``; read, not copied):

- ``blox/profiles.json`` maps classA -> ``resnet-longhorn-agg.csv``, classB and classC ->
  ``bert-longhorn-agg.csv``, classD -> ``pagerank-longhorn-agg.csv``, in that key order.
- ``blox/cluster_state.py``: ``ClusterState.__init__`` calls ``random.seed(42)``;
  ``_add_new_machines`` walks nodes in registration order and their GPUs in local order
  (so GPU ids 0..63 node-major) and calls ``_get_machine_slowdowns`` once per GPU, which
  loops over the profiles.json keys A, B, C, D. For each it reads the CSV, divides the
  ``perf`` column by that column's median over **all rows** (pandas ``median``), and, since
  the simulator's GPU UUIDs ("0".."3") match no ``uuid`` in the files, takes
  ``random.choice`` over the normalised column (all rows, file order). Class C reads the
  BERT file again and makes its own draw. 4 draws per GPU, 256 for 16 x 4 GPUs; whatever
  uses the global ``random`` next (the random placement policies) continues from there.
  (Older revisions took one row per GPU (``idxmax``) or per-GPU medians: not what ran.)
- ``random.choice(seq)`` is ``seq[rng._randbelow(len(seq))]`` on CPython 3.x, so
  `draw_artifact` with ``random.Random(42)`` over a list of the same values reproduces it.
  Values are parsed with Python's ``float`` (pandas' default parser can differ in the last
  bit for some decimal strings; irrelevant to every decision in practice).

**The artifact's binning** (``placement/pal.py`` and ``placement/pmfirst.py``:
``identify_outliers``, ``get_optimal_k``, ``get_slowdown_factors``), per class over the
GPUs' PerfVars:

- outliers are values > mean + 3 * std, with pandas' **sample** std (ddof=1);
- K = ``get_optimal_k`` + number of outliers, and ``get_optimal_k`` returns 2 from inside
  the first iteration of its silhouette loop, so K = 2 + outliers;
- sklearn ``KMeans(init='k-means++', algorithm='full', random_state=1)`` (n_init 10 under
  scikit-learn 1.3) on all values, outliers included;
- sf(g) = centroid of g's cluster / ``np.median`` of all K centroids (outlier clusters
  included; for even K the mean of the two middle centroids, so for K = 2 no class has
  sf 1.0).

We use ``kmeans1d.cluster`` (an exact dynamic program for optimal 1-D k-means) instead of
sklearn. For the artifact's own case, ``Random(42)`` and 16 x 4 GPUs, both give the same
partitions for all four classes (checked against scikit-learn 1.3.2 and pandas: PerfVars
identical, except one-ulp differences in class D from pandas' float parser, and
slowdowns within 4.5e-16). k-means++ with 10 restarts is a heuristic, though: over 200
other seeds (64 GPUs) it stopped in a worse local optimum for about 6% of the class draws,
and with Random(42) for 48 or 128 GPUs some classes differ. There the optimal partition
is what we give, and an exact replay of the artifact's numbers is not guaranteed.
"""

from __future__ import annotations

import csv
import math
import random
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import kmeans1d
import numpy as np

from pal_slurm.errors import InputError
from pal_slurm.placement.variability import GpuVariability
from pal_slurm.simulate.traces import JOB_CLASSES

__all__ = [
    "ARTIFACT_CLASS_BENCHMARK",
    "ArtifactProfiles",
    "artifact_slowdowns",
    "draw_artifact",
    "load_artifact_profiles",
    "normalise_perf",
]

#: Job class -> the benchmark whose profile the artifact uses for it (blox/profiles.json).
ARTIFACT_CLASS_BENCHMARK: Mapping[str, str] = {"A": "resnet", "B": "bert", "C": "bert", "D": "pagerank"}

PERF_COLUMN = "perf"
#: The column naming the GPU a row was measured on (the Longhorn CSVs' cabinet-node-device or NVML UUID).
GPU_ID_COLUMN = "uuid"


@dataclass(frozen=True)
class ArtifactProfiles:
    """Normalised ``perf`` rows per job class (file order), as the artifact draws from them.

    `raw` keeps the unnormalised ``perf`` values and `gpu_ids` each row's GPU identity (the
    ``uuid`` column; None for a class whose file has none), row-aligned with `rows`: the
    artifact's draw ignores both, the per-GPU model (pal_slurm.simulate.fleets) groups the
    rows by GPU with them.
    """

    rows: Mapping[str, tuple[float, ...]]
    files: Mapping[str, str]
    medians: Mapping[str, float]
    raw: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    gpu_ids: Mapping[str, tuple[str, ...] | None] = field(default_factory=dict)


def normalise_perf(values: Sequence[float]) -> list[float]:
    """Each value divided by the median of all of them."""
    median = statistics.median(values)
    return [v / median for v in values]


def _read_perf_column(path: Path) -> tuple[list[float], list[str] | None]:
    """The ``perf`` column and, when the header has one, the ``uuid`` column (stripped text)."""
    source = str(path)
    try:
        with path.open(encoding="utf-8", newline="") as f:
            reader = csv.reader(f)
            header = next(reader, None)
            names = [h.strip() for h in header] if header is not None else []
            if PERF_COLUMN not in names:
                raise InputError(f"no {PERF_COLUMN!r} column in the header", source=source, line=1)
            col = names.index(PERF_COLUMN)
            id_col = names.index(GPU_ID_COLUMN) if GPU_ID_COLUMN in names else None
            values: list[float] = []
            ids: list[str] = []
            for fields in reader:
                if not fields or all(not x.strip() for x in fields):
                    continue
                line = reader.line_num
                if col >= len(fields):
                    raise InputError(f"row has {len(fields)} fields, no {PERF_COLUMN!r}", source=source, line=line)
                try:
                    x = float(fields[col])
                except ValueError:
                    raise InputError(f"{PERF_COLUMN} {fields[col]!r} is not a number", source=source,
                                     line=line) from None
                if not (math.isfinite(x) and x > 0):
                    raise InputError(f"{PERF_COLUMN} must be a positive time, got {fields[col]!r}", source=source,
                                     line=line)
                values.append(x)
                if id_col is not None:
                    ids.append(fields[id_col].strip() if id_col < len(fields) else "")
    except OSError as e:
        raise InputError(f"cannot read the profile: {e}", source=source) from e
    if not values:
        raise InputError("no measurement rows", source=source)
    return values, (ids if id_col is not None else None)


def _find_profile(directory: Path, benchmark: str) -> Path:
    matches = sorted(p for p in directory.glob(f"{benchmark}*.csv") if p.is_file())
    if not matches:
        raise InputError(f"no {benchmark}*.csv profile (the artifact's input for class(es) "
                         f"{', '.join(c for c, b in ARTIFACT_CLASS_BENCHMARK.items() if b == benchmark)})",
                         source=str(directory))
    if len(matches) > 1:
        raise InputError(f"several {benchmark}*.csv profiles: {', '.join(p.name for p in matches)}",
                         source=str(directory))
    return matches[0]


def load_artifact_profiles(directory: str | Path) -> ArtifactProfiles:
    """Read ``resnet*.csv``, ``bert*.csv`` and ``pagerank*.csv`` in `directory` (e.g. the
    artifact's ``variability/longhorn``) and normalise each ``perf`` column by its median."""
    d = Path(directory)
    if not d.is_dir():
        raise InputError("not a directory of artifact profiles", source=str(d))
    rows: dict[str, tuple[float, ...]] = {}
    files: dict[str, str] = {}
    medians: dict[str, float] = {}
    raws: dict[str, tuple[float, ...]] = {}
    gpu_ids: dict[str, tuple[str, ...] | None] = {}
    cache: dict[str, tuple[str, float, tuple[float, ...], tuple[float, ...], tuple[str, ...] | None]] = {}
    for cls, bench in ARTIFACT_CLASS_BENCHMARK.items():
        if bench not in cache:
            path = _find_profile(d, bench)
            raw, ids = _read_perf_column(path)
            cache[bench] = (str(path), statistics.median(raw), tuple(normalise_perf(raw)), tuple(raw),
                            tuple(ids) if ids is not None else None)
        files[cls], medians[cls], rows[cls], raws[cls], gpu_ids[cls] = cache[bench]
    return ArtifactProfiles(rows=rows, files=files, medians=medians, raw=raws, gpu_ids=gpu_ids)


def draw_artifact(profiles: ArtifactProfiles, n_gpus: int, rng: random.Random) -> list[GpuVariability]:
    """The artifact's draw: for GPU 0..n-1, for class A, B, C, D, ``rng.choice`` over that
    class's normalised rows; then `artifact_slowdowns` per class over the n PerfVars.
    Pass ``random.Random(42)`` to reproduce the artifact; `rng` is left advanced by
    exactly 4 * n choices, as the artifact leaves its global random state."""
    classes = [c for c in JOB_CLASSES if c in profiles.rows]
    pools = {c: list(profiles.rows[c]) for c in classes}
    perfvars = [{c: rng.choice(pools[c]) for c in classes} for _ in range(n_gpus)]
    sfs = {c: artifact_slowdowns([pv[c] for pv in perfvars]) for c in classes} if n_gpus else {}
    return [GpuVariability(perfvar=pv, slowdown={c: sfs[c][g] for c in classes})
            for g, pv in enumerate(perfvars)]


def artifact_slowdowns(values: Sequence[float]) -> list[float]:
    """The artifact's binning of one class: K = 2 + outliers (> mean + 3 sample-std),
    optimal 1-D k-means, sf = centroid of the value's cluster / median of the K centroids.

    K is capped at the number of distinct values (sklearn would leave empty clusters); with
    a single distinct value every sf is 1.0. Fewer than two values: sf 1.0.
    """
    xs = [float(v) for v in values]
    if len(xs) < 2 or len(set(xs)) < 2:
        return [1.0] * len(xs)
    arr = np.asarray(xs)
    threshold = arr.mean() + 3 * arr.std(ddof=1)
    outliers = int((arr > threshold).sum())
    k = min(2 + outliers, len(set(xs)))
    result = kmeans1d.cluster(xs, k)
    centroids = list(result.centroids)
    median_centroid = float(np.median(centroids))
    return [centroids[label] / median_centroid for label in result.clusters]
