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
import shlex
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

    def pal(self, *args: str, config: str = "") -> Result:
        return CliRunner().invoke(cli, ["--db", self.url, *args], env={"PAL_CONFIG": config})

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


SIM = ["--backend", "sim", "--sim-this-node", "--sim-gpus-per-node", str(GPUS), "--sim-bad-fraction", "0",
       "--passes", "3"]


def _classified(q: Q, tmp_path: Path) -> None:
    """The node profiled whole an hour ago (simulated runs take minutes of virtual time), classified."""
    ago = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() - 3600))
    whole = q.pal("profile", "run", "--node", q.node, *SIM, "--sim-start", ago, "--output", str(tmp_path / "w.jsonl"))
    assert whole.exit_code == 0, whole.output
    assert q.pal("classify").exit_code == 0


def _out_of_service_with_a_job_waiting(q: Q, tmp_path: Path) -> tuple[str, list[str], str]:
    """The node profiled whole an hour ago (simulated runs take minutes of virtual time) and
    classified, the slot out of service, the node's other slots busy and one more job waiting for
    a GPU there: (the holder, the busy jobs, the waiting job)."""
    _classified(q, tmp_path)
    holder = _quarantine(q)
    busy = [q.submit("-w", q.node, "--gres=gpu:1") for _ in range(GPUS - 1)]
    for job in busy:
        q.wait(job, "RUNNING")
    waiting = q.submit("-w", q.node, "--gres=gpu:1")
    time.sleep(PEND_S)
    assert q.state(waiting) == "PENDING"
    return holder, busy, waiting


def test_a_quarantined_gpu_is_profiled_in_its_slot_and_released_when_it_passes(q: Q, tmp_path: Path) -> None:
    """The ladder's last rungs: a GPU out of service is re-profiled in its own slot, which its holder
    hands over and takes back with no other job getting it meanwhile (a job waits for the node's
    GPUs all along), and `pal gpus release PASSED` releases it once its new runs are classified."""
    holder, busy, waiting = _out_of_service_with_a_job_waiting(q, tmp_path)
    early = q.pal("gpus", "release", "PASSED", "--apply")
    assert early.exit_code == 0 and f"{q.gpu} stays out of service: no profile run since" in early.stdout, early.output
    dry = q.pal("profile", "submit", "--gpus", q.gpu, "--dry-run")
    assert dry.exit_code == 0 and "--job-name=pal-quarantine-profile" in dry.stdout, dry.output
    assert f"would run: scancel {holder}" in dry.stderr and [h["job"] for h in q.holders()] == [holder]
    conf = tmp_path / "pal.toml"  # what the profiling job reads: the database of this test
    conf.write_text(f'[database]\nurl = "{q.url}"\n')
    out = q.pal("profile", "submit", "--gpus", q.gpu, "--time", "5", "--output", str(q.cluster.out_dir / "%j.out"),
                "--run-args", shlex.join([*SIM, "--passes", "1", "--output", str(tmp_path / "slot.jsonl")]),
                config=str(conf))  # one pass: the simulated runs' virtual clock runs ahead of the real one
    found = re.search(rf"{re.escape(q.node)}: job (\d+) \(1 GPU, in slot {re.escape(q.gpu)} out of service\)",
                      out.stdout)
    assert out.exit_code == 0 and found is not None, out.output
    q.jobs.append(found.group(1))
    q.wait(found.group(1), "COMPLETED", timeout=120)
    log = q.cluster.job_output(found.group(1))
    measured = re.findall(rf"^{re.escape(q.node)}\s+(\d+)\s", log, re.MULTILINE)
    assert set(measured) == {str(q.minor)} and "stored: 5 runs, 0 failures" in log, log
    # the new holder took the slot back after the profiling job, before the job waiting for a GPU there
    deadline = time.monotonic() + 30
    while not [h for h in q.holders() if h["state"] == "RUNNING"]:
        assert time.monotonic() < deadline, q.holders()
        time.sleep(0.5)
    (now,) = q.holders()
    assert now["job"] != holder and q.indices(now["job"]) == (q.minor,) and q.state(waiting) == "PENDING"
    q.gone(busy)
    q.wait(waiting, "RUNNING")
    assert q.minor not in q.indices(waiting)
    assert "run `pal classify`" in q.pal("gpus", "release", "PASSED").stdout
    assert q.pal("classify").exit_code == 0
    released = q.pal("gpus", "release", "PASSED", "--apply")
    assert f"{q.gpu} passed: profiled" in released.stdout, released.output
    assert f"holder job {now['job']} cancelled" in released.stdout
    job = q.submit("-w", q.node, f"--gres=gpu:{q.type}:1")
    q.wait(job, "RUNNING")
    assert q.indices(job) == (q.minor,)
    outcomes = [p["outcome"] for p in json.loads(q.pal("placements", "--json").stdout)]
    assert outcomes == ["quarantine-released", "quarantined", "quarantined"]


def test_a_hand_over_cut_short_after_its_first_step_is_not_begun_twice(q: Q, tmp_path: Path) -> None:
    """A run of `pal profile submit --gpus` that died after submitting the profiling job (it waits
    behind the holder, which still holds the slot): a second run submits nothing and names that job;
    the holder keeps the slot throughout."""
    _classified(q, tmp_path)
    holder = _quarantine(q)
    dry = q.pal("profile", "submit", "--gpus", q.gpu, "--dry-run", "--run-args", "--backend sim")
    first = next(line for line in dry.stdout.splitlines() if "--job-name=pal-quarantine-profile" in line)
    argv = shlex.split(first)
    assert argv[0] == "sbatch"
    left = q.cluster.run(argv, check=True).stdout.strip().split(";")[0]  # the first step, by hand
    q.jobs.append(left)
    time.sleep(PEND_S)
    assert q.state(left) == "PENDING" and q.state(holder) == "RUNNING"
    again = q.pal("profile", "submit", "--gpus", q.gpu, "--run-args", "--backend sim")
    assert again.exit_code != 0 and f"profiling job(s) {left} for it already in Slurm" in again.output, again.output
    assert [h["job"] for h in q.holders()] == [holder] and q.state(holder) == "RUNNING"
