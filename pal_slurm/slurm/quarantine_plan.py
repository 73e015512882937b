"""What `pal gpus quarantine` and `pal gpus release` would do, from one read of Slurm (pure).

A plan names the slot as Slurm has it, the holder jobs already there, the commands to run and
every reason not to run them: a slot Slurm does not have, a partition that cannot hold the
holder, pending jobs the quarantine would leave with nowhere to run (quarantine_shapes). The
mechanism and its words are in quarantine_model.py; the commands run through
pal_slurm/placer/writer.py (`quarantine`, `release_quarantine`).
"""

from __future__ import annotations

from dataclasses import dataclass

from pal_slurm.slurm import quarantine_shapes
from pal_slurm.slurm.quarantine_model import (
    JOB_ID_PLACEHOLDER,
    Holder,
    Slot,
    QuarantineTag,
    Refused,
    SlurmState,
    find_slot,
    holder_partition,
    jobs_on,
    release_argv,
    start_now_argv,
    submit_argv,
    tag_argv,
)
from pal_slurm.slurm.quarantine_shapes import Blocked


@dataclass(frozen=True)
class QuarantinePlan:
    """Take `slot` out of service: submit the holder to `partition` with `tag`, unless `present`
    (the slot is out of service already, or going there: then only a holder requeued after a
    node failure is started at once) or `blocked` pending jobs refuse it."""

    slot: Slot
    partition: str
    tag: QuarantineTag
    #: holders of this slot Slurm shows already (nothing to do)
    present: tuple[Holder, ...] = ()
    #: running jobs on the slot now: they finish untouched, the holder takes the slot after them
    busy: tuple[str, ...] = ()
    blocked: tuple[Blocked, ...] = ()
    unchecked: tuple[str, ...] = ()
    forced: bool = False

    @property
    def refused(self) -> bool:
        return bool(self.blocked) and not self.forced

    @property
    def requeued(self) -> tuple[Holder, ...]:
        """Holders of the slot requeued after a node failure, waiting out their begin time."""
        return tuple(h for h in self.present if h.requeued)

    @property
    def commands(self) -> list[list[str]]:
        """What --apply runs, in order: a requeued holder started at once; else the holder
        submitted and tagged (the job id of the second is the one sbatch prints)."""
        if self.present:
            return [start_now_argv(h.job_id) for h in self.requeued]
        return [submit_argv(self.slot, self.partition, self.tag), tag_argv(JOB_ID_PLACEHOLDER, self.tag)]


def plan_quarantine(state: SlurmState, node: str, minor: int, *, reason: str, user: str, now: float,
                    partition: str | None = None, force: bool = False) -> QuarantinePlan:
    """The quarantine of `node:minor`; Refused when Slurm has no such slot or no partition for
    the holder (a refusal for pending jobs is the plan's `refused`, so that it can name them)."""
    slot = find_slot(state.nodes, node, minor)
    tag = QuarantineTag(slot, int(now), user, reason)
    present = tuple(h for h in state.holders if _same(h.slot, slot))
    if present:
        return QuarantinePlan(slot, partition or "", tag, present=present)
    if partition is None:
        partition = holder_partition(state.partitions, slot.node)
    else:
        _check_partition(state, partition, slot.node)
    check = quarantine_shapes.check(state.jobs, state.nodes, state.partitions, [h.slot for h in state.holders],
                                    slot, skip={h.job_id for h in state.holders})
    return QuarantinePlan(slot, partition, tag, busy=tuple(jobs_on(slot, state.jobs)), blocked=check.blocked,
                          unchecked=check.unchecked, forced=force)


def _check_partition(state: SlurmState, name: str, node: str) -> None:
    part = next((p for p in state.partitions if p.name == name), None)
    if part is None:
        raise Refused(f"--partition {name}: not a partition Slurm knows "
                      f"({', '.join(p.name for p in state.partitions) or 'none'})")
    if node not in part.nodes:
        raise Refused(f"--partition {name} does not hold {node}: its holder job could never run")
    if not part.up:
        raise Refused(f"--partition {name} is not UP: its holder job would not start")


def _same(a: Slot, b: Slot) -> bool:
    return (a.node, a.minor) == (b.node, b.minor)


@dataclass(frozen=True)
class ReleasePlan:
    """Put `slot` back in service: cancel its holders (none: it is not out of service)."""

    slot: Slot
    holders: tuple[Holder, ...]

    @property
    def commands(self) -> list[list[str]]:
        return [release_argv(h.job_id) for h in self.holders]


def plan_release(state: SlurmState, node: str, minor: int) -> ReleasePlan:
    """The release of `node:minor`: its holders as Slurm shows them. A slot Slurm no longer has
    (a node removed from slurm.conf) is still released when a holder names it; otherwise Refused."""
    mine = tuple(h for h in state.holders if (h.slot.node, h.slot.minor) == (node, minor))
    if mine:
        return ReleasePlan(mine[0].slot, mine)
    return ReleasePlan(find_slot(state.nodes, node, minor), ())


__all__ = ["QuarantinePlan", "ReleasePlan", "plan_quarantine", "plan_release"]
