"""The Slurm adapter's one interface, and its backends.

Why an interface: the placer must run against the scontrol/squeue/sinfo commands every
Slurm has, against slurmrestd where a site prefers REST for reads, and against pyslurm
when its version matches. What the placer needs is small: read jobs and nodes, update a
pending job, hold and release (both kinds of hold: priority 0 through `release`/`hold`, a
begin time through `start_now`/`set_begin`). Writes always go through scontrol, because slurmrestd's
v0.0.38 job update has no AdminComment or required-node field and clears `gres` only to
`TresPerNode=gres:`, so a GPU request cannot be retyped through it (checked on 22.05.8).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Protocol

from pal_slurm.errors import ConfigError
from pal_slurm.slurm.cli_backend import CliBackend
from pal_slurm.slurm.command import run_command
from pal_slurm.slurm.gres_compare import SlurmNodeGres
from pal_slurm.slurm.model import SlurmJob, SlurmNode
from pal_slurm.slurm.priority import PriorityConfig
from pal_slurm.slurm.pyslurm_backend import PyslurmBackend
from pal_slurm.slurm.rest_backend import RestBackend


class SlurmBackend(Protocol):
    """Everything pal-slurm asks of Slurm."""

    name: str

    def version(self) -> tuple[int, int]: ...

    def jobs(self, only: Collection[str] | None = None) -> list[SlurmJob]:
        """The jobs the placer acts on that are not finished: GPU jobs and jobs with a
        pal-slurm tag (parse_squeue.placer_needs), running ones with their GPU slots
        (`gres_detail`); with `only`, just those ids. A queue's other jobs are not read."""
        ...

    def nodes(self) -> list[SlurmNode]: ...

    def update_job(self, job_id: str, fields: Sequence[tuple[str, str]]) -> None: ...

    def release(self, job_id: str) -> None:
        """End a priority-0 hold (`scontrol release`)."""
        ...

    def hold(self, job_id: str) -> None:
        """Hold with priority 0 (`scontrol hold`)."""
        ...

    def start_now(self, job_id: str) -> None:
        """End a begin-time hold: the job may start now (`StartTime=now`)."""
        ...

    def set_begin(self, job_id: str, epoch: float, now: float) -> None:
        """Hold (or keep holding) a pending job until `epoch` through its begin time; `now` is
        the caller's clock (the placer's injected one), which the hold is counted from."""
        ...

    def partition_tiers(self) -> dict[str, int]:
        """Partition name -> PriorityTier (Slurm's first sort key)."""
        ...

    def drain_node(self, name: str, reason: str) -> None:
        """Drain one node, named exactly (never ALL, a NodeSet or a hostlist), with `reason`."""
        ...

    def priority_config(self) -> PriorityConfig:
        """The priority plugin and its age weight (see pal_slurm.slurm.priority)."""
        ...



BACKENDS = ("cli", "rest", "pyslurm")


def read_node_gres(timeout: float = 30.0, env: Mapping[str, str] | None = None) -> list[SlurmNodeGres]:
    """Each node's configured GRES and features as slurmctld reports them (`scontrol show node`),
    for comparing Slurm's configuration with the inventory."""
    from pal_slurm.slurm.nodeinfo import parse_show_node

    return parse_show_node(run_command(["scontrol", "show", "node", "-o"], timeout=timeout, env=env).stdout)


def make_backend(name: str, *, rest_url: str | None = None, rest_api: str = "v0.0.38",
                 timeout: float = 30.0) -> SlurmBackend:
    """The backend a configuration names; ConfigError with the valid names otherwise."""
    if name == "cli":
        return CliBackend(timeout=timeout)
    if name == "rest":
        if not rest_url:
            raise ConfigError("placer.slurm_backend = \"rest\" needs placer.rest_url")
        return RestBackend(rest_url, api=rest_api, timeout=timeout)
    if name == "pyslurm":
        return PyslurmBackend(timeout=timeout)
    raise ConfigError(f"unknown Slurm backend {name!r}; valid: {', '.join(BACKENDS)}")
