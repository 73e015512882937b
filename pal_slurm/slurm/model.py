"""What pal-slurm knows about Slurm's jobs and nodes: typed, version-neutral records.

The JSON parsers (parse_json.py) turn 22.05 and 24.11 output into these; the placer
reads nothing else, so a future Slurm schema change touches one parser, not the daemon.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from pal_slurm.slurm.tres import TresList, parsed_tres

#: node states in which a node can take new jobs (flags such as DRAIN are checked separately)
SCHEDULABLE_STATES = frozenset({"IDLE", "MIXED", "ALLOCATED", "COMPLETING", "PLANNED"})

# Which node states and flags mean what: the one definition (the cluster view, the rescue of
# stranded placements and `pal gpus drain` ask these questions). Each set holds the one before.
#: a drain asked for, under way or done: someone (an admin, `pal gpus drain`, a health check)
#: took the node out of service, with a reason of their own
DRAIN_FLAGS = frozenset({"DRAIN", "DRAINING", "DRAINED"})
#: states and flags of a node that stays out of service until someone acts: a job pinned to it
#: never starts there
OUT_OF_SERVICE = DRAIN_FLAGS | {"DOWN", "FAIL", "FAILING", "INVALID", "INVALID_REG", "FUTURE", "MAINTENANCE",
                                "POWERED_DOWN", "POWER_DOWN"}
#: flags that keep new jobs off a node: out of service, or for now (reserved, not responding,
#: rebooting, powering up or down, in an unknown state)
BLOCKING_FLAGS = OUT_OF_SERVICE | {"RESERVED", "NOT_RESPONDING", "NO_RESPOND", "POWERING_DOWN", "POWERING_UP",
                                   "REBOOT", "REBOOT_REQUESTED", "REBOOT_ISSUED", "UNKNOWN"}


class GpuRequestField(StrEnum):
    """Where a job's GPU request lives: per node (`--gres`, `--gpus-per-node`) or per job
    (`--gpus`). Its value is the SlurmJob field; `scontrol_key` the key `scontrol update` takes."""

    PER_NODE = "tres_per_node"
    PER_JOB = "tres_per_job"

    @property
    def scontrol_key(self) -> str:
        return "TresPerNode" if self is GpuRequestField.PER_NODE else "TresPerJob"

    def of(self, job: SlurmJob) -> str:
        """The job's request in this field."""
        return job.tres_per_node if self is GpuRequestField.PER_NODE else job.tres_per_job


@dataclass(frozen=True)
class SlurmJob:
    """One job as squeue/scontrol report it (only what placement and auditing need)."""

    job_id: str
    name: str
    user: str
    state: str  # PENDING, RUNNING, ... (upper case)
    state_reason: str
    priority: int | None  # None: unknown
    partition: str
    submit_time: float
    tres_per_node: str = ""
    tres_per_job: str = ""
    tres_per_task: str = ""
    tres_per_socket: str = ""
    required_nodes: str = ""
    excluded_nodes: str = ""
    features: str = ""
    comment: str = ""
    admin_comment: str = ""
    command: str = ""
    account: str = ""
    nodes: str = ""  # allocated (running) or empty
    node_count: int = 1
    cpus: int = 1  # total CPUs requested
    min_cpus_per_node: int = 1
    memory_per_node_mb: int | None = None
    memory_per_cpu_mb: int | None = None
    gres_detail: tuple[str, ...] = ()
    array_job_id: str = ""
    array_task: str = ""  # pending array: the task string; one task: its id
    het_job_id: str = ""
    exclusive: bool = False
    start_time: float | None = None
    #: when the job may start (its begin time; squeue's `eligible_time`, 22.05 and 24.11);
    #: None when unset (0), e.g. for a job held with priority 0
    begin_time: float | None = None
    #: the most nodes it may span (`-N 1-3`: 3); None when unset (squeue says 0)
    max_nodes: int | None = None
    #: its time limit in seconds; None when unlimited
    time_limit_s: float | None = None
    #: a running job's expected end (its start + time limit); None when unknown
    end_time: float | None = None

    @property
    def pending(self) -> bool:
        return self.state == "PENDING"

    def begins_after(self, now: float) -> bool:
        """Whether the job waits for a begin time still ahead of `now`."""
        return self.begin_time is not None and self.begin_time > now

    @property
    def running(self) -> bool:
        return self.state in ("RUNNING", "COMPLETING", "CONFIGURING")

    def tres(self, field_name: str) -> TresList:
        return parsed_tres(getattr(self, field_name))

    def memory_on_node_mb(self) -> int:
        """Memory this job needs on each node (per-CPU requests scaled by CPUs per node)."""
        if self.memory_per_node_mb:
            return self.memory_per_node_mb
        if self.memory_per_cpu_mb:
            return self.memory_per_cpu_mb * max(self.min_cpus_per_node, self.cpus // max(self.node_count, 1), 1)
        return 0


@dataclass(frozen=True)
class SlurmNode:
    """One node: schedulability, resources, features, and which GPU slots are in use."""

    name: str
    state: str  # base state, upper case (IDLE, MIXED, ALLOCATED, DOWN, ...)
    flags: frozenset[str]
    cpus: int
    alloc_cpus: int
    real_memory_mb: int
    alloc_memory_mb: int
    features: frozenset[str]
    active_features: frozenset[str]
    partitions: tuple[str, ...]
    gres: str  # configured, e.g. gpu:v100_g0:1,gpu:v100_g1:1
    gres_used: str  # in use, e.g. gpu:v100_g0:1(IDX:0),gpu:v100_g1:0(IDX:N/A)
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def schedulable(self) -> bool:
        return self.state in SCHEDULABLE_STATES and not (self.flags & BLOCKING_FLAGS)

    @property
    def out_of_service(self) -> frozenset[str]:
        """Its state and flags that keep it out of service until someone acts (OUT_OF_SERVICE);
        empty when there are none."""
        return (self.flags | {self.state}) & OUT_OF_SERVICE

    @property
    def drained_or_down(self) -> bool:
        """Taken out of service already, maybe by someone other than pal: a drain asked for,
        under way or done, or down."""
        return bool(self.flags & DRAIN_FLAGS) or self.state == "DOWN"

    @property
    def free_cpus(self) -> int:
        return max(self.cpus - self.alloc_cpus, 0)

    @property
    def free_memory_mb(self) -> int:
        return max(self.real_memory_mb - self.alloc_memory_mb, 0)


@dataclass(frozen=True)
class Slot:
    """One steerable GPU: node, device minor, and the GRES type that names exactly it."""

    node: str
    minor: int
    gres_type: str

    @property
    def name(self) -> str:
        """`node:minor`, as the audit and the log name a GPU."""
        return f"{self.node}:{self.minor}"
