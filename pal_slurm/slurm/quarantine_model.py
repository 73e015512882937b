"""One GPU slot out of service without draining its node: the mechanism's words (pure): the slot,
the holder job's tag, the holders Slurm shows, the commands that submit, tag and cancel one.

The mechanism (docs/admin-guide.md, "One GPU out of service", with the experiments on Slurm
22.05, 24.11 and 26.05): a *holder job* pinned to the slot. Every slot has a GRES type of its
own (`<model>_g<minor>`, pal_slurm.slurm.gresconf), so a job asking for that type on that node
gets exactly that GPU; while the holder runs, no other job can be given it, whatever it asks
for (typed, untyped, `--gpus`, `--gpus-per-node`, `--exclusive`), and the node's other GPUs
keep taking jobs. It is slurmctld's own state: it holds with no placer running and across
`scontrol reconfigure` and restarts of slurmctld and slurmd. What Slurm offers instead does
not work: `scontrol update NodeName=N Gres=...` may not lower a GPU count configured with
`File=` (every version), and a reservation cannot hold a GRES on 22.05 and needs slurmdbd
from 23.11 on.

The holder asks for as little as a job can: one task, one CPU, 1 MB, the slot's type, the
node; the partition's default time limit at submission (a longer one could be refused there:
EnforcePartLimits), then none, by `scontrol update` (an administrator's limit is exempt from the
partition's MaxTime), the top priority (`--priority=TOP`: when the slot
is busy it waits, and takes the slot before any other job once the job on it ends),
`--requeue` (a node failure puts it back in the queue instead of ending it; Slurm gives a
requeued job a begin time two minutes ahead, and `pal gpus quarantine` again moves it to now).
It runs `sleep`.

The holder is known by its admin comment (only an administrator can set one), `pal: quarantine
slot=NODE:MINOR type=TYPE at=EPOCH by=USER: REASON`; between its submission and that update it
carries the same text in its comment, which counts only for a job of the user pal runs as.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pal_slurm.slurm.gresconf import natural_key, slot_of_type
from pal_slurm.slurm.hostlist import expand_nodes
from pal_slurm.slurm.model import Slot, SlurmJob, SlurmNode
from pal_slurm.slurm.tres import parsed_gres_alloc, parsed_tres

#: the holder's job name
HOLDER_NAME = "pal-quarantine"
#: the head of the holder's admin comment
TAG_HEAD = "pal: quarantine"
#: where the job id goes in a dry run's `scontrol update` (sbatch prints it when it runs)
JOB_ID_PLACEHOLDER = "<job id sbatch prints>"
#: what the holder runs on the node
HOLDER_SCRIPT = "exec sleep infinity"

_GPU = re.compile(r"^(?P<node>[A-Za-z0-9][A-Za-z0-9._-]*):(?P<minor>\d{1,3})$")
_TAG = re.compile(r"^pal: quarantine slot=(?P<node>\S+):(?P<minor>\d+) type=(?P<type>\S+) at=(?P<at>\d+) "
                  r"by=(?P<by>\S+)(?:: (?P<reason>.*))?$", re.DOTALL)
_REASON_BAD = re.compile(r"[\x00-\x1f\x7f|]")


class Refused(ValueError):
    """The quarantine or release must not be done; the message says why (one line)."""


def parse_gpu(text: str) -> tuple[str, int] | None:
    """`node:minor` -> (node, minor); None for anything else (a UUID, a typo)."""
    m = _GPU.match(text.strip())
    return (m.group("node"), int(m.group("minor"))) if m else None


def node_slots(node: SlurmNode) -> dict[int, str]:
    """Minor -> per-slot GRES type of a node's configured GPUs."""
    return {m: str(u.type) for u in parsed_gres_alloc(node.gres)
            if u.name == "gpu" and (m := slot_of_type(u.type)) is not None}


def gpu_count(node: SlurmNode) -> int:
    """How many GPUs a node has configured (typed or not)."""
    return sum(u.count for u in parsed_gres_alloc(node.gres) if u.name == "gpu")


