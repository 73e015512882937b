"""The recording Slurm backend and what tests build on it: held and placed jobs, nodes, a placer.

`Recorder` records every write and applies it to its jobs, so that the placer's read-back sees it;
`Slurm` adds Slurm's own answers to GPU-request updates by version (22.05 empties a job's request
on a clear, merges a direct set into the request it has, and refuses an untyped request once the
job carried per-slot types; 24.11 keeps the request on a clear alone and replaces it on a direct
set). The class factors are fixed (pal_eval.fakes.StaticFactors, the benchmarks' stand-in).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import replace
from pathlib import Path

from pal_eval.fakes import SCONTROL_FIELDS, StaticFactors
from pal_slurm.config import PlacerConfig
from pal_slurm.errors import SlurmError
from pal_slurm.placement.variability import GpuVariability
from pal_slurm.placer import slurm_updates
from pal_slurm.placer.audit import AuditSink, Record
from pal_slurm.placer.cluster_view import build_view
from pal_slurm.placer.cycle import Placer
from pal_slurm.placer.factors import Factors
from pal_slurm.placer.shapes import request_shape
from pal_slurm.placer.tag import Tag
from pal_slurm.placer.writer import Writer
from pal_slurm.slurm.model import SlurmJob, SlurmNode
from pal_slurm.slurm.priority import PriorityConfig
from pal_slurm.slurm.tres import GresItem, parse_tres
from tests.support.faults import Fault, Faults

NOW = 1796000000.0
CLASSES = ("A", "B", "C", "D")
V2205, V2411 = (22, 5), (24, 11)
#: the GPU request a user submitted (what a job released unplaced must get back)
USER = {"tres_per_node": "gres:gpu:2"}


class Recorder:
    """A SlurmBackend that records every write and applies it to its jobs (so the placer's read-back sees it)."""

    name = "recorder"

    def __init__(self, jobs: Sequence[SlurmJob], nodes: Sequence[SlurmNode]) -> None:
        self._jobs, self._nodes = list(jobs), list(nodes)
        self.calls: list[tuple[str, ...]] = []

    def version(self) -> tuple[int, int]:
        return (22, 5)

    def jobs(self, only: Collection[str] | None = None) -> list[SlurmJob]:
        return [j for j in self._jobs if only is None or j.job_id in only]

    def nodes(self) -> list[SlurmNode]:
        return list(self._nodes)

    def _change(self, job_id: str, **kw: object) -> None:
        self._jobs = [replace(j, **kw) if j.job_id == job_id else j for j in self._jobs]  # type: ignore[arg-type]

    def update_job(self, job_id: str, fields: Sequence[tuple[str, str]]) -> None:
        self.calls += [("update", job_id, k, v) for k, v in fields]
        for k, v in fields:
            self._change(job_id, **{SCONTROL_FIELDS[k]: v})

    def release(self, job_id: str) -> None:
        self.calls.append(("release", job_id))
        self._change(job_id, priority=1000, state_reason="None")

    def hold(self, job_id: str) -> None:
        self.calls.append(("hold", job_id))
        self._change(job_id, priority=0)

    def start_now(self, job_id: str) -> None:
        self.calls.append(("start_now", job_id))
        self._change(job_id, begin_time=NOW, state_reason="None")

    def set_begin(self, job_id: str, epoch: float, now: float) -> None:
        """As the CLI backend writes it (`StartTime=now+N`, N counted on the caller's clock) to a
        Slurm whose clock reads NOW: a caller whose clock is not NOW holds the job that much off."""
        self.calls.append(("set_begin", job_id, str(int(epoch))))
        self._change(job_id, begin_time=NOW + max(0, math.ceil(epoch - now)))

    def of(self, job_id: str) -> list[tuple[str, ...]]:
        return [c for c in self.calls if c[1] == job_id]

    tiers: dict[str, int] = {}

    def partition_tiers(self) -> dict[str, int]:
        return dict(self.tiers)

    def priority_config(self) -> PriorityConfig:
        return PriorityConfig()


def node(name: str, used: tuple[int, ...] = ()) -> SlurmNode:
    """A node of four typed V100 slots (v100_g0..3) in partition gpu, `used` the minors taken."""
    gres = ",".join(f"gpu:v100_g{m}:1" for m in range(4))
    gres_used = ",".join(f"gpu:v100_g{m}:{1 if m in used else 0}(IDX:{m if m in used else 'N/A'})" for m in range(4))
    return SlurmNode(name=name, state="MIXED" if used else "IDLE", flags=frozenset(), cpus=8, alloc_cpus=len(used),
                     real_memory_mb=16000, alloc_memory_mb=0, features=frozenset({"v100"}),
                     active_features=frozenset({"v100"}), partitions=("gpu",), gres=gres, gres_used=gres_used)


def held(job_id: str, *, begin_in: float | None = 80.0, gpus: int = 1, **kw: object) -> SlurmJob:
    """A job the filter held: pending on a begin time `begin_in` seconds ahead (None: no begin time), tagged."""
    job = SlurmJob(job_id=job_id, name="j", user="u", state="PENDING", state_reason="BeginTime", priority=1000,
                   partition="gpu", submit_time=NOW - 5, tres_per_node=f"gres:gpu:{gpus}",
                   admin_comment="pal:held class=A src=default", memory_per_cpu_mb=100,
                   begin_time=None if begin_in is None else NOW + begin_in)
    return replace(job, **kw)  # type: ignore[arg-type]


def placer(tmp_path: Path, jobs: Sequence[SlurmJob], nodes: Sequence[SlurmNode], **cfg: object) -> tuple[Placer, Recorder]:
    """A placer in enforce mode over a Recorder of `jobs` and `nodes`; minor m is slower the higher m."""
    backend = Recorder(jobs, nodes)
    by_slot = {(n.name, m): GpuVariability(perfvar={c: 1.0 + m / 10 for c in CLASSES},
                                           slowdown={c: 1.0 + m / 10 for c in CLASSES})
               for n in nodes for m in range(4)}
    config = PlacerConfig(mode="enforce", state_file=str(tmp_path / "filter-state"), **cfg)  # type: ignore[arg-type]
    p = Placer(backend, config, StaticFactors(Factors(by_slot=by_slot, version=1, loaded_at=NOW)),  # type: ignore[arg-type]
               AuditSink(None), classes=CLASSES, clock=lambda: NOW)
    return p, backend


class Slurm(Recorder):
    """The recording backend with Slurm's answers to GPU-request updates (see the module doc)."""

    def __init__(self, jobs: Sequence[SlurmJob], nodes: Sequence[SlurmNode], version: tuple[int, int]) -> None:
        super().__init__(jobs, nodes)
        self.ver = version
        self.typed: set[str] = set()   # jobs that carried per-slot types (22.05 remembers them)

    def version(self) -> tuple[int, int]:
        return self.ver

    def job(self, job_id: str) -> SlurmJob:
        return next(j for j in self._jobs if j.job_id == job_id)

    def update_job(self, job_id: str, fields: Sequence[tuple[str, str]]) -> None:
        job = self.job(job_id)
        changes: dict[str, str] = {}
        for key, value in fields:
            attr = SCONTROL_FIELDS[key]
            if key in ("TresPerNode", "TresPerJob"):
                new = parse_tres(value)
                typed = any(i.type for i in new.gpu_items)
                if value and not typed and job_id in self.typed and self.ver < V2411:
                    self.calls.append(("refused", job_id, key, value))
                    raise SlurmError(f"Invalid GRES specification (with and without type identification) for job "
                                     f"{job_id}")
                if not value and self.ver >= V2411:
                    continue  # 24.11: a clear alone leaves the job its request
                if value and self.ver < V2411 and getattr(job, attr):
                    old = parse_tres(getattr(job, attr))
                    have = {(i.name, i.type) for i in new.items}
                    kept: list[GresItem] = [i for i in old.items if (i.name, i.type) not in have]
                    value = ",".join(i.render(new.prefix) for i in (*kept, *new.items))  # 22.05 merges
                if typed:
                    self.typed.add(job_id)
            changes[key] = value
        self.calls += [("update", job_id, k, v) for k, v in fields]
        for key, value in changes.items():
            self._change(job_id, **{SCONTROL_FIELDS[key]: value})


#: the two nodes of the versioned Slurm's tests
NODES = [node("n1"), node("n2")]


def writer_rig(version: tuple[int, int], *faults: Fault, job: SlurmJob | None = None
               ) -> tuple[Writer, Slurm, SlurmJob, slurm_updates.Update, Tag]:
    """A writer over the versioned Slurm (wrapped in `faults`), a held job of 2 GPUs, its update onto
    minors 0 and 1 of n1, and the placed tag: the writer's error branches, one write at a time."""
    job = job or held("1", gpus=2, admin_comment="pal:held class=A src=spank | ticket 42")
    slurm = Slurm([job], NODES, version)
    w = Writer(Faults(slurm, *faults), AuditSink(None), policy="p", mode="enforce", clock=lambda: NOW)  # type: ignore[arg-type]
    view = build_view(NODES, [job], {}, ("A",))
    shape = request_shape(job, 4)
    assert not isinstance(shape, str)
    update = slurm_updates.update_for(job, shape, [0, 1], view)
    return w, slurm, job, update, slurm_updates.summary(update, "A", "p", 1, [1.0, 1.1], NOW)


def applied_record(job: SlurmJob) -> Record:
    """The audit record of an applied placement of `job`."""
    return Record.applied(job, policy="p", job_class="A", version=1, gpus=[], alternatives=[], reason="r", at=None)


def placed_job(job_id: str, **kw: object) -> SlurmJob:
    """A job the placer released 30 s ago onto minors 0 and 1 of n1 (its tag keeps the user's request)."""
    job = held(job_id, begin_in=-100, state_reason="Resources", tres_per_node="gres:gpu:v100_g0:1,gres:gpu:v100_g1:1",
               required_nodes="n1", admin_comment=f"pal: placed class=A gpus=n1:0,1 sf=1.0,1.1 policy=pal at={int(NOW) - 30} "
                                                  "was tres_per_node gres:gpu:2")
    return replace(job, **kw)  # type: ignore[arg-type]


def running(job: SlurmJob, node_name: str, minors: tuple[int, ...], start: float) -> SlurmJob:
    """`job` running since `start` on `minors` of `node_name`, as squeue shows it (gres_detail)."""
    detail = ",".join(f"gpu:v100_g{m}:{1 if m in minors else 0}(IDX:{m if m in minors else 'N/A'})" for m in range(4))
    return replace(job, state="RUNNING", state_reason="None", nodes=node_name, gres_detail=(detail,),
                   start_time=start)
