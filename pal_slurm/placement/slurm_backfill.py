"""slurm-backfill: Slurm as shipped, the baseline every claim of pal-slurm is measured against.

What a site runs today: select/cons_tres choosing GPUs without knowing about variability,
and sched/backfill starting jobs past a blocked one when that does not delay it. Modelled
with the one EASY mechanism (pal_slurm.placement.easy) and the first-fit chooser
(pal_slurm.placement.first_fit), so the difference to pal-slurm's policies is exactly
what variability awareness adds:

- **GPU choice, variability-blind** (cons_tres): nodes in configuration order (Slurm's order
  for nodes of equal weight); a one-node job takes the first node with enough free GPUs,
  and on it the lowest free GPU indices; GPUs per node on several nodes take the first
  nodes that have them; a job that may span nodes takes one node when one fits, else the
  fewest nodes (the emptiest first, in order on ties). Per-slot constraints that only
  pal-slurm's steering needs (the same slots on every node) do not apply to Slurm itself.
- **Backfill** (sched/backfill): queue order is Slurm's; the first job that cannot start is
  given a reservation (the GPUs this same first-fit would give it once enough running jobs
  have ended, by their expected ends); a later job starts now only if it is expected to end
  by then or keeps off those GPUs. At most `lookahead` jobs past the blocked one are looked
  at per pass (bf_max_job_test), and the event simulator runs such a pass at most every 30
  simulated seconds (bf_interval).
- **Time limits, not runtimes**: a job is expected to run for its estimate (`remaining_s`,
  the time limit in a headline run), whatever GPUs it gets, as Slurm's backfill assumes.
- **Never waits for better GPUs.**
"""

from __future__ import annotations

from collections.abc import Sequence

from pal_slurm.placement.base import InOrderPolicy, register
from pal_slurm.placement.easy import EasyBackfill, time_limit_s
from pal_slurm.placement.first_fit import FirstFit
from pal_slurm.placement.index import ClusterIndex
from pal_slurm.placement.model import JobRequest


@register
class SlurmBackfill(EasyBackfill):
    name = "slurm-backfill"
    sticky = True
    description = ("Slurm as shipped: cons_tres's variability-blind first fit (node order, lowest GPU indices) "
                   "and sched/backfill's EASY backfilling on time limits; never waits for better GPUs.")
    #: sched/backfill's bf_max_job_test default is 500; 100 keeps a 100,000-job simulation
    #: fast and is far beyond the depth at which a 64-GPU cluster still has room
    lookahead = 100
    waits = False

    def make_chooser(self) -> InOrderPolicy:
        return FirstFit()

    def estimate(self, ix: ClusterIndex, job: JobRequest, gpus: Sequence[int], penalty: float) -> float:
        """Slurm expects a job to run for its time limit, on any GPUs."""
        return time_limit_s(job)
