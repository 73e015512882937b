"""The Slurm side of taking one GPU slot out of service: read what Slurm shows, submit, tag and
cancel holder jobs (pal_slurm/slurm/quarantine_plan.py says what to run and why; the mechanism
and its words are in quarantine_model.py).

Every command is an argument list through pal_slurm.slurm.command (never a shell), reads go
through the CLI backend (`squeue`, `sinfo`/`scontrol show node`), and what is quarantined is
read back from Slurm's own jobs each time: a restarted tool, or a placer that is not running,
sees the same. The writes are called by the one writer (pal_slurm/placer/writer.py:
`quarantine`, `release_quarantine`), which logs them.
"""

from __future__ import annotations

from collections.abc import Sequence

from pal_slurm.errors import SlurmError
from pal_slurm.slurm.cli_backend import CliBackend
from pal_slurm.slurm.command import run_command
from pal_slurm.slurm.hostlist import expand_nodes
from pal_slurm.slurm.nodeinfo import parse_kv_line
from pal_slurm.slurm.quarantine_model import (
    Holder,
    Partition,
    QuarantineTag,
    SlurmState,
    holders,
    job_id_of,
    release_argv,
    start_now_argv,
    tag_argv,
)

def parse_partitions(text: str) -> list[Partition]:
    """`scontrol show partition -o` -> partitions with their nodes, PriorityTier and state."""
    out = []
    for line in text.splitlines():
        if not line.startswith("PartitionName="):
            continue
        kv = parse_kv_line(line)
        nodes = kv.get("Nodes", "")
        try:
            tier = int(kv.get("PriorityTier", "1"))
        except ValueError:
            tier = 1
        out.append(Partition(kv["PartitionName"], frozenset(expand_nodes(nodes) if nodes not in ("", "(null)") else ()),
                             tier, kv.get("State", "UP") == "UP"))
    return out


class QuarantineSlurm:
    """Reads and writes of holder jobs, through the CLI backend's commands and timeout."""

    def __init__(self, backend: CliBackend, *, pal_user: str) -> None:
        self.backend = backend
        self.pal_user = pal_user

    def _run(self, argv: Sequence[str]) -> str:
        return run_command(argv, timeout=self.backend.timeout, env=self.backend.env).stdout

    def read(self) -> SlurmState:
        """Nodes, the running GPU jobs (with their GPU slots) and every pending job, partitions,
        and the quarantines among the jobs."""
        nodes = tuple(self.backend.nodes())
        running = [j for j in self.backend.jobs() if not j.pending]
        jobs = tuple(running + self.backend.pending_jobs())
        partitions = tuple(parse_partitions(self._run(["scontrol", "show", "partition", "-o"])))
        return SlurmState(nodes, jobs, partitions, tuple(holders(jobs, self.pal_user)))

    def holders(self) -> list[Holder]:
        """The quarantines Slurm shows now."""
        return holders(self.backend.jobs(), self.pal_user)

    def submit(self, argv: Sequence[str]) -> str:
        """Submit the holder (`quarantine_model.submit_argv`); its job id."""
        return job_id_of(self._run(argv))

    def tag(self, job_id: str, tag: QuarantineTag) -> None:
        self._run(tag_argv(job_id, tag))

    def start_now(self, job_id: str) -> None:
        self._run(start_now_argv(job_id))

    def cancel(self, job_id: str) -> None:
        if not job_id.isdigit():
            raise SlurmError(f"not a holder job id: {job_id!r}")
        self._run(release_argv(job_id))


__all__ = ["QuarantineSlurm", "SlurmState", "parse_partitions"]
