"""The jobs that wait on purpose for better GPUs, from one cycle to the next (pure).

Why kept: a wait (pal-backfill's: a job that could start now waits for GPUs expected free
soon) is audited when it starts or its target changes, not every cycle, and the placement
that ends it says how long the job waited and for which GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pal_slurm.placement.model import Decision, Wait
from pal_slurm.placer.cluster_view import View


@dataclass
class Waits:
    """Job id -> (waiting since, the GPUs it waits for, by name)."""

    by_job: dict[str, tuple[float, tuple[str, ...]]] = field(default_factory=dict)

    def note(self, decision: Decision, view: View, now: float) -> list[tuple[Wait, tuple[str, ...]]]:
        """Remember `decision`'s waits, forgetting jobs that no longer wait (placed elsewhere or
        gone); the waits that started or changed target, each with its target's GPU names."""
        current = {w.job_id for w in decision.waits}
        for job_id in list(self.by_job):
            if job_id not in current and job_id not in decision.as_dict():
                del self.by_job[job_id]
        changed: list[tuple[Wait, tuple[str, ...]]] = []
        for w in decision.waits:
            target = tuple(view.slots[g].name for g in w.gpus)
            since, before = self.by_job.get(w.job_id, (now, ()))
            self.by_job[w.job_id] = (since, target)
            if before != target:
                changed.append((w, target))
        return changed

    def pop(self, job_id: str) -> tuple[float, tuple[str, ...]] | None:
        """A job's wait, forgotten: it is placed or released."""
        return self.by_job.pop(job_id, None)

    def clear(self) -> None:
        self.by_job.clear()


__all__ = ["Waits"]
