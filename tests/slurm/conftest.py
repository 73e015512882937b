"""The real Slurm test cluster for tests under tests/slurm (marker `slurm`, added to each of them).

`slurm_cluster` (session) runs `tests/services/slurm-cluster.sh start` once (idempotent, ~2 s from
nothing, instant when it already runs) and leaves the cluster running afterwards for the next
session.  It sets SLURM_CONF and PAL_TEST_SLURM_DIR in os.environ for the session, so code under
test that calls scontrol/squeue finds the cluster.

When Slurm is not installed, we are not root, or the cluster does not start: the tests are
skipped with the reason, or FAIL when PAL_REQUIRE_SLURM=1 (`make test`, `make test-slurm`, CI).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "tests" / "services" / "slurm-cluster.sh"
HERE = Path(__file__).resolve().parent

FINISHED = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
                      "BOOT_FAIL", "DEADLINE"})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.slurm)


def _unavailable(reason: str) -> None:
    if os.environ.get("PAL_REQUIRE_SLURM") == "1":
        pytest.fail(f"Slurm test cluster unavailable but PAL_REQUIRE_SLURM=1: {reason}", pytrace=False)
    pytest.skip(f"Slurm test cluster unavailable: {reason}")


def percent_encoded(value: str) -> str:
    """A filter state value: UTF-8, every byte outside [A-Za-z0-9._-] as %XX. Written here
    again, not imported from pal_slurm.slurm.filter_state: these tests check the contract the
    filter reads (docs/admin-guide.md, "The filter state file"), not one writer against itself."""
    safe = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-"
    return "".join(chr(b) if b in safe else f"%{b:02X}" for b in value.encode("utf-8"))


def filter_state_text(mode: str, heartbeat: int, rules: Iterable[Mapping[str, Any]], *,
                      stale_after: int = 30, models: Sequence[str] = ("v100",), hold_s: int | None = None) -> str:
    """The filter state file the placer writes, format 2 (its contract: docs/admin-guide.md,
    "slurm.conf, job_submit.lua, plugstack.conf")."""
    rule_lines = []
    for rule in rules:
        fields = [f"{k}={percent_encoded(str(v))}" for k, v in rule.items() if v is not None]
        rule_lines.append("rule " + " ".join(fields))
    return "\n".join([
        "# written by pal tests (slurm_cluster.set_filter); do not edit",
        "format 2",
        f"mode {percent_encoded(mode)}",
        f"heartbeat {int(heartbeat)}",
        f"stale_after {int(stale_after)}",
        *([f"hold_s {int(hold_s)}"] if hold_s is not None else []),
        *(f"model {percent_encoded(m)}" for m in models),
        *rule_lines,
        "",
    ])


def parse_kv(line: str) -> dict[str, str]:
    """One `scontrol show ... -o` line as a dict (values with spaces kept whole)."""
    from pal_slurm.slurm.nodeinfo import parse_kv_line

    return parse_kv_line(line)


@dataclass
class SlurmCluster:
    dir: Path
    env: dict[str, str]
    conf_dir: Path
    nodes: list[str] = field(default_factory=list)
    submitted: list[str] = field(default_factory=list)  # every job submit() made this session

    # ------------------------------------------------------------ commands
    def run(self, argv: Sequence[str], *, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        """A Slurm command against the cluster (argument list; output captured as text)."""
        proc = subprocess.run(list(argv), check=False, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, **self.env}, stdin=subprocess.DEVNULL)
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(argv[:3])} failed ({proc.returncode}): {proc.stderr.strip()}")
        return proc

    def scontrol(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.run(["scontrol", *args], check=check)

    @property
    def out_dir(self) -> Path:
        return self.dir / "jobout"

    def submit(self, args: Sequence[str]) -> str:
        """sbatch ARGS --parsable; output goes to <dir>/jobout/<jobid>.out unless ARGS name one."""
        argv = ["sbatch", "--parsable", *args]
        if not any(a in ("-o", "--output") or a.startswith("--output=") for a in args):
            argv[2:2] = [f"--output={self.out_dir}/%j.out"]
        proc = self.run(argv)
        jobid = proc.stdout.strip().split(";")[0]
        assert jobid.isdigit(), f"sbatch printed {proc.stdout!r}"
        self.submitted.append(jobid)
        return jobid

    def job(self, jobid: str) -> dict[str, str]:
        """`scontrol show job -o J` as a dict ({} when Slurm no longer knows the job)."""
        proc = self.scontrol("show", "job", "-o", str(jobid), check=False)
        line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("JobId=")), "")
        return parse_kv(line) if line else {}

    def wait_state(self, jobid: str, states: Iterable[str] | str, timeout: float = 30) -> str:
        """Poll until the job's JobState is one of STATES (or finished when STATES does not say);
        returns the state.  Fails with the job record when the time runs out or the job ends
        in a state not asked for."""
        wanted = {states} if isinstance(states, str) else set(states)
        deadline = time.monotonic() + timeout
        info: dict[str, str] = {}
        while True:
            info = self.job(jobid)
            state = info.get("JobState", "")
            if state in wanted:
                return state
            if state in FINISHED:
                raise AssertionError(f"job {jobid} ended {state}, wanted {sorted(wanted)}: {info}")
            if time.monotonic() > deadline:
                raise AssertionError(f"job {jobid} not in {sorted(wanted)} after {timeout:g}s: {info}")
            time.sleep(0.25)

    def wait_quiet(self, timeout: float = 60) -> None:
        """Wait until no job is still queued, running or completing (tests submit some with
        plain sbatch, so every job of the cluster counts).

        Why: a placer that accounts finished jobs (observe-mode savings, the demo's report)
        would also account an earlier test's job that its clean-up cancelled a moment ago;
        such a job, cancelled within a second of starting, is rightly unaccounted and would
        make the report's counts depend on the test order."""
        deadline = time.monotonic() + timeout
        while True:
            out = self.run(["squeue", "--all", "--noheader", "--format=%i %T"], check=False).stdout
            busy = [line.strip() for line in out.splitlines() if line.strip()]
            if not busy:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"jobs of earlier tests still active after {timeout:g}s: {busy}")
            time.sleep(0.25)

    def job_output(self, jobid: str) -> str:
        path = self.out_dir / f"{jobid}.out"
        deadline = time.monotonic() + 5
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        return path.read_text(encoding="utf-8", errors="replace")

    def job_env(self, jobid: str) -> dict[str, str]:
        """KEY=VALUE lines of a job that ran `env` (or printed such lines)."""
        out = {}
        for line in self.job_output(jobid).splitlines():
            m = re.match(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", line)
            if m:
                out[m[1]] = m[2]
        return out

    def squeue_json(self) -> dict[str, Any]:
        """Every job the controller holds, ended ones included (on both Slurm versions)."""
        from pal_slurm.slurm.command import SQUEUE_ALL_JOBS_JSON

        return json.loads(self.run(list(SQUEUE_ALL_JOBS_JSON)).stdout)

    def cancel(self, jobids: Iterable[str]) -> None:
        """scancel JOBS (only ours: other sessions may share the cluster)."""
        ids = [str(j) for j in jobids]
        if ids:
            self.run(["scancel", *ids], check=False)

    def clean_leftovers(self) -> None:
        """Undo what an earlier, interrupted test session left: its queued jobs (they hold GPUs or
        block a test that needs an idle cluster) and nodes drained by pal (`pal gpus drain`
        tests); and say so. Only called by a session that got the cluster's lock for itself
        while every running session holds it shared, so no session running alongside loses its jobs."""
        from pal_slurm.slurm import parse_json

        doc = parse_json.load(self.run(["squeue", "--all", "--json"]).stdout, "squeue --json")
        # `pal demo --slurm` may use this cluster too (same default directory): its jobs are its own
        left = [j.job_id for j in parse_json.jobs_from_doc(doc, active_only=True)
                if not j.name.startswith("pal-demo-")]
        if left:
            print(f"slurm test cluster: cancelling {len(left)} jobs an earlier session left: {' '.join(left)}",
                  file=sys.stderr)
            self.cancel(left)
            deadline = time.time() + 60
            while time.time() < deadline and set(left) & set(
                    self.run(["squeue", "--all", "--noheader", "--format=%i"], check=False).stdout.split()):
                time.sleep(0.5)
        self.resume_pal_drained()

    def resume_pal_drained(self) -> list[str]:
        """RESUME every node drained with a `pal:` reason (only tests drain test-cluster nodes)."""
        out = self.run(["scontrol", "show", "node", "-o"], check=False).stdout
        drained = [f["NodeName"] for f in (parse_kv(line) for line in out.splitlines() if line.strip())
                   if "DRAIN" in f.get("State", "") and f.get("Reason", "").startswith("pal:")]
        for node in drained:
            print(f"slurm test cluster: resuming {node}, drained by pal", file=sys.stderr)
            self.scontrol("update", f"NodeName={node}", "State=RESUME", check=False)
        return drained

    # ------------------------------------------------------------ the submit filter
    @property
    def filter_state(self) -> Path:
        return self.dir / "pal" / "filter-state"

    @property
    def kill_switch(self) -> Path:
        return self.dir / "pal" / "filter-disabled"

    def set_filter(self, mode: str, heartbeat_age_s: float = 0, rules: Iterable[Mapping[str, Any]] = (),
                   *, stale_after: int = 30, models: Sequence[str] = ("v100",), hold_s: int | None = None) -> None:
        """'off': the kill switch exists.  'observe'/'enforce': state file written atomically
        (heartbeat = now - heartbeat_age_s), kill switch removed."""
        if mode not in ("off", "observe", "enforce"):
            raise ValueError(f"mode must be off, observe or enforce, not {mode!r}")
        if mode == "off":
            self.kill_switch.touch()
            return
        text = filter_state_text(mode, int(time.time() - heartbeat_age_s), rules, stale_after=stale_after,
                                 models=models, hold_s=hold_s)
        tmp = self.filter_state.with_name(f".{self.filter_state.name}.tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(self.filter_state)
        self.kill_switch.unlink(missing_ok=True)


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """The running test cluster (started once per session, left running afterwards)."""
    if shutil.which("slurmctld", path=os.environ.get("PATH", "") + ":/usr/sbin") is None:
        _unavailable(f"Slurm is not installed (run `{SCRIPT.relative_to(REPO)} install` as root)")
    if os.geteuid() != 0:
        _unavailable("the test cluster needs root (slurmd, mknod)")
    env = {**os.environ, "PAL_PYTHON": sys.executable}
    proc = subprocess.run([str(SCRIPT), "start"], check=False, capture_output=True, text=True, env=env, timeout=300)
    if proc.returncode != 0:
        _unavailable(f"`slurm-cluster.sh start` failed:\n{proc.stderr.strip()}")
    exports = subprocess.run([str(SCRIPT), "env"], capture_output=True, text=True, env=env, check=True).stdout
    cluster_env = dict(re.findall(r"^export ([A-Z_]+)=(.*)$", exports, flags=re.MULTILINE))
    directory = Path(cluster_env["PAL_TEST_SLURM_DIR"])
    nodes_conf = (directory / "etc" / "nodes.conf").read_text(encoding="utf-8")
    cluster = SlurmCluster(dir=directory, env=cluster_env, conf_dir=directory / "etc",
                           nodes=re.findall(r"^NodeName=(\S+)", nodes_conf, flags=re.MULTILINE))
    cluster.out_dir.mkdir(exist_ok=True)
    # every session holds the lock shared for its whole life; only one that finds no other
    # session (the lock free for exclusive use) cleans up what an earlier one left
    lock = open(directory / "test-session.lock", "w")  # noqa: SIM115 - held for the whole session
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        cluster.clean_leftovers()
    except BlockingIOError:
        print("slurm test cluster: another test session is running; leaving its jobs alone", file=sys.stderr)
    fcntl.flock(lock, fcntl.LOCK_SH)  # from exclusive, or waiting out another session's clean-up
    saved = {k: os.environ.get(k) for k in cluster_env}
    os.environ.update(cluster_env)
    try:
        yield cluster
    finally:
        lock.close()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture
def slurm_filter(slurm_cluster: SlurmCluster) -> Iterator[SlurmCluster]:
    """The cluster for a test that calls set_filter(): the filter is switched off again afterwards,
    and the jobs the test submitted are cancelled, so no later test meets a held queue."""
    first = len(slurm_cluster.submitted)
    try:
        yield slurm_cluster
    finally:
        slurm_cluster.set_filter("off")
        slurm_cluster.cancel(slurm_cluster.submitted[first:])
