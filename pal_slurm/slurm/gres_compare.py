"""How the running Slurm differs from what an inventory would configure (`pal slurm gres-conf --check`).

Pure, like slurm/gresconf.py whose inventory it compares: what Slurm says of each node
(`SlurmNodeGres`, read by slurm/nodeinfo.py from `scontrol show node`) comes in as data.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pal_slurm.slurm.gresconf import Inventory


@dataclass(frozen=True)
class SlurmNodeGres:
    """What Slurm says about one node: GPU GRES counts per type and the node's features."""

    name: str
    gpu_types: Mapping[str | None, int] = field(default_factory=dict)  # None = untyped
    features: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Difference:
    node: str
    kind: str  # missing-node | unknown-node | missing-type | extra-type | wrong-count | missing-feature
    detail: str

    def as_dict(self) -> dict[str, str]:
        return {"node": self.node, "kind": self.kind, "detail": self.detail}


def compare(inv: Inventory, slurm_nodes: Sequence[SlurmNodeGres]) -> list[Difference]:
    """Everything in which the running Slurm differs from what `inv` would configure.

    Extra non-GPU GRES and extra features are fine (sites have their own); an extra GPU type,
    an untyped GPU GRES, or a node with GPUs that the inventory does not know are differences:
    the placer could not steer those GPUs.
    """
    by_name = {n.name: n for n in slurm_nodes}
    out: list[Difference] = []
    for node in inv.nodes:
        have = by_name.get(node.name)
        if have is None:
            out.append(Difference(node.name, "missing-node", "not in Slurm"))
            continue
        want = {g.gres_type: 1 for g in node.gpus}
        for t, count in want.items():
            got = have.gpu_types.get(t)
            if got is None:
                out.append(Difference(node.name, "missing-type", f"gpu:{t} not configured"))
            elif got != count:
                out.append(Difference(node.name, "wrong-count", f"gpu:{t} has count {got}, expected {count}"))
        for t, count in have.gpu_types.items():
            if t not in want:
                label = f"gpu:{t}:{count}" if t is not None else f"untyped gpu:{count}"
                out.append(Difference(node.name, "extra-type", f"{label} is not in the inventory"))
        for feat in node.features:
            if feat not in have.features:
                out.append(Difference(node.name, "missing-feature", f"feature {feat} not set"))
    known = {n.name for n in inv.nodes}
    for n in slurm_nodes:
        if n.name not in known and n.gpu_types:
            total = sum(n.gpu_types.values())
            out.append(Difference(n.name, "unknown-node", f"has {total} GPU(s) in Slurm but is not in the inventory"))
    return out
