"""The placer failing, hanging or dying mid-placement on a real slurmctld: every job ends held with
its tag, or released with exactly the GPU request it was submitted with or the placer's whole
per-slot one; never with none, never with another count.

The placer runs in this process on the real CLI backend, wrapped by tests/support/faults.py, which fails
the N-th call of one kind (the set after the clear, the release, ...): a timeout and a kill cannot
be had from scontrol on demand, everything else is Slurm's own answer. After a kill a fresh
placer on the plain backend picks up, as systemd's restart or the fail-safe would. What each job
ends with is read back from squeue and compared with what it had right after its submission.
Its jobs are its own: the placer here sees no other job on the cluster.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

import pytest

from pal_eval.fakes import StaticFactors
from pal_slurm.config import PlacerConfig
from pal_slurm.errors import SlurmUnavailable
from pal_slurm.placer.audit import AuditSink
from pal_slurm.placer.cycle import Placer
from pal_slurm.placer.factors import Factors
from pal_slurm.placer.tag import HELD, PLACED, Tag
from pal_slurm.placement.variability import GpuVariability
from pal_slurm.slurm.cli_backend import CliBackend
from pal_slurm.slurm.model import SlurmJob
from tests.support.faults import Fault, Faults, Killed, check_job
from tests.support.recording_slurm import CLASSES

pytestmark = pytest.mark.slurm


class Only:
    """The real backend, showing only this test's jobs (other sessions may share the cluster)."""

    def __init__(self, inner: CliBackend, ids: set[str]) -> None:
        self.inner, self.ids, self.name = inner, ids, inner.name

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.inner, attr)

    def jobs(self, only: Collection[str] | None = None) -> list[SlurmJob]:
        return [j for j in self.inner.jobs(only) if j.job_id in self.ids]


class Rig:
    def __init__(self, cluster: Any, tmp_path: Path) -> None:
        self.cluster, self.tmp = cluster, tmp_path
        self.ids: set[str] = set()
        self.cli = CliBackend()
        self.submitted: dict[str, dict[str, str]] = {}

    def submit(self, gres: str = "gpu:2") -> str:
        jobid = self.cluster.submit([f"--gres={gres}", "--begin=now+600", "--wrap=sleep 30"])
        self.ids.add(jobid)
        job = self.job(jobid)
        self.submitted[jobid] = {"tres_per_node": job.tres_per_node, "tres_per_job": job.tres_per_job}
        # held and tagged as the submit filter holds a job in enforce mode (with the site's note)
        self.cluster.scontrol("update", f"jobid={jobid}", "AdminComment=pal:held class=A src=default | site note")
        return jobid

    def job(self, jobid: str) -> SlurmJob:
        got = next(iter(j for j in self.cli.jobs() if j.job_id == jobid), None)
        assert got is not None, f"job {jobid} gone"
        return got

    def placer(self, *faults: Fault) -> Placer:
        nodes = self.cli.nodes()
        by_slot = {(n.name, m): GpuVariability(perfvar={c: 1.0 + m / 10 for c in CLASSES},
                                               slowdown={c: 1.0 + m / 10 for c in CLASSES})
                   for n in nodes for m in range(4)}
        cfg = PlacerConfig(mode="enforce", state_file=str(self.tmp / "filter-state"), hold_s=120)
        backend: Any = Only(self.cli, self.ids)
        if faults:
            backend = Faults(backend, *faults)
        return Placer(backend, cfg, StaticFactors(Factors(by_slot=by_slot, version=1, loaded_at=time.time())),  # type: ignore[arg-type]
                      AuditSink(None), classes=CLASSES, clock=time.time)

    def cycle(self, placer: Placer) -> Any:
        """Cycles until the placer does something with the job (GPUs an earlier test's cancelled
        jobs held may take a moment to come free: until then the job waits)."""
        deadline = time.monotonic() + 30
        while True:
            report = placer.cycle()
            if report.placed or report.failed or report.released or time.monotonic() > deadline:
                return report
            time.sleep(0.5)

    def state(self, jobid: str) -> str:
        """held / user / intent (tests/faults.check_job asserts it is one of them)."""
        return check_job(self.job(jobid), self.submitted[jobid], time.time())

    def major(self) -> int:
        return self.cli.version()[0]


