"""The one decision step: the simulators and the placement daemon all call `decide`.

Why one function: a gain claimed in simulation must be reachable live. The round
simulator, the event simulator and `pal placer` hand it the same kinds of input (the free
GPUs, the running jobs with their expected ends, the waiting jobs with their runtime
estimates, in the queue order they configure) and it does the same three things for all
of them: order the waiting jobs, cut the window a policy can act on, and let the policy
place (`Policy.place`, which also guarantees every job keeps its shape).
"""

from __future__ import annotations

from collections.abc import Sequence

from pal_slurm.placement.model import Decision, JobRequest, PlacementContext, Snapshot
from pal_slurm.placement.orders import QueueOrder, queue_window
from pal_slurm.placement.base import Policy


def decide(policy: Policy, order: QueueOrder | None, snapshot: Snapshot, queue: Sequence[JobRequest],
           ctx: PlacementContext, *, backfill: bool = True) -> Decision:
    """Place `queue` on `snapshot` with `policy`.

    `order` sorts the waiting jobs (None: `queue` already is in queue order, as a
    simulator that keeps its queue sorted passes it). `backfill=False` cuts the window
    right after the first job that does not fit, even for a backfilling policy: an event
    simulator does so between backfill intervals (sched/backfill's bf_interval), a pass
    that only Slurm's main scheduler would make.
    """
    ordered = queue if order is None else order(queue)  # no copy: a congested queue holds thousands
    window = queue_window(ordered, len(snapshot.free), policy.lookahead if backfill else 0)
    return policy.place(snapshot, window, ctx)