def find_slot(nodes: Sequence[SlurmNode], node_name: str, minor: int) -> Slot:
    """The slot an administrator named, as Slurm has it; Refused when Slurm has no such slot."""
    by_name = {n.name: n for n in nodes}
    node = by_name.get(node_name)
    if node is None:
        known = ", ".join(sorted(by_name, key=natural_key)[:8]) + (" ..." if len(by_name) > 8 else "")
        raise Refused(f"{node_name}: not a node Slurm knows (nodes: {known or 'none'})")
    slots = node_slots(node)
    if not slots:
        raise Refused(f"{node_name}: its GPUs have no per-slot GRES types (Gres={node.gres or '(none)'}), so no "
                      "one GPU of it can be held apart: configure them first (`pal slurm gres-conf`)")
    if minor not in slots:
        raise Refused(f"{node_name} has no GPU slot {minor} in Slurm (slots: "
                      f"{', '.join(str(m) for m in sorted(slots))})")
    return Slot(node_name, minor, slots[minor])


@dataclass(frozen=True)
class QuarantineTag:
    """What the holder's admin comment records: the slot, when, by whom and why."""

    slot: Slot
    at: int
    by: str
    reason: str = ""

    def render(self) -> str:
        text = f"{TAG_HEAD} slot={self.slot.name} type={self.slot.gres_type} at={self.at} by={self.by}"
        return f"{text}: {self.reason}" if self.reason else text

    @classmethod
    def parse(cls, text: str | None) -> QuarantineTag | None:
        m = _TAG.match((text or "").strip())
        if m is None:
            return None
        slot = Slot(m.group("node"), int(m.group("minor")), m.group("type"))
        return cls(slot, int(m.group("at")), m.group("by"), (m.group("reason") or "").strip())


def is_holder(job: SlurmJob) -> bool:
    """Whether a job is a holder by its admin comment (only an administrator writes one)."""
    return job.admin_comment.startswith(TAG_HEAD) and QuarantineTag.parse(job.admin_comment) is not None


def clean_reason(text: str) -> str:
    """The reason as the tag keeps it: one line, no `|` (the admin comment's separator), at most
    200 characters; Refused for one that says nothing."""
    reason = " ".join(_REASON_BAD.sub(" ", text).split())
    if not reason:
        raise Refused("give a reason (--reason): the holder job carries it, and so does the audit")
    return reason[:200]


@dataclass(frozen=True)
class Holder:
    """A quarantine as Slurm shows it: the holder job, its slot and state."""

    job_id: str
    tag: QuarantineTag
    state: str
    state_reason: str
    #: whether slurmctld has recorded the tag in the admin comment (else only the comment has it)
    tagged: bool = True

    @property
    def slot(self) -> Slot:
        return self.tag.slot

    @property
    def holds(self) -> bool:
        """The holder runs on the slot: no other job can get it."""
        return self.state in ("RUNNING", "CONFIGURING")

    @property
    def waiting(self) -> bool:
        """The holder waits for the slot (busy with a job that is left to finish)."""
        return self.state == "PENDING"

    @property
    def requeued(self) -> bool:
        """Its node failed and Slurm requeued it with a begin time about two minutes ahead (the
        credential lifetime): until then any job may take the slot. `start_now_argv` ends that."""
        return self.waiting and self.state_reason == "BeginTime"


def holders(jobs: Iterable[SlurmJob], pal_user: str) -> list[Holder]:
    """The quarantines in Slurm's jobs: holders pending or running, by slot. A job counts by its
    admin comment, or, before that is written, by its name and comment when it is `pal_user`'s;
    its GPU request must name the slot its tag names."""
    out = []
    for job in jobs:
        if not (job.pending or job.running):
            continue
        tag = QuarantineTag.parse(job.admin_comment)
        tagged = tag is not None
        if tag is None and job.name == HOLDER_NAME and job.user == pal_user:
            tag = QuarantineTag.parse(job.comment)
        if tag is None or tag.slot.gres_type not in parsed_tres(job.tres_per_node).gpu_types:
            continue
        if expand_nodes(job.required_nodes or job.nodes) != [tag.slot.node]:
            continue
        out.append(Holder(job.job_id, tag, job.state, job.state_reason, tagged))
    return sorted(out, key=lambda h: (natural_key(h.slot.node), h.slot.minor, int(h.job_id.split("_")[0])))


