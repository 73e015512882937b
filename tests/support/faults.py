"""Faults the placer must survive, injected around a real backend (or the recording one), and the
one property every job must keep whatever step a fault hits.

`Faults` wraps any SlurmBackend and fails the N-th call of one kind of write: with Slurm's
error (`fail`: not applied), with a timeout (`hang`: SlurmUnavailable, as run_command raises
it when scontrol does not answer; `applied` says whether Slurm did it anyway), or by killing
the placer (`kill`: that call and every later one raise `Killed`, a BaseException no handler
in pal-slurm catches, as SIGKILL or OOM would end it). A fake only for what cannot be made
to happen on a real cluster on demand; everything else is the backend it wraps.

`check_job` is the rule the tests hold each job to: held by pal with its tag, or released
with exactly its user's GPU request or the placer's whole intended one; never empty, never
another count.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from pal_slurm.errors import SlurmError, SlurmUnavailable
from pal_slurm.placer.tag import HELD, Tag
from pal_slurm.slurm.model import SlurmJob
from pal_slurm.slurm.tres import parse_tres

GPU_KEYS = ("TresPerNode", "TresPerJob")


class Killed(BaseException):
    """The placer process died here (SIGKILL, OOM, a watchdog): nothing after it runs."""


def kind_of(method: str, fields: Sequence[tuple[str, str]] = ()) -> str:
    """The kind of a backend call: tag (AdminComment), clear / set (a GPU field emptied / set),
    nodes, begin (set_begin), release (start_now or release), read (jobs), update."""
    if method == "update_job":
        keys = {k: v for k, v in fields}
        if "AdminComment" in keys:
            return "tag"
        if any(k in GPU_KEYS and v == "" for k, v in fields) and len(fields) == 1:
            return "clear"
        if any(k in GPU_KEYS and v for k, v in fields):
            return "set"
        if "StartTime" in keys:
            return "begin"
        return "update"
    return {"start_now": "release", "release": "release", "set_begin": "begin", "jobs": "read"}.get(method, method)


@dataclass
class Fault:
    kind: str
    nth: int = 1                 # the N-th call of that kind fails (1: the first)
    how: str = "fail"            # fail | hang | kill
    applied: bool = False        # for hang: Slurm applied the call before the timeout
    times: int = 1               # how many calls in a row fail from the N-th on
    seen: int = field(default=0, init=False)

    def hits(self) -> bool:
        self.seen += 1
        return self.nth <= self.seen < self.nth + self.times


class Faults:
    """A SlurmBackend around `inner` that fails the calls `faults` name (see the module doc)."""

    def __init__(self, inner: Any, *faults: Fault) -> None:
        self.inner = inner
        self.faults = list(faults)
        self.dead = False
        self.log: list[tuple[str, str]] = []   # (kind, what happened)
        self.name = getattr(inner, "name", "faults")

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.inner, attr)

    def _call(self, method: str, fields: Sequence[tuple[str, str]], run: Any) -> Any:
        kind = kind_of(method, fields)
        if self.dead:
            raise Killed(f"placer is dead ({kind})")
        for f in self.faults:
            if f.kind == kind and f.hits():
                self.log.append((kind, f.how))
                if f.how == "kill":
                    self.dead = True
                    if f.applied:
                        run()
                    raise Killed(f"killed at {kind}")
                if f.how == "hang":
                    if f.applied:
                        run()
                    raise SlurmUnavailable(f"scontrol {kind}: no answer within 20 s (timed out)")
                raise SlurmError(f"scontrol {kind}: refused by the test")
        self.log.append((kind, "ok"))
        return run()

    def update_job(self, job_id: str, fields: Sequence[tuple[str, str]]) -> None:
        return self._call("update_job", fields, lambda: self.inner.update_job(job_id, fields))

    def start_now(self, job_id: str) -> None:
        return self._call("start_now", (), lambda: self.inner.start_now(job_id))

    def release(self, job_id: str) -> None:
        return self._call("release", (), lambda: self.inner.release(job_id))

    def set_begin(self, job_id: str, epoch: float, now: float) -> None:
        return self._call("set_begin", (), lambda: self.inner.set_begin(job_id, epoch, now))

    def jobs(self, only: Collection[str] | None = None) -> list[SlurmJob]:
        return self._call("jobs", (), lambda: self.inner.jobs(only))


def gpu_items(value: str) -> list[tuple[str | None, int]]:
    return sorted((i.type, i.count) for i in parse_tres(value).gpu_items)


def gpu_total(value: str) -> int:
    return sum(c for _t, c in gpu_items(value))


def check_job(job: SlurmJob, submitted: dict[str, str], now: float) -> str:
    """What state `job` is in, asserting it is one the placer may leave a job in:
    'held' (pending, held by pal, tag recording the user's request when the job was changed),
    'user' (its GPU request is exactly `submitted`'s: tres_per_node / tres_per_job) or
    'intent' (exactly the whole per-slot request its tag names, of the user's GPU count)."""
    tag = Tag.parse(job.admin_comment)
    mine = {"tres_per_node": job.tres_per_node, "tres_per_job": job.tres_per_job}
    if all(gpu_items(mine[f]) == gpu_items(submitted.get(f, "")) for f in mine):
        return "user" if not _held(job, tag, now) else "held"
    if tag is not None and tag.intent and gpu_items(job.tres_per_node) == gpu_items(tag.intent) \
            and not job.tres_per_job:
        want = gpu_total(submitted.get("tres_per_node", "")) or gpu_total(submitted.get("tres_per_job", ""))
        per_node = gpu_total(tag.intent)
        nodes = len([n for n in tag.nodes.split(",") if n]) or 1
        assert per_node * (nodes if submitted.get("tres_per_node") else 1) == want or per_node == want, \
            (job, submitted)
        return "intent" if not _held(job, tag, now) else "held"
    assert _held(job, tag, now), f"job {job.job_id} may start with {mine}, not its user's {submitted} " \
                                 f"nor the placement {tag.intent if tag else None!r}: {job.admin_comment!r}"
    assert tag is not None and tag.user_request() is not None, job.admin_comment
    req = tag.user_request() or {}
    assert all(gpu_items(req[f]) == gpu_items(submitted.get(f, "")) for f in mine), (req, submitted)
    return "held"


def _held(job: SlurmJob, tag: Tag | None, now: float) -> bool:
    return (job.pending and tag is not None and tag.head == HELD
            and (job.priority == 0 or job.begins_after(now)))


__all__ = ["Fault", "Faults", "Killed", "check_job", "kind_of"]
