"""Per-GPU variability, the model both the simulator and the placement daemon place by.

A GPU has, per job class, a raw PerfVar (its measured time over the median GPU's: what a
job is slowed by) and a binned slowdown factor (what policies rank by); higher = slower.
`from_classification` turns a classification's GPUs (`ClassifiedGpu`: what the db layer's
loader, pal_slurm.db.variability_store, reads for both callers) into this model, with the rule
for a fast outlier's PerfVar (`Measured.pace`), and
`cluster_from_variability` / `cluster_from_gpus` build the `Cluster` a decision sees.
Pure: no database, no files.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pal_slurm.placement.model import Cluster, GpuRef


@dataclass(frozen=True)
class GpuVariability:
    """One GPU: raw PerfVar (what the simulator slows progress by) and binned slowdown
    factor (what policies rank by), per job class; higher = slower. `node` and `minor`
    (the device minor number, which names its Slurm GRES slot) when known."""

    perfvar: dict[str, float]
    slowdown: dict[str, float]
    uuid: str | None = None
    node: str | None = None
    minor: int | None = None


def worst_factor(known: Iterable[float | None]) -> float:
    """The factor a GPU nobody measured gets for a class: the worst (largest) of the class's
    known factors, 1.0 when none is known. A GPU we know nothing about must not attract
    sensitive jobs; the placer's cluster view and `from_classification` both apply it."""
    values = [float(x) for x in known if x is not None]
    return max(values) if values else 1.0


@dataclass(frozen=True)
class Measured:
    """One GPU's classification for one job class: its binned slowdown, its raw PerfVar (None:
    not stored), and whether it is a fast outlier (its PerfVar far below the median)."""

    slowdown: float | None
    perfvar: float | None = None
    fast: bool = False

    @property
    def pace(self) -> float | None:
        """The PerfVar a job is slowed by. A fast outlier's is a measurement to check, not a speed
        to chase: the placer's estimates and the simulator take it as its factor (the typical GPU's)."""
        return self.slowdown if self.fast else self.perfvar


@dataclass(frozen=True)
class ClassifiedGpu:
    """One GPU as a classification run left it: its identity and slot, and per job class what
    was measured (a class absent: not profiled for it)."""

    uuid: str | None
    node: str | None
    model: str
    minor: int | None
    classes: Mapping[str, Measured]


def from_classification(gpus: Sequence[ClassifiedGpu], classes: Sequence[str]) -> list[GpuVariability]:
    """The variability model of classified GPUs, in their order.

    A GPU with no slowdown for a class gets the **worst** (largest) slowdown of that class among
    the GPUs (`worst_factor`; 1.0 when none has one); a missing PerfVar is taken equal to the
    (filled) slowdown."""
    def measured(g: ClassifiedGpu, cls: str) -> Measured:
        return g.classes.get(cls) or Measured(None)

    worst = {cls: worst_factor(measured(g, cls).slowdown for g in gpus) for cls in classes}
    out: list[GpuVariability] = []
    for g in gpus:
        sf: dict[str, float] = {}
        pv: dict[str, float] = {}
        for cls in classes:
            m = measured(g, cls)
            sf[cls] = float(m.slowdown) if m.slowdown is not None else worst[cls]
            pv[cls] = float(m.pace) if m.pace is not None else sf[cls]
        out.append(GpuVariability(perfvar=pv, slowdown=sf, uuid=g.uuid, node=g.node, minor=g.minor))
    return out


def cluster_from_variability(var: Sequence[GpuVariability], nodes: int, gpus_per_node: int) -> Cluster:
    """A `Cluster` of `nodes` x `gpus_per_node` GPUs, GPU i = var[i] on node i // gpus_per_node.

    Node names come from the GPUs' ``node`` when every GPU has one, each node's GPUs agree
    and the names are distinct; when no GPU names a node they are n0, n1, ...
    """
    if nodes < 1 or gpus_per_node < 1:
        raise ValueError(f"need at least one node and one GPU per node, got {nodes} x {gpus_per_node}")
    n = nodes * gpus_per_node
    if len(var) != n:
        raise ValueError(f"{len(var)} GPUs of variability for {nodes} x {gpus_per_node} = {n} GPUs")
    classes = list(var[0].slowdown)
    for i, v in enumerate(var):
        if set(v.slowdown) != set(classes) or set(v.perfvar) != set(classes):
            raise ValueError(f"GPU {i} has classes {sorted(v.slowdown)}/{sorted(v.perfvar)}, GPU 0 has {sorted(classes)}")
    gpus = tuple(GpuRef(id=i, node=i // gpus_per_node, slot=i % gpus_per_node, uuid=v.uuid) for i, v in enumerate(var))
    return Cluster(node_names=_node_names(var, nodes, gpus_per_node), gpus=gpus,
                   slowdown={c: tuple(v.slowdown[c] for v in var) for c in classes},
                   perfvar={c: tuple(v.perfvar[c] for v in var) for c in classes})


def _node_names(var: Sequence[GpuVariability], nodes: int, gpus_per_node: int) -> tuple[str, ...]:
    if all(v.node is None for v in var):
        return tuple(f"n{i}" for i in range(nodes))
    names: list[str] = []
    for i in range(nodes):
        block = {v.node for v in var[i * gpus_per_node:(i + 1) * gpus_per_node]}
        if len(block) != 1 or None in block:
            raise ValueError(f"GPUs {i * gpus_per_node}..{(i + 1) * gpus_per_node - 1} should share one node, "
                             f"they name {sorted(map(str, block))}")
        names.append(block.pop())  # type: ignore[arg-type]
    if len(set(names)) != len(names):
        raise ValueError(f"a node name appears in more than one block of {gpus_per_node} GPUs: {names}")
    return tuple(names)


def ordered_gpus(gpus: Sequence[GpuVariability]) -> list[GpuVariability]:
    """`gpus` in the order `cluster_from_gpus` numbers them: node names sorted, then each
    node's GPUs by slot (device minor; UUID where the slot is unknown), the order Slurm's
    first fit takes a node's GPUs in."""
    return sorted(gpus, key=lambda g: (g.node or "unknown", g.minor is None, g.minor or 0, g.uuid or ""))


def cluster_from_gpus(gpus: Sequence[GpuVariability]) -> Cluster:
    """A cluster shaped like the real one: GPUs grouped by node (in name order), node-major ids,
    each node's GPUs in slot order (`ordered_gpus`: id i is `ordered_gpus(gpus)[i]`)."""
    by_node: dict[str, list[GpuVariability]] = {}
    for g in ordered_gpus(gpus):
        by_node.setdefault(g.node or "unknown", []).append(g)
    names = tuple(by_node)
    refs, ordered = [], []
    for n, name in enumerate(names):
        for slot, g in enumerate(by_node[name]):
            refs.append(GpuRef(id=len(refs), node=n, slot=slot, uuid=g.uuid))
            ordered.append(g)
    classes = sorted({c for g in ordered for c in g.slowdown})
    sf = {c: tuple(g.slowdown[c] for g in ordered) for c in classes}
    pv = {c: tuple(g.perfvar.get(c, g.slowdown[c]) for g in ordered) for c in classes}
    return Cluster(node_names=names, gpus=tuple(refs), slowdown=sf, perfvar=pv)