@dataclass(frozen=True)
class Partition:
    """What the holder's partition is chosen by: its nodes, PriorityTier and state."""

    name: str
    nodes: frozenset[str]
    tier: int = 1
    up: bool = True


@dataclass(frozen=True)
class SlurmState:
    """One read of what a quarantine is planned on: nodes, the GPU jobs (pending and running),
    partitions, and the quarantines among the jobs."""

    nodes: tuple[SlurmNode, ...]
    jobs: tuple[SlurmJob, ...]
    partitions: tuple[Partition, ...]
    holders: tuple[Holder, ...]


def jobs_on(slot: Slot, jobs: Iterable[SlurmJob]) -> list[str]:
    """The running jobs (not holders) that hold the slot now, from their per-node GRES detail."""
    out = []
    for job in jobs:
        if not job.running or is_holder(job):
            continue
        for node, detail in zip(expand_nodes(job.nodes), job.gres_detail):
            if node == slot.node and any(u.name == "gpu" and u.type == slot.gres_type and u.count > 0
                                         for u in parsed_gres_alloc(detail)):
                out.append(job.job_id)
    return out


def holder_partition(partitions: Sequence[Partition], node: str) -> str:
    """The partition the holder is submitted to: an UP one holding the node, of the highest
    PriorityTier (Slurm schedules higher tiers first, and with preemption by partition priority
    a lower tier's job could be preempted); Refused when there is none."""
    fits = [p for p in partitions if p.up and node in p.nodes]
    if not fits:
        raise Refused(f"{node}: in no partition that is UP, so no holder job can run there")
    return max(fits, key=lambda p: p.tier).name


def submit_argv(slot: Slot, partition: str, tag: QuarantineTag) -> list[str]:
    """The holder's sbatch (argument list; `--parsable` prints the job id)."""
    return ["sbatch", "--parsable", f"--job-name={HOLDER_NAME}", f"--partition={partition}",
            f"--nodelist={slot.node}", "--nodes=1", "--ntasks=1", "--cpus-per-task=1", "--mem=1",
            f"--gres=gpu:{slot.gres_type}:1", "--priority=TOP", "--requeue",
            "--output=/dev/null", f"--comment={tag.render()}", f"--wrap={HOLDER_SCRIPT}"]


def tag_argv(job_id: str, tag: QuarantineTag) -> list[str]:
    """Tag the holder (admin comment) and make its time limit an administrator's (exempt from the
    partition's MaxTime)."""
    return ["scontrol", "update", f"JobId={job_id}", f"AdminComment={tag.render()}", "TimeLimit=UNLIMITED"]


def start_now_argv(job_id: str) -> list[str]:
    """A requeued holder eligible at once (it takes the slot at the next scheduling pass)."""
    return ["scontrol", "update", f"JobId={job_id}", "StartTime=now"]


def release_argv(job_id: str) -> list[str]:
    return ["scancel", job_id]


def shown(argv: Sequence[str]) -> str:
    """A command as a shell would take it, for the dry run's `would run:` lines."""
    return shlex.join(argv)


def job_id_of(sbatch_output: str) -> str:
    """The job id `sbatch --parsable` printed (`123` or `123;cluster`); Refused when none."""
    first = sbatch_output.strip().split(";")[0].strip()
    if not first.isdigit():
        raise Refused(f"sbatch printed no job id ({sbatch_output.strip()[:80]!r})")
    return first


__all__ = ["HOLDER_NAME", "Holder", "JOB_ID_PLACEHOLDER", "Partition", "Slot", "QuarantineTag", "Refused",
           "SlurmState", "TAG_HEAD", "clean_reason", "find_slot", "gpu_count", "holder_partition", "holders",
           "is_holder", "job_id_of", "jobs_on", "node_slots", "parse_gpu", "release_argv", "shown", "start_now_argv",
           "submit_argv", "tag_argv"]
