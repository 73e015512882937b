"""The one runtime cost model, shared by the simulators and the policies.

A synchronous multi-GPU job runs at the pace of its slowest GPU, and pays the locality
penalty lambda when it spans nodes: run time = nominal x max PerfVar over its GPUs x
(lambda if it spans nodes else 1). The event simulator charges exactly this, the round
simulator turns it into a progress rate, and pal-backfill estimates with it, so a gain
the simulator credits to a policy comes from the model the policy itself plans with.

Plain Python over a few GPU ids: a backfilling decision estimates hundreds of choices,
and numpy's per-call overhead would be most of the cost at this size.
"""

from __future__ import annotations

from collections.abc import Sequence


def spans_nodes(node_of: Sequence[int], gpus: Sequence[int]) -> bool:
    """Whether `gpus` lie on more than one node."""
    first = node_of[gpus[0]]
    return any(node_of[g] != first for g in gpus)


def runtime_s(nominal_s: float, gpus: Sequence[int], perfvar: Sequence[float], node_of: Sequence[int],
              locality_penalty: float) -> float:
    """Run time of a job of `nominal_s` on a median GPU when it runs on `gpus`."""
    slowest = max(map(perfvar.__getitem__, gpus))  # map, not a generator: ~1.4x as fast on a whole-node job
    return nominal_s * slowest * (locality_penalty if spans_nodes(node_of, gpus) else 1.0)
