"""The placement policies by name: the one place the CLI, the config and the simulator
look them up.

Importing this module registers every policy (the artifact's six and ours); `POLICIES`
maps names to classes and `get_policy` returns a ready instance or a PlacementError (a
ValueError) that lists the valid names.
"""

from __future__ import annotations

from pal_slurm.placement import artifact as _artifact  # noqa: F401  (registers the artifact's policies)
from pal_slurm.placement import backfill as _backfill  # noqa: F401  (registers pal-backfill)
from pal_slurm.placement import slurm_backfill as _slurm  # noqa: F401  (registers slurm-backfill)
from pal_slurm.placement import slurm_reserving as _reserving  # noqa: F401  (registers slurm-reserving)
from pal_slurm.placement import guarded as _guarded  # noqa: F401  (registers pal-guard, the default)
from pal_slurm.placement.base import POLICIES, Choice, InOrderPolicy, Policy, register
from pal_slurm.placement.model import POLICY_NAMES, PlacementError

__all__ = ["POLICIES", "Choice", "InOrderPolicy", "Policy", "get_policy", "policy_names", "register"]


def policy_names() -> list[str]:
    """Every registered policy, in the documented order (`model.POLICY_NAMES`), whichever module
    registered first: what the CLI lists and `--policies all` runs, the same in every process."""
    rank = {n: i for i, n in enumerate(POLICY_NAMES)}
    return sorted(POLICIES, key=lambda n: (rank.get(n, len(rank)), n))


def get_policy(name: str) -> Policy:
    """A fresh instance of the policy called `name`."""
    try:
        cls = POLICIES[name]
    except KeyError:
        raise PlacementError(f"unknown policy {name!r}; valid: {', '.join(policy_names())}") from None
    return cls()
