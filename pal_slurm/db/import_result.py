"""What one import did: the counts `pal profile import` prints and the FILE:LINE warnings.

Apart from the store because both halves of an import add to it: the measurement store (runs,
benchmarks, nodes, suspect scores) and the GPU identity resolution (new, merged, moved GPUs and
the conflicts it reports).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pal_slurm.ingest.records import ProfileRecord

__all__ = ["ImportResult", "record_at"]


@dataclass
class ImportResult:
    records: int = 0
    added: int = 0
    already_present: int = 0
    new_gpus: int = 0  # net: how many rows the gpus table grew by (a merge takes one away)
    new_nodes: int = 0
    benchmarks: set[str] = field(default_factory=set)
    rejected: int = 0  # suspect scores left out (FILE:LINE in warnings)
    quarantined: int = 0  # suspect scores stored with profile_runs.quarantine set (--keep-suspect)
    merged_gpus: int = 0  # slot identities (slot:NODE:DEV) merged into the GPU's real UUID
    resolved_runs: int = 0  # runs of a slot-named row stored on the GPU known at that slot
    conflicts: int = 0  # identity conflicts reported, never merged
    model_conflicts: int = 0  # GPUs stored as another model than --model says (the stored one is kept)
    moved_gpus: int = 0  # GPUs put on another node than the one they were recorded on (allow_move only)
    warnings: list[str] = field(default_factory=list)  # "FILE:LINE: reason", for stderr

    def merge(self, other: "ImportResult") -> None:
        for name in ("records", "added", "already_present", "new_gpus", "new_nodes", "rejected", "quarantined",
                     "merged_gpus", "resolved_runs", "conflicts", "model_conflicts", "moved_gpus"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.benchmarks |= other.benchmarks
        self.warnings.extend(other.warnings)


def record_at(rec: ProfileRecord) -> str:
    """Where a record came from, as every warning names it: FILE:LINE."""
    return f"{rec.source_file}:{rec.line}"
