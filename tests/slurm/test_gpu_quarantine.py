"""`pal gpus quarantine` / `release` on a real slurmctld (22.05 here; 24.11 and 26.05 through
tests/services/other-slurm.sh): one GPU slot out of service without draining its node.

With the slot out of service (its holder job running) and no placer running, no new job of any
request form gets it, while the node's other slots run jobs; `scontrol reconfigure` changes
nothing; a job already running on the slot finishes untouched and the holder takes the slot
after it; the release gives the slot back; what Slurm has no slot for, and a quarantine that
would leave a pending job with nowhere to run, are refused. Every test releases what it took
out of service and cancels its jobs (docs/admin-guide.md, "One GPU out of service")."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from pal_slurm.cli.main import cli
from pal_slurm.slurm.tres import expand_indices
from tests.slurm.conftest import FINISHED, SlurmCluster
from tests.slurm.placer_rig import wait_idle

GPUS = 4  # per node on the test cluster
#: long enough for slurmctld (sched_interval=2, bf_interval=1) to start a job that can start
PEND_S = 8.0


class Q:
    """The cluster, the slot under test (the last node's last GPU), the CLI against a fresh database."""

    def __init__(self, cluster: SlurmCluster, db_url: str) -> None:
        self.cluster = cluster
        self.url = db_url
        self.node = cluster.nodes[-1]
        self.minor = GPUS - 1
        self.gpu = f"{self.node}:{self.minor}"
        self.type = f"v100_g{self.minor}"
        self.jobs: list[str] = []

    def pal(self, *args: str) -> Result:
        return CliRunner().invoke(cli, ["--db", self.url, *args], env={"PAL_CONFIG": ""})

    def submit(self, *args: str, seconds: int = 300) -> str:
        job = self.cluster.submit([*args, "--time=5", f"--wrap=sleep {seconds}"])
        self.jobs.append(job)
        return job

    def state(self, job: str) -> str:
        return self.cluster.job(job).get("JobState", "")

    def indices(self, job: str) -> tuple[int, ...]:
        """The GPU indices `job` holds on the node under test (scontrol -d)."""
        text = self.cluster.scontrol("-d", "show", "job", job).stdout
        found: list[int] = []
        for line in text.splitlines():
            if re.search(rf"\bNodes={re.escape(self.node)}(\s|$)", line):
                for idx in re.findall(r"IDX:([^)]*)\)", line):
                    found += expand_indices(idx)
        return tuple(found)

    def holders(self) -> list[dict[str, str]]:
        out = self.cluster.run(["squeue", "-h", "-n", "pal-quarantine", "-o", "%i %T"], check=False).stdout
        return [dict(zip(("job", "state"), line.split())) for line in out.splitlines() if line.strip()]

    def wait(self, job: str, state: str, timeout: float = 30) -> None:
        self.cluster.wait_state(job, state, timeout=timeout)

    def gone(self, jobs: list[str]) -> None:
        self.cluster.cancel(jobs)
        deadline = time.monotonic() + 30
        while any(self.state(j) not in FINISHED | {""} for j in jobs):
            assert time.monotonic() < deadline, f"jobs not gone: {[(j, self.state(j)) for j in jobs]}"
            time.sleep(0.25)

    def cleanup(self) -> None:
        """Release every quarantine (the CLI, then scancel for what it left) and cancel the jobs."""
        for h in self.holders():
            self.pal("gpus", "release", self.gpu, "--apply")
        self.gone([h["job"] for h in self.holders()] + self.jobs)


@pytest.fixture
def q(slurm_cluster: SlurmCluster, tmp_path: Path) -> Iterator[Q]:
    wait_idle(slurm_cluster)
    url = f"sqlite:///{tmp_path / 'pal.db'}"
    assert CliRunner().invoke(cli, ["--db", url, "db", "upgrade"], env={"PAL_CONFIG": ""}).exit_code == 0
    rig = Q(slurm_cluster, url)
    try:
        yield rig
    finally:
        rig.cleanup()
    assert not rig.holders()


def _quarantine(q: Q) -> str:
    res = q.pal("gpus", "quarantine", q.gpu, "--apply", "--reason", "test: ECC errors")
    assert res.exit_code == 0, res.output
    assert f"{q.gpu} ({q.type}) out of service: holder job" in res.stdout, res.output
    holder = re.search(r"holder job (\d+)", res.stdout)
    assert holder is not None
    assert q.indices(holder.group(1)) == (q.minor,)
    return holder.group(1)


def test_quarantined_slot_takes_no_new_job_of_any_form(q: Q) -> None:
    assert q.cluster.kill_switch.exists(), "the submit filter must be off: no placer runs in this test"
    dry = q.pal("gpus", "quarantine", q.gpu)
    assert dry.exit_code == 0 and dry.stdout.startswith("would run: sbatch --parsable --job-name=pal-quarantine")
    assert not q.holders(), "a dry run submitted a holder"
    holder = _quarantine(q)
    listed = json.loads(q.pal("gpus", "quarantined", "--json").stdout)
    assert [(r["gpu"], r["holder_job"], r["state"]) for r in listed] == [(q.gpu, holder, "out of service")]
    placements = json.loads(q.pal("placements", "--json").stdout)
    assert [(p["job_id"], p["outcome"], p["policy"]) for p in placements] == [(holder, "quarantined", "admin")]

    # the node's other slots run new jobs: one-GPU jobs, and the most a job can have there
    for form in (["--gres=gpu:1"] * (GPUS - 1), [f"--gres=gpu:{GPUS - 1}"], ["-N1", f"--gpus={GPUS - 1}"],
                 [f"--gpus-per-node={GPUS - 1}"]):
        jobs = [q.submit("-w", q.node, arg) for arg in form]
        for job in jobs:
            q.wait(job, "RUNNING")
            assert q.minor not in q.indices(job), (form, q.indices(job))
        q.gone(jobs)
    _assert_slot_hidden(q)
    q.cluster.scontrol("reconfigure")
    time.sleep(2)
    assert q.state(holder) == "RUNNING" and q.indices(holder) == (q.minor,)
    _assert_slot_hidden(q, forms=([f"--gres=gpu:{q.type}:1"],))

    released = q.pal("gpus", "release", q.gpu, "--apply")
    assert released.exit_code == 0 and f"holder job {holder} cancelled" in released.stdout, released.output
    job = q.submit("-w", q.node, f"--gres=gpu:{q.type}:1")
    q.wait(job, "RUNNING")
    assert q.indices(job) == (q.minor,)
    outcomes = [p["outcome"] for p in json.loads(q.pal("placements", "--json").stdout)]
    assert outcomes == ["quarantine-released", "quarantined"]


def _assert_slot_hidden(q: Q, forms: tuple[list[str], ...] | None = None) -> None:
    """Jobs that could only run with the slot stay pending: its type, every GPU of the node (per
    node, per job, per node by --gpus-per-node), the node whole."""
    forms = forms or ([f"--gres=gpu:{q.type}:1"], [f"--gres=gpu:{GPUS}"], ["-N1", f"--gpus={GPUS}"],
                      [f"--gpus-per-node={GPUS}"], ["--exclusive", "--gres=gpu:1"], ["--exclusive"])
    jobs = [q.submit("-w", q.node, *form) for form in forms]
    time.sleep(PEND_S)
    states = {" ".join(form): (q.state(job), q.indices(job) if q.state(job) == "RUNNING" else ())
              for form, job in zip(forms, jobs)}
    assert all(state == "PENDING" for state, _idx in states.values()), states
    q.gone(jobs)


def test_running_job_on_the_slot_finishes_untouched(q: Q) -> None:
    running = q.submit("-w", q.node, f"--gres=gpu:{q.type}:1", seconds=8)
    q.wait(running, "RUNNING")
    res = q.pal("gpus", "quarantine", q.gpu, "--apply", "--reason", "test: slow")
    assert res.exit_code == 0, res.output
    assert "going out of service: holder job" in res.stdout and running in res.stdout, res.output
    holder = re.search(r"holder job (\d+)", res.stdout).group(1)  # type: ignore[union-attr]
    assert q.state(holder) == "PENDING" and q.state(running) == "RUNNING"
    # an untyped job waiting beside it does not get the slot when it frees: the holder does
    others = [q.submit("-w", q.node, "--gres=gpu:1") for _ in range(GPUS - 1)]
    for job in others:
        q.wait(job, "RUNNING")
    waiting = q.submit("-w", q.node, "--gres=gpu:1")
    q.wait(holder, "RUNNING", timeout=40)
    done = q.cluster.job(running)
    assert done["JobState"] == "COMPLETED" and done["ExitCode"] == "0:0", done
    assert q.indices(holder) == (q.minor,)
    time.sleep(2)
    assert q.state(waiting) == "PENDING"


def test_what_slurm_has_no_slot_for_is_refused(q: Q) -> None:
    for gpu, why in ((f"{q.node}:7", f"{q.node} has no GPU slot 7 in Slurm (slots: 0, 1, 2, 3)"),
                     ("pal-nosuch:0", "pal-nosuch: not a node Slurm knows"),
                     ("not-a-gpu", "give NODE:MINOR")):
        for args in (["quarantine", gpu, "--reason", "test"], ["release", gpu]):
            res = q.pal("gpus", *args, "--apply")
            assert res.exit_code == 1 and why in res.stderr and "Traceback" not in res.output, (args, res.output)
            assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert not q.holders()
    res = q.pal("gpus", "release", q.gpu, "--apply")
    assert res.exit_code == 0 and "is not out of service (no holder job): nothing to release" in res.stdout


def test_quarantine_that_strands_a_pending_job_is_refused(q: Q) -> None:
    whole = q.cluster.submit(["--hold", "-w", q.node, f"--gres=gpu:{GPUS}", "--time=5", "--wrap=sleep 1"])
    q.jobs.append(whole)
    res = q.pal("gpus", "quarantine", q.gpu, "--apply", "--reason", "test")
    assert res.exit_code == 1, res.output
    assert f"job {whole} needs {GPUS} GPU(s) on each node on 1 node(s) and must run on {q.node}" in res.stderr
    assert "--force takes it out anyway" in res.stderr and not q.holders()
    forced = q.pal("gpus", "quarantine", q.gpu, "--apply", "--reason", "test", "--force")
    assert forced.exit_code == 0 and "out of service: holder job" in forced.stdout, forced.output


def test_a_holder_requeued_by_a_node_failure_is_said_and_started_again(q: Q) -> None:
    """A node that fails (here set DOWN; its slurmd answers, so it is back at once) requeues the
    holder with a begin time two minutes ahead: the slot is open meanwhile. `pal gpus quarantined`
    says so, and `pal gpus quarantine GPU --apply` starts the holder at once."""
    holder = _quarantine(q)
    q.cluster.scontrol("update", f"NodeName={q.node}", "State=DOWN", "Reason=pal-quarantine-test")
    try:
        q.wait(holder, "PENDING")
        deadline = time.monotonic() + 15  # slurmctld names the reason at its next look at the job
        while q.cluster.job(holder).get("Reason") != "BeginTime":
            assert time.monotonic() < deadline, q.cluster.job(holder)
            time.sleep(0.25)
        listed = json.loads(q.pal("gpus", "quarantined", "--json").stdout)
        assert [(r["holder_job"], r["state"][:18]) for r in listed] == [(holder, "NOT out of service")], listed
        dry = q.pal("gpus", "quarantine", q.gpu)
        assert dry.stdout == f"would run: scontrol update JobId={holder} StartTime=now\n", dry.output
    finally:
        if "DOWN" in q.cluster.scontrol("show", "node", q.node).stdout:
            q.cluster.scontrol("update", f"NodeName={q.node}", "State=RESUME", check=False)
    res = q.pal("gpus", "quarantine", q.gpu, "--apply")
    assert res.exit_code == 0 and "requeued after its node failed, may start now" in res.stdout, res.output
    q.wait(holder, "RUNNING")
    assert q.indices(holder) == (q.minor,)
