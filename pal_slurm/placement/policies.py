"""The placement policies by name: where the CLI, the placer, the simulators and the benches get one.

`get_policy` builds the policy of a row of the table (pal_slurm.placement.table), or raises
a PlacementError (a ValueError) that lists the valid names; `policy_names` lists them in
the table's order.
"""

from __future__ import annotations

from pal_slurm.placement.base import Choice, Policy
from pal_slurm.placement.table import policy_names, row_named

__all__ = ["Choice", "Policy", "get_policy", "policy_names"]


def get_policy(name: str) -> Policy:
    """A fresh instance of the policy called `name`."""
    return row_named(name).policy()
