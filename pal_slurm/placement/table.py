"""The table of placement policies: the one list of names, and how each policy is composed.

Every name a user sees comes from `ROWS`, in its order: `pal simulate --policy all`, the
configuration's check of `[placer] policy`, the error that lists the valid names, and the
policy table of docs/simulation.md (a test holds that to the rows). A row is a name, a
description, whether the policy is sticky (how a caller calls it), and how it is built: a
mechanism (pal_slurm.placement.in_order, easy, slurm_reserving) composed with a GPU chooser,
an estimator and a wait rule. Adding a policy is one row here plus, if no chooser here picks
GPUs its way, one chooser (docs/architecture.md, "Where to change what").

Why the parts are imported inside the builders: the configuration validates against this
table when any command starts, and the parts import numpy; reading the table must not
(tests/cli/test_cli_startup.py). Nothing in the placement package imports this module, so the
builders' imports make no circle.

Why the rows are what they are:

- The artifact's six (packed, random, PM-First, PAL; sticky or not) are its choosers in the
  in-order mechanism, as the paper ran them (docs/simulation.md, "Fidelity").
- slurm-backfill is Slurm as shipped, the baseline every claim is measured against:
  cons_tres's variability-blind first fit, sched/backfill's EASY backfilling with Slurm's own
  estimate (the time limit), and no waiting for better GPUs. Its lookahead of 100 jobs past
  the head stands in for bf_max_job_test (500 in Slurm): it keeps a 100,000-job simulation
  fast and is far beyond the depth at which a 64-GPU cluster still has room.
- pal-guard, the default, is the same row with two parts swapped: the guarded chooser
  (first fit unless a fragmentation-neutral set is faster beyond the noise) and the
  noise-gated wait rule; on a fleet without variability its decisions are slurm-backfill's.
- pal-backfill and pal-match put PAL's choice (pal-match: with class matching) in the same
  EASY mechanism with the cost model as the estimate and a 5 % margin for waiting; not
  sticky, so a round simulator may re-place everything each round.
- slurm-reserving is Slurm's own backfill planning (whole nodes reserved for every waiting
  job it tests) with cons_tres's own node choice: the model of plain Slurm the replay
  predicts with, not the comparison baseline.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pal_slurm.placement.model import PlacementError, PolicyRow

if TYPE_CHECKING:
    from pal_slurm.placement.base import Policy

    Row = PolicyRow[Policy]

#: sched/backfill's bf_max_job_test stand-in for the rows that model Slurm (see the docstring)
SLURM_LOOKAHEAD = 100


def _packed(row: Row) -> Policy:
    from pal_slurm.placement.artifact import Packed
    from pal_slurm.placement.in_order import InOrder
    return InOrder(row, Packed(row.name))


def _random(row: Row) -> Policy:
    from pal_slurm.placement.artifact import RandomPick
    from pal_slurm.placement.in_order import InOrder
    return InOrder(row, RandomPick(row.name))


def _pm_first(row: Row) -> Policy:
    from pal_slurm.placement.artifact import PmFirst
    from pal_slurm.placement.in_order import InOrder
    return InOrder(row, PmFirst(row.name))


def _pal(row: Row) -> Policy:
    from pal_slurm.placement.artifact import PalChooser
    from pal_slurm.placement.in_order import InOrder
    return InOrder(row, PalChooser(row.name))


def _pal_backfill(row: Row, matching: bool = False) -> Policy:
    from pal_slurm.placement.artifact import PalChooser
    from pal_slurm.placement.easy import EasyBackfill, estimated_runtime
    from pal_slurm.placement.waiting import BetterLater
    return EasyBackfill(row, PalChooser(row.name, matching=matching), estimated_runtime, BetterLater())


def _pal_match(row: Row) -> Policy:
    return _pal_backfill(row, matching=True)


def _slurm_backfill(row: Row) -> Policy:
    from pal_slurm.placement.easy import EasyBackfill, by_time_limit
    from pal_slurm.placement.first_fit import FirstFit
    from pal_slurm.placement.waiting import NeverWait
    return EasyBackfill(row, FirstFit(row.name), by_time_limit, NeverWait(), lookahead=SLURM_LOOKAHEAD)


def _pal_guard(row: Row) -> Policy:
    from pal_slurm.placement.easy import EasyBackfill, by_time_limit
    from pal_slurm.placement.first_fit import FirstFit
    from pal_slurm.placement.guarded import GuardedChooser
    from pal_slurm.placement.waiting import BetterLater, NoiseGated
    first_fit = FirstFit(row.name)
    return EasyBackfill(row, GuardedChooser(first_fit), by_time_limit, NoiseGated(BetterLater()),
                        lookahead=SLURM_LOOKAHEAD, planner=first_fit)


def _slurm_reserving(row: Row) -> Policy:
    from pal_slurm.placement.cons_tres_fit import cons_tres_fit
    from pal_slurm.placement.easy import by_time_limit
    from pal_slurm.placement.slurm_reserving import Reserving
    return Reserving(row, cons_tres_fit(row.name), by_time_limit, lookahead=SLURM_LOOKAHEAD)


#: Every policy, in the order users see them.
ROWS: tuple[Row, ...] = (
    PolicyRow("packed-sticky", "Artifact baseline: consolidate on the fewest nodes; running jobs stay put.",
              sticky=True, build=_packed),
    PolicyRow("packed-nonsticky", "Artifact baseline: consolidate on the fewest nodes; everything re-placed each "
              "round.", sticky=False, build=_packed),
    PolicyRow("random-sticky", "Artifact baseline: random free GPUs; running jobs stay put.",
              sticky=True, build=_random),
    PolicyRow("random-nonsticky", "Artifact baseline: random free GPUs; everything re-placed each round.",
              sticky=False, build=_random),
    PolicyRow("pm-first", "Artifact: class-sorted prefix; the N free GPUs with the lowest slowdown factor.",
              sticky=False, build=_pm_first),
    PolicyRow("pal", "Artifact: PM-First's queue treatment; trades slowdown factor against locality (lambda).",
              sticky=False, build=_pal),
    PolicyRow("pal-backfill", "PAL's GPU choice plus EASY backfilling that reserves the blocked head's expected "
              "GPUs, and waiting for a known GPU release when that finishes a job sooner.",
              sticky=False, build=_pal_backfill),
    PolicyRow("pal-match", "pal-backfill plus class matching: insensitive jobs take the GPUs worst for class A "
              "first.", sticky=False, build=_pal_match),
    PolicyRow("slurm-backfill", "Slurm as shipped: cons_tres's variability-blind first fit (node order, lowest GPU "
              "indices) and sched/backfill's EASY backfilling on time limits; never waits for better GPUs.",
              sticky=True, build=_slurm_backfill),
    PolicyRow("slurm-reserving", "Slurm's sched/backfill as it plans: every waiting job it tests that cannot start "
              "gets a reservation of whole nodes for its time limit; cons_tres's tightest-fit node choice; the "
              "model of plain Slurm the replay predicts with.", sticky=True, build=_slurm_reserving),
    PolicyRow("pal-guard", "The default: Slurm's first fit and sched/backfill on time limits, moving a job to "
              "faster GPUs only where that beats the noise at no cost in fragmentation or locality.",
              sticky=True, build=_pal_guard),
)


def policy_names() -> tuple[str, ...]:
    """Every policy's name, in the table's order: what the CLI lists and `--policy all` runs."""
    return tuple(r.name for r in ROWS)


def row_named(name: str) -> Row:
    """The row called `name`, or a PlacementError (a ValueError) that lists the valid names."""
    for r in ROWS:
        if r.name == name:
            return r
    raise PlacementError(f"unknown policy {name!r}; valid: {', '.join(policy_names())}")