@pytest.fixture
def rig(slurm_cluster: Any, tmp_path: Path) -> Iterator[Rig]:
    r = Rig(slurm_cluster, tmp_path)
    try:
        yield r
    finally:
        slurm_cluster.cancel(r.ids)


def test_a_set_that_times_out_after_the_clear_gets_the_request_back_and_is_placed_next_cycle(rig: Rig) -> None:
    """The chaos run's case: the set after the clear times out. The user's request is back
    before the error leaves the writer; the next cycle places the job whole."""
    jobid = rig.submit()
    with pytest.raises(SlurmUnavailable):
        rig.cycle(rig.placer(Fault("set", how="hang")))
    assert rig.state(jobid) == "held"
    assert rig.job(jobid).tres_per_node == rig.submitted[jobid]["tres_per_node"]
    assert rig.cycle(rig.placer()).placed == [jobid]
    assert rig.state(jobid) == "intent"
    assert Tag.parse(rig.job(jobid).admin_comment).site == "site note"


def test_killed_between_the_clear_and_the_set_the_fail_safe_puts_the_request_back(rig: Rig) -> None:
    """Killed after the clear (on 22.05 the job then has no GPUs at all): release-stale's
    release_all gives it its user's request back before it releases it."""
    jobid = rig.submit()
    with pytest.raises(Killed):
        rig.cycle(rig.placer(Fault("set", how="kill")))
    if rig.major() < 24:
        assert rig.job(jobid).tres_per_node == "", "22.05: the clear emptied the request"
    assert rig.state(jobid) == "held"
    assert rig.placer().release_all("placer heartbeat stale; released by the fail-safe") == [jobid]
    assert rig.state(jobid) == "user"


def test_a_refused_release_keeps_the_job_held_and_whole_then_the_next_cycle_releases_it(rig: Rig) -> None:
    """StartTime=now refused after the retype: the job is not given back an untyped request
    (22.05 refuses it; the old path then released it with none); it stays held with the
    whole placement and is released by the next cycle."""
    jobid = rig.submit()
    report = rig.cycle(rig.placer(Fault("release")))
    assert report.failed == [jobid] and not report.placed
    assert rig.state(jobid) == "held"
    job = rig.job(jobid)
    assert Tag.parse(job.admin_comment).intent.replace("gres/", "gres:") == job.tres_per_node.replace("gres/", "gres:")
    assert rig.cycle(rig.placer()).placed == [jobid]
    assert rig.state(jobid) == "intent"


def test_a_put_back_slurm_refuses_releases_the_whole_placement_not_an_empty_request(rig: Rig) -> None:
    """A held job that carried per-slot types, emptied by a crash mid-repair: on 22.05 Slurm
    refuses the user's untyped request back ("with and without type identification"), so the
    fail-safe sets the placement its tag records and releases the job with that; on 24.11 the
    user's request comes back."""
    jobid = rig.submit()
    rig.cycle(rig.placer(Fault("release")))
    assert rig.state(jobid) == "held"
    rig.cluster.scontrol("update", f"jobid={jobid}", "TresPerNode=")  # the crash: a clear, nothing after it
    assert rig.placer().release_all("placer stopped") == [jobid]
    got = rig.state(jobid)
    assert got == ("intent" if rig.major() < 24 else "user"), rig.job(jobid)
    if got == "intent":
        assert Tag.parse(rig.job(jobid).admin_comment).head == PLACED


def test_every_set_refused_keeps_the_job_held_with_its_tag_until_slurm_takes_one(rig: Rig) -> None:
    """The set refused, the put-back refused, the repair refused: on 22.05 (where the clear
    emptied the request) nothing is released, it would run with no GPUs; its tag and hold stay,
    and a cycle with Slurm answering places it. On 24.11 the refused one-update set never
    changed the request: the job is released as submitted."""
    jobid = rig.submit()
    report = rig.cycle(rig.placer(Fault("set", times=10)))
    assert jobid in report.failed and not report.released
    if rig.major() >= 24:
        assert rig.state(jobid) == "user"
        return
    assert rig.state(jobid) == "held"
    tag = Tag.parse(rig.job(jobid).admin_comment)
    assert tag.head == HELD and tag.was and tag.site == "site note"
    assert rig.cycle(rig.placer()).placed == [jobid]
    assert rig.state(jobid) == "intent"
