"""The stand-ins the benchmarks time the placer against: slurmctld kept in memory, and the class
factors fixed. Used only to time pal-slurm's own code (bench/placer_cycle.py): what they cost is
measured apart and left out of the figures."""

from __future__ import annotations

import functools
import json
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from pal_slurm.errors import SlurmError
from pal_slurm.placer.factors import Factors
from pal_slurm.slurm import parse_json
from pal_slurm.slurm.model import SlurmJob, SlurmNode


class Phases:
    """Wall and CPU seconds per phase of the current cycle. CPU time (this thread's) is what
    our code costs; wall time also counts waiting for a core when other processes share them."""

    def __init__(self) -> None:
        self.wall: dict[str, float] = defaultdict(float)
        self.cpu: dict[str, float] = defaultdict(float)

    def clear(self) -> None:
        self.wall.clear()
        self.cpu.clear()

    @contextmanager
    def span(self, phase: str) -> Iterator[None]:
        w, c = time.perf_counter(), time.thread_time()
        try:
            yield
        finally:
            self.wall[phase] += time.perf_counter() - w
            self.cpu[phase] += time.thread_time() - c

    def wrap(self, phase: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            with self.span(phase):
                return fn(*args, **kwargs)
        return timed


#: the scontrol update fields the stand-ins take, and the job field each sets (also the tests' recording
#: backend, tests/support/recording_slurm.py)
SCONTROL_FIELDS = {"TresPerNode": "tres_per_node", "TresPerJob": "tres_per_job", "NodeList": "required_nodes",
                   "AdminComment": "admin_comment"}


class InMemorySlurm:
    """A SlurmBackend over in-memory squeue/sinfo documents: a stand-in for slurmctld, used
    only to time our code. Reads serialise the documents (what squeue would print) and parse
    them with the real parser; the serialising and the updates count as stand-in time.

    `calls` counts every call since the last `reset()` by the Slurm command the cli backend
    (pal_slurm.slurm.cli_backend.CliBackend) runs for it: what the timed figure leaves out."""

    name = "in-memory"

    def __init__(self, squeue: dict[str, Any], sinfo: dict[str, Any], phases: Phases, now: float) -> None:
        self._pristine = json.dumps(squeue)
        self.now = now  # the clock the placer runs on: a job released now becomes eligible then
        self._sinfo_text = json.dumps(sinfo)
        self.phases = phases
        self.calls: Counter[str] = Counter()
        self.reset()

    def reset(self) -> None:
        self.doc = json.loads(self._pristine)
        self.by_id = {str(j["job_id"]): j for j in self.doc["jobs"]}
        self._text: str | None = self._pristine
        self.calls = Counter()

    def version(self) -> tuple[int, int]:
        return (22, 5)

    def _squeue_text(self) -> str:
        with self.phases.span("stand-in"):
            if self._text is None:
                self._text = json.dumps(self.doc)
            return self._text

    def jobs(self, only: Collection[str] | None = None) -> list[SlurmJob]:
        # 22.05's squeue --json ignores -j: a read of some jobs is a read of all (CliBackend)
        self.calls["squeue --all --json" + (" (read-back of the jobs changed)" if only is not None else "")] += 1
        text = self._squeue_text()
        with self.phases.span("read/parse"):
            return parse_json.iter_unique(parse_json.jobs_from_doc(parse_json.load(text, "squeue --json"),
                                                                   active_only=True, only=only))

    def nodes(self) -> list[SlurmNode]:
        self.calls["sinfo --json"] += 1
        with self.phases.span("read/parse"):
            return parse_json.nodes_from_doc(parse_json.load(self._sinfo_text, "sinfo --json"))

    def _job(self, job_id: str) -> dict[str, Any]:
        job = self.by_id.get(job_id)
        if job is None:
            raise SlurmError(f"scontrol: Invalid job id specified ({job_id})")
        return job

    def update_job(self, job_id: str, fields: Sequence[tuple[str, str]]) -> None:
        keys = "/".join(sorted({k for k, _v in fields}))
        self.calls["scontrol update " + ("AdminComment (the tag)" if keys == "AdminComment" else
                                         f"{keys}= (clearing the GPU request: 22.05)" if not any(v for _k, v in fields)
                                         else f"{keys} (the GPU request)")] += 1
        with self.phases.span("stand-in"):
            job = self._job(job_id)
            for key, value in fields:
                if key not in SCONTROL_FIELDS:
                    raise SlurmError(f"scontrol update: field {key} not supported by the stand-in")
                job[SCONTROL_FIELDS[key]] = value
            self._text = None

    def release(self, job_id: str) -> None:
        self.calls["scontrol release"] += 1
        with self.phases.span("stand-in"):
            job = self._job(job_id)
            job["priority"] = 4_000_000_000 - int(job_id)
            job["state_reason"] = "None"
            self._text = None

    def hold(self, job_id: str) -> None:
        self.calls["scontrol hold"] += 1
        with self.phases.span("stand-in"):
            self._job(job_id)["priority"] = 0
            self._text = None

    def start_now(self, job_id: str) -> None:
        self.calls["scontrol update StartTime=now (release)"] += 1
        with self.phases.span("stand-in"):
            job = self._job(job_id)
            job["eligible_time"] = int(self.now)
            job["state_reason"] = "None"
            self._text = None

    def set_begin(self, job_id: str, epoch: float, now: float) -> None:
        self.calls["scontrol update StartTime=now+N (hold moved on)"] += 1
        with self.phases.span("stand-in"):
            job = self._job(job_id)
            job["eligible_time"] = int(epoch)
            job["state_reason"] = "BeginTime"
            self._text = None

    def partition_tiers(self) -> dict[str, int]:
        self.calls["scontrol show partition"] += 1
        return {"gpu": 1}

    def priority_config(self):  # type: ignore[no-untyped-def]
        from pal_slurm.slurm.priority import PriorityConfig

        self.calls["scontrol show config"] += 1
        return PriorityConfig(multifactor=True, weight_age=1000.0)


class StaticFactors:
    """The FactorCache interface (`get(now)`) over fixed factors: no database read in the cycle."""

    def __init__(self, factors: Factors) -> None:
        self.factors = factors
        self.last_error = None

    def get(self, now: float | None = None) -> Factors:
        return self.factors

