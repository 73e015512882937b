"""Queue orders: which waiting job comes first.

Each order is a pure function ``(jobs) -> list`` that sorts a copy and never drops or
adds a job. Python's sort is stable, so jobs that tie on every key keep the order they
came in: that is the "stable input order" FIFO falls back to, and the reason LAS and
SRTF break their ties by FIFO simply by sorting on (key, submit_time).

``ORDERS`` maps the names the CLI and the config accept to the functions;
``get_order`` turns an unknown name into a ValueError that lists the valid ones.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from pal_slurm.placement.model import JobRequest, PlacementError

QueueOrder = Callable[[Sequence[JobRequest]], list[JobRequest]]


def fifo(jobs: Sequence[JobRequest]) -> list[JobRequest]:
    """First come, first served: submit_time ascending, ties in input order."""
    return sorted(jobs, key=lambda j: j.submit_time)


def las(jobs: Sequence[JobRequest]) -> list[JobRequest]:
    """Least attained service first (attained_s ascending), ties FIFO."""
    return sorted(jobs, key=lambda j: (j.attained_s, j.submit_time))


def srtf(jobs: Sequence[JobRequest]) -> list[JobRequest]:
    """Shortest remaining time first (remaining_s ascending), ties FIFO."""
    return sorted(jobs, key=lambda j: (j.remaining_s, j.submit_time))


def slurm(jobs: Sequence[JobRequest]) -> list[JobRequest]:
    """Slurm's own order: partition PriorityTier (higher first), then the job priority
    Slurm reports (higher first), then submit time; ties in input order. With every tier
    and priority equal (the simulators) this is FIFO."""
    return sorted(jobs, key=lambda j: (-j.tier, -j.priority, j.submit_time))


ORDERS: dict[str, QueueOrder] = {"fifo": fifo, "las": las, "srtf": srtf, "slurm": slurm}


def get_order(name: str) -> QueueOrder:
    """The queue order called `name`; PlacementError (a ValueError) naming the valid ones otherwise."""
    try:
        return ORDERS[name]
    except KeyError:
        raise PlacementError(f"unknown queue order {name!r}; valid: {', '.join(ORDERS)}") from None


T = TypeVar("T")


def _requested(job: JobRequest) -> int:
    return job.gpus


def queue_window(queue: Sequence[T], capacity: int, lookahead: int,
                 gpus: Callable[[T], int] = _requested) -> list[T]:  # type: ignore[assignment]
    """The part of an ordered queue a policy can act on: the prefix whose GPU demand fits
    `capacity`, the first job that does not (it blocks a non-backfilling policy), and
    `lookahead` more for a backfilling one (`Policy.lookahead`). For the artifact's
    policies this is exactly equivalent to the whole queue, and it keeps a decision cheap
    when thousands of jobs wait; the simulators and the daemon all window the same way."""
    demand = 0
    for i, job in enumerate(queue):
        demand += gpus(job)
        if demand > capacity:
            return list(queue[: i + 1 + lookahead])
    return list(queue)
