"""A `pal placer` of the fail-open tests on the real test cluster, and the jobs around it.

`rig` gives each test a Rig: its own copy of the classified database, its placers (enforce
mode, started as systemd would and waited for), the filter's kill switch removed on demand, the
jobs it submits with the GPU request Slurm stored for each, and filler jobs that keep GPUs busy;
afterwards it always stops the placers, restores the kill switch and cancels every job. The
tests of the placer on the cluster (test_placer_failopen.py and its neighbours) share it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.slurm.conftest import FINISHED, SlurmCluster
from tests.slurm.placer_support import NODES, PlacerProcess, make_db, write_config
from tests.slurm.records import held_by_pal, int_field, job_state

STATE_CACHE_S = 2.2   # job_submit.lua re-reads its state file at most every 2 s
STALE_AFTER = 5       # the placer's stale_after_s in these tests
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def classified_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The classified SQLite database (made once; each test works on its own copy)."""
    tmp = tmp_path_factory.mktemp("paldb")
    make_db(tmp)
    return tmp / "pal.db"


@dataclass
class Rig:
    """One test's placer, jobs and filter switch on the shared test cluster."""

    cluster: SlurmCluster
    tmp: Path
    db_template: Path
    jobs: list[str] = field(default_factory=list)
    #: each job's GPU request as Slurm stored it at submit: (tres_per_node, tres_per_job)
    requested: dict[str, tuple[str, str]] = field(default_factory=dict)
    fillers: list[str] = field(default_factory=list)
    placers: list[PlacerProcess] = field(default_factory=list)

    # ---------------------------------------------------------------- placer
    def db_copy(self) -> tuple[str, Path]:
        path = self.tmp / "pal.db"
        shutil.copyfile(self.db_template, path)
        return f"sqlite:///{path}", path

    def config(self, db_url: str | None = None, **kwargs: Any) -> Path:
        if db_url is None:
            db_url, _ = self.db_copy()
        kwargs.setdefault("stale_after", STALE_AFTER)
        # every class held: these tests are about holding and releasing, not about which
        # classes have GPUs to choose between (pal-guard leaves a quiet class to Slurm)
        kwargs.setdefault("noise", 0.0)
        return write_config(self.tmp, db_url, self.cluster.filter_state, mode="enforce", **kwargs)

    def start(self, config: Path) -> PlacerProcess:
        """Start a placer and wait until it has finished its first cycle (classes loaded).

        A cycle publishes the heartbeat first: a heartbeat from a later second than the first
        one this placer wrote comes from its second cycle, so the first one is over."""
        self.assert_no_other_placer()
        started = int(time.time())
        p = PlacerProcess(config, self.cluster.env, self.tmp / f"placer-{len(self.placers)}.log")
        self.placers.append(p)
        deadline = time.monotonic() + 30
        first = None
        while first is None or self.heartbeat() <= first:
            assert p.proc.poll() is None, f"placer exited {p.proc.returncode}:\n{p.output()}"
            assert time.monotonic() < deadline, f"placer wrote no heartbeat:\n{p.output()}"
            if first is None and self.heartbeat() >= started:
                first = self.heartbeat()
            time.sleep(0.1)
        return p

    def start_once(self, config: Path) -> PlacerProcess:
        """Start a placer with a long interval and wait until its first cycle is over (its log
        says so, or the cycle's heartbeat is a second old)."""
        self.assert_no_other_placer()
        started = int(time.time())
        p = PlacerProcess(config, self.cluster.env, self.tmp / f"placer-{len(self.placers)}.log")
        self.placers.append(p)
        deadline = time.monotonic() + 30
        while self.heartbeat() < started:
            assert p.proc.poll() is None, f"placer exited {p.proc.returncode}:\n{p.output()}"
            assert time.monotonic() < deadline, f"placer wrote no heartbeat:\n{p.output()}"
            time.sleep(0.1)
        time.sleep(2)
        return p

    def assert_no_other_placer(self) -> None:
        """One placer per cluster: another one (a leaked test placer) would take our held jobs."""
        before = self.heartbeat()
        time.sleep(1.1)
        after = self.heartbeat()
        assert after <= 0 or after == before, (
            f"another placer writes {self.cluster.filter_state} (heartbeat {before} -> {after}): stop it first")

    def heartbeat(self) -> int:
        try:
            text = self.cluster.filter_state.read_text(encoding="utf-8")
        except OSError:
            return -1
        m = re.search(r"^heartbeat (\d+)$", text, flags=re.M)
        return int(m.group(1)) if m else -1

    def filter_on(self) -> None:
        """Remove the kill switch (the placer writes the state file) and let the filter's cache expire."""
        self.cluster.kill_switch.unlink(missing_ok=True)
        time.sleep(STATE_CACHE_S)

    def pal(self, config: Path, *args: str) -> subprocess.CompletedProcess[str]:
        """`python3 -m pal_slurm --config CFG ARGS` as the systemd timer runs it."""
        return subprocess.run([sys.executable, "-m", "pal_slurm", "--config", str(config), *args], check=False,
                              capture_output=True, text=True, timeout=60, cwd=REPO,
                              env={**os.environ, **self.cluster.env})

    # ---------------------------------------------------------------- jobs
    def submit(self, args: Sequence[str], wrap: str = "sleep 0.2") -> str:
        jobid = self.cluster.submit(["-J", "pal-failopen", *args, "--wrap", wrap])
        self.jobs.append(jobid)
        rec = self.records([jobid])[jobid]
        self.requested[jobid] = (rec.get("tres_per_node") or "", rec.get("tres_per_job") or "")
        return jobid

    def assert_requests_unchanged(self, recs: dict[str, dict[str, Any]]) -> None:
        """Every job in `recs` carries exactly the GPU request it was submitted with (the
        same GPU types and counts, per node and per job; 22.05 writes gres:, 24.11 gres/)."""
        from tests.support.faults import gpu_items

        for jobid, rec in recs.items():
            node, job = self.requested[jobid]
            got = (gpu_items(rec.get("tres_per_node") or ""), gpu_items(rec.get("tres_per_job") or ""))
            assert got == (gpu_items(node), gpu_items(job)), (jobid, rec.get("tres_per_node"),
                                                                rec.get("tres_per_job"), self.requested[jobid])

    def fill_gpus(self) -> None:
        """Every GPU busy with a long sleep that names its node (never held, never moved)."""
        for node in NODES:
            self.fillers.append(self.submit(["-w", node, "--gres=gpu:4"], wrap="sleep 600"))
        self.wait_fillers()

    def wait_fillers(self) -> None:
        for jobid in self.fillers:
            try:
                self.cluster.wait_state(jobid, "RUNNING", timeout=45)
            except AssertionError as exc:
                raise AssertionError(f"{exc}\nnodes:\n{node_report(self.cluster)}") from None

    def free_gpus(self) -> None:
        self.cluster.cancel(self.fillers)

    def records(self, ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        want = {int(j) for j in ids}
        return {str(int_field(j["job_id"])): j for j in self.cluster.squeue_json()["jobs"]
                if int_field(j["job_id"]) in want}

    def held(self, ids: Iterable[str]) -> list[str]:
        now = time.time()
        return sorted(j for j, rec in self.records(ids).items() if held_by_pal(rec, now))

    def wait_held(self, ids: Sequence[str], timeout: float = 15) -> None:
        """Until every job in IDS is held by pal-slurm and the placer has had two more cycles."""
        deadline = time.monotonic() + timeout
        while len(self.held(ids)) < len(ids):
            assert time.monotonic() < deadline, f"not all held: {self.records(ids)}"
            time.sleep(0.25)
        time.sleep(1.2)
        assert self.held(ids) == sorted(ids), self.records(ids)

    def wait_finished(self, ids: Sequence[str], timeout: float = 40) -> dict[str, dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while True:
            recs = self.records(ids)
            if all(job_state(r) in FINISHED for r in recs.values()) and len(recs) == len(ids):
                return recs
            assert time.monotonic() < deadline, f"jobs not finished: { {j: job_state(r) for j, r in recs.items()} }"
            time.sleep(0.3)

    def cleanup(self) -> None:
        """Placers stopped (killed if SIGTERM does not end them), filter off, our jobs cancelled."""
        try:
            for p in self.placers:
                if p.proc.poll() is None:
                    p.stop()  # kills a placer SIGTERM does not end
                if not p._fh.closed:
                    p._fh.close()
        finally:
            self.cluster.kill_switch.touch()
            self.cluster.filter_state.unlink(missing_ok=True)
            self.cluster.cancel(self.jobs)


def wait_idle(cluster: SlurmCluster, timeout: float = 60) -> None:
    """Every node idle (a test before may have restarted slurmctld or left jobs ending)."""
    deadline = time.monotonic() + timeout
    while True:
        out = cluster.run(["sinfo", "-h", "-N", "-o", "%N %T"], check=False).stdout.split()
        states = dict(zip(out[::2], out[1::2]))
        if states and all(st == "idle" for st in states.values()):
            return
        assert time.monotonic() < deadline, f"nodes not idle after {timeout:g}s: {states}"
        time.sleep(0.5)


def node_report(cluster: SlurmCluster) -> str:
    return cluster.run(["sinfo", "-N", "-O", "NodeList,StateLong,GresUsed:60,CPUsState"], check=False).stdout


@pytest.fixture
def rig(slurm_cluster: SlurmCluster, tmp_path: Path, classified_db: Path) -> Iterator[Rig]:
    wait_idle(slurm_cluster)
    r = Rig(slurm_cluster, tmp_path, classified_db)
    try:
        yield r
    finally:
        r.cleanup()
