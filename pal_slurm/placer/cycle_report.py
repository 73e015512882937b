"""What one cycle did, job ids by outcome: the daemon's log line, `sd_notify` status and the
JSON `pal placer --once` prints."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class CycleReport:
    held: int = 0
    placed: list[str] = field(default_factory=list)
    released: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)
    replanned: list[str] = field(default_factory=list)
    observed: list[str] = field(default_factory=list)
    restored: list[str] = field(default_factory=list)
    extended: list[str] = field(default_factory=list)
    waits: list[str] = field(default_factory=list)  # jobs waiting on purpose for better GPUs
    seconds: float = 0.0

    def as_dict(self) -> dict[str, object]:
        return {"held": self.held, "placed": self.placed, "released_unchanged": self.released, "failed": self.failed,
                "waiting": self.waiting, "waiting_for_better_gpus": self.waits, "replanned": self.replanned,
                "restored": self.restored, "extended": self.extended, "observed": self.observed,
                "seconds": round(self.seconds, 3)}

    @property
    def changed(self) -> bool:
        """Whether the cycle changed anything in Slurm (worth a log line)."""
        return bool(self.placed or self.released or self.failed or self.replanned or self.restored or self.extended)

    def line(self) -> str:
        """One log line: the counts, and the job ids of what changed."""
        parts = [f"held {self.held}"]
        for label, ids in (("placed", self.placed), ("released unchanged", self.released), ("failed", self.failed),
                           ("re-planned", self.replanned), ("restored", self.restored),
                           ("hold extended", self.extended), ("waiting for better GPUs", self.waits)):
            if ids:
                shown = ",".join(ids[:10]) + (f",+{len(ids) - 10}" if len(ids) > 10 else "")
                parts.append(f"{label} {len(ids)} ({shown})")
        parts.append(f"waiting {len(self.waiting)}")
        return "; ".join(parts) + f"; {self.seconds:.2f} s"


__all__ = ["CycleReport"]
