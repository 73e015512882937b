"""How the placer ends and keeps holds (pal_slurm/placer/writer.py and failopen.py), over a recording backend.

The real cluster runs (tests/slurm/test_placer*.py) show the commands work; this shows which
command each kind of hold gets: a begin-time hold ends with StartTime=now and is moved on
while the job waits, a priority-0 hold (earlier releases) ends with scontrol release, and a
hold that ran out only has its tag corrected.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import replace
from pathlib import Path

from pal_slurm.config import PlacerConfig
from pal_slurm.placer.audit import AuditSink
from pal_slurm.placer.cycle import Placer
from pal_slurm.placer.factors import Factors
from pal_slurm.placement.variability import GpuVariability
from pal_slurm.slurm.model import SlurmJob, SlurmNode
from pal_slurm.slurm.priority import PriorityConfig

NOW = 1796000000.0
CLASSES = ("A", "B", "C", "D")


_FIELDS = {"TresPerNode": "tres_per_node", "TresPerJob": "tres_per_job", "NodeList": "required_nodes",
           "AdminComment": "admin_comment"}


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
            self._change(job_id, **{_FIELDS[k]: v})

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
        self.calls.append(("set_begin", job_id, str(int(epoch))))
        self._change(job_id, begin_time=epoch)

    def of(self, job_id: str) -> list[tuple[str, ...]]:
        return [c for c in self.calls if c[1] == job_id]

    tiers: dict[str, int] = {}

    def partition_tiers(self) -> dict[str, int]:
        return dict(self.tiers)

    def priority_config(self) -> PriorityConfig:
        return PriorityConfig()


class StaticFactors:
    def __init__(self, factors: Factors) -> None:
        self.factors = factors

    def get(self, now: float) -> Factors:
        return self.factors


def node(name: str, used: tuple[int, ...] = ()) -> SlurmNode:
    gres = ",".join(f"gpu:v100_g{m}:1" for m in range(4))
    gres_used = ",".join(f"gpu:v100_g{m}:{1 if m in used else 0}(IDX:{m if m in used else 'N/A'})" for m in range(4))
    return SlurmNode(name=name, state="MIXED" if used else "IDLE", flags=frozenset(), cpus=8, alloc_cpus=len(used),
                     real_memory_mb=16000, alloc_memory_mb=0, features=frozenset({"v100"}),
                     active_features=frozenset({"v100"}), partitions=("gpu",), gres=gres, gres_used=gres_used)


def held(job_id: str, *, begin_in: float | None = 80.0, gpus: int = 1, **kw: object) -> SlurmJob:
    job = SlurmJob(job_id=job_id, name="j", user="u", state="PENDING", state_reason="BeginTime", priority=1000,
                   partition="gpu", submit_time=NOW - 5, tres_per_node=f"gres:gpu:{gpus}",
                   admin_comment="pal:held class=A src=default", memory_per_cpu_mb=100,
                   begin_time=None if begin_in is None else NOW + begin_in)
    return replace(job, **kw)  # type: ignore[arg-type]


def placer(tmp_path: Path, jobs: Sequence[SlurmJob], nodes: Sequence[SlurmNode], **cfg: object) -> tuple[Placer, Recorder]:
    backend = Recorder(jobs, nodes)
    by_slot = {(n.name, m): GpuVariability(perfvar={c: 1.0 + m / 10 for c in CLASSES},
                                           slowdown={c: 1.0 + m / 10 for c in CLASSES})
               for n in nodes for m in range(4)}
    config = PlacerConfig(mode="enforce", state_file=str(tmp_path / "filter-state"), **cfg)  # type: ignore[arg-type]
    p = Placer(backend, config, StaticFactors(Factors(by_slot=by_slot, version=1, loaded_at=NOW)),  # type: ignore[arg-type]
               AuditSink(None), classes=CLASSES, clock=lambda: NOW)
    return p, backend


def test_a_begin_time_hold_is_retyped_then_ended_with_start_now(tmp_path: Path) -> None:
    p, b = placer(tmp_path, [held("1")], [node("n1")])
    report = p.cycle()
    assert report.placed == ["1"]
    calls = b.of("1")
    assert ("start_now", "1") in calls and ("release", "1") not in calls
    assert not any(c[0] == "set_begin" for c in calls)  # 80 s ahead: far enough, nothing to move
    # the user's request and the placement recorded first (still `pal:held`), then retyped
    # before the hold ends; the tag says placed only after it ended
    tags = [i for i, c in enumerate(calls) if len(c) > 2 and c[2] == "AdminComment"]
    retype = calls.index(next(c for c in calls if c[:3] == ("update", "1", "NodeList")))
    start = calls.index(("start_now", "1"))
    assert tags[0] < retype < start < tags[-1] and len(tags) == 2
    assert calls[tags[0]][3].startswith("pal:held class=A src=default was=tres_per_node:gres:gpu:1 set=")
    assert calls[tags[-1]][3].startswith("pal: placed")
    assert "\nhold_s 90\n" in (tmp_path / "filter-state").read_text()


def test_a_hold_ending_soon_is_moved_on_first(tmp_path: Path) -> None:
    """Waiting (no GPU free) or about to be retyped: a begin time within two cycles + 10 s moves to now + hold_s."""
    busy = [node("n1", used=(0, 1, 2, 3))]
    p, b = placer(tmp_path, [held("1", begin_in=8), held("2", begin_in=60), held("3", begin_in=-1)], busy, hold_s=120)
    report = p.cycle()
    assert report.held == 3 and not report.placed and not report.released
    assert ("set_begin", "1", str(int(NOW + 120))) in b.calls and ("set_begin", "3", str(int(NOW + 120))) in b.calls
    assert not b.of("2")  # 60 s ahead > 2 x 2 s + 10 s
    assert not any(c[0] in ("start_now", "release") for c in b.calls)
    p, b = placer(tmp_path, [held("4", begin_in=3)], [node("n1")])
    p.cycle()
    calls = [c[0] if c[0] != "update" else c[2] for c in b.of("4")]
    assert calls.index("set_begin") < calls.index("TresPerNode") < calls.index("start_now")


def test_a_priority_zero_hold_from_an_earlier_release_is_ended_with_release(tmp_path: Path) -> None:
    old = held("1", begin_in=None, priority=0, state_reason="JobHeldAdmin")
    p, b = placer(tmp_path, [old], [node("n1")])
    assert p.cycle().placed == ["1"]
    assert ("release", "1") in b.calls and ("start_now", "1") not in b.calls
    # and on release_all (SIGTERM, release-stale) each hold its own command
    p, b = placer(tmp_path, [old, held("2")], [node("n1")])
    assert sorted(p.release_all("placer stopped")) == ["1", "2"]
    assert ("release", "1") in b.calls and ("start_now", "2") in b.calls
    assert ("release", "2") not in b.calls and ("start_now", "1") not in b.calls


def test_released_unchanged_ends_the_hold_and_a_lapsed_hold_only_gets_its_tag_fixed(tmp_path: Path) -> None:
    per_task = held("1", tres_per_node="", tres_per_task="gres:gpu:1")
    lapsed = held("2", begin_in=-30, state_reason="Resources")
    p, b = placer(tmp_path, [per_task, lapsed], [node("n1")])
    report = p.cycle()
    assert report.released == ["1"] and ("start_now", "1") in b.calls
    assert b.of("2") == [("update", "2", "AdminComment",
                          "pal: released unchanged: the hold ended before a placement")]
    assert report.held == 1



def test_waiting_jobs_are_reported_when_nothing_fits(tmp_path: Path) -> None:
    """Every GPU busy: the held job stays held, takes nothing, and the cycle names it as waiting
    (it used to report no waiting job at all in that case)."""
    busy = [node("n1", used=(0, 1, 2, 3)), node("n2", used=(0, 1, 2, 3))]
    p, rec = placer(tmp_path, [held("7")], busy)
    report = p.cycle()
    assert report.waiting == ["7"] and not report.placed and not report.released
    assert not any(c[0] in ("start_now", "release") for c in rec.of("7"))


def test_a_hold_that_ran_low_during_the_cycle_is_moved_on_before_the_retype(tmp_path: Path) -> None:
    """A slow cycle (a large queue, a slow Slurm): the begin time was far enough when the cycle
    read it, but not by the time the job is retyped. It is checked against the time now, just
    before the retype, and moved on first: Slurm cannot start the job mid-change."""
    p, b = placer(tmp_path, [held("1", begin_in=40.0)], [node("n1")])
    ticks = iter(range(10_000))
    p.clock = p.writer.clock = lambda: NOW + 10 * next(ticks)  # every look at the clock: 10 s later
    report = p.cycle()
    assert report.placed == ["1"]
    calls = b.of("1")
    begin = next(i for i, c in enumerate(calls) if c[0] == "set_begin")
    retype = next(i for i, c in enumerate(calls) if c[:3] == ("update", "1", "TresPerNode"))
    assert begin < retype, calls
