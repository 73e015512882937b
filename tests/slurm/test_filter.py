"""The submit filter (spank_hooks/job_submit.lua) and the --pal-class SPANK option inside a real
slurmctld on the test cluster.

Each test sets the filter state through `slurm_filter.set_filter` (which switches the filter off
and cancels leftover jobs afterwards), releases or cancels the jobs it held itself, and checks
what Slurm recorded: begin time, state reason, admin_comment, the rewritten request.  The filter
holds through the begin time (reason BeginTime), never with priority 0.  The filter
re-reads its state file at most every 2 s, so every state change is followed by a short wait.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.slurm.records import int_field, records_of

pytestmark = pytest.mark.slurm

STATE_CACHE_S = 2.2          # job_submit.lua caches the state file for CACHE_SECONDS = 2
GPU_RE = re.compile(r"^gres[:/]gpu[:=]")


def _name() -> str:
    return f"palf-{uuid.uuid4().hex[:8]}"


def _jobs(cluster: Any, jobid: str) -> list[dict[str, Any]]:
    """Every squeue --json record belonging to JOBID (array tasks and het components included)."""
    return records_of(cluster.squeue_json()["jobs"], jobid)


def _job(cluster: Any, jobid: str) -> dict[str, Any]:
    records = [j for j in _jobs(cluster, jobid) if int_field(j.get("job_id")) == int(jobid)]
    assert records, f"job {jobid} not in squeue --json"
    return records[0]


def _configure(cluster: Any, mode: str, **kwargs: Any) -> None:
    cluster.set_filter(mode, **kwargs)
    time.sleep(STATE_CACHE_S)


def _ctld_log(cluster: Any) -> str:
    return (cluster.dir / "log" / "slurmctld.log").read_text(encoding="utf-8", errors="replace")


def _wait_log(cluster: Any, text: str, timeout: float = 5) -> str:
    deadline = time.monotonic() + timeout
    while True:
        log = _ctld_log(cluster)
        if text in log or time.monotonic() > deadline:
            return log
        time.sleep(0.2)


@pytest.fixture
def jobs(slurm_filter: Any) -> Iterator[list[str]]:
    """Job ids a test submitted; cancelled afterwards whatever happened."""
    ids: list[str] = []
    yield ids
    if ids:
        slurm_filter.run(["scancel", *ids], check=False)


def _submit(cluster: Any, jobs: list[str], args: Sequence[str], name: str | None = None) -> str:
    argv = ["-J", name or _name(), *args]
    if not any(a == "--wrap" or a.endswith(".sh") for a in args):
        argv += ["--wrap", "sleep 1"]
    jobid = cluster.submit(argv)
    jobs.append(jobid)
    return jobid


def _assert_held(cluster: Any, jobid: str, admin_comment: str, hold_s: int = 90) -> None:
    """Held the new way: pending, reason BeginTime, begin time about now + hold_s, priority not 0."""
    deadline = time.monotonic() + 5
    while True:
        job = _job(cluster, jobid)
        if job["state_reason"] == "BeginTime" or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert job["state_reason"] == "BeginTime", job["state_reason"]
    assert int_field(job["priority"]) != 0, job
    ahead = (int_field(job["eligible_time"]) or 0) - time.time()
    assert hold_s - 10 < ahead <= hold_s + 1, (ahead, hold_s)
    assert job["admin_comment"] == admin_comment
    cluster.wait_state(jobid, "PENDING", timeout=5)


def _assert_untouched(cluster: Any, jobid: str) -> None:
    for job in _jobs(cluster, jobid):
        assert "pal:" not in (job.get("admin_comment") or ""), job
        assert int_field(job["priority"]) != 0, job
        assert job["state_reason"] != "BeginTime", job
        assert (int_field(job["eligible_time"]) or 0) <= time.time() + 1, job


def _release_and_run(cluster: Any, jobid: str) -> None:
    """What the placer does to end the hold."""
    cluster.scontrol("update", f"jobid={jobid}", "StartTime=now")
    cluster.wait_state(jobid, {"RUNNING", "COMPLETED"}, timeout=30)


# ---------------------------------------------------------------- class hints, enforce mode


def test_pal_class_option_reaches_the_filter(slurm_filter: Any, jobs: list[str]) -> None:
    """The SPANK option's value arrives as _SLURM_SPANK_OPTION_pal_pal_class in spank_job_env."""
    _configure(slurm_filter, "enforce")
    jobid = _submit(slurm_filter, jobs, ["--pal-class=A", "--gres=gpu:1"])
    _assert_held(slurm_filter, jobid, "pal:held class=A src=spank")
    _release_and_run(slurm_filter, jobid)


def test_pal_class_in_a_batch_script_directive(slurm_filter: Any, jobs: list[str], tmp_path: Path) -> None:
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n#SBATCH --pal-class=d\n#SBATCH --gpus=1\nsleep 1\n")
    _configure(slurm_filter, "enforce")
    jobid = _submit(slurm_filter, jobs, [str(script)])
    _assert_held(slurm_filter, jobid, "pal:held class=D src=spank")
    _release_and_run(slurm_filter, jobid)


def test_comment_hint(slurm_filter: Any, jobs: list[str]) -> None:
    _configure(slurm_filter, "enforce")
    jobid = _submit(slurm_filter, jobs, ["--comment", "nightly pal:class=c", "--gpus=1"])
    _assert_held(slurm_filter, jobid, "pal:held class=C src=comment")
    _release_and_run(slurm_filter, jobid)


def test_rule_hint_and_spank_precedence(slurm_filter: Any, jobs: list[str]) -> None:
    name = _name()
    _configure(slurm_filter, "enforce", rules=[{"user": "root", "name": name, "class": "B", "id": "rule-7"}])
    by_rule = _submit(slurm_filter, jobs, ["--gpus-per-node=1"], name=name)
    by_option = _submit(slurm_filter, jobs, ["--gpus-per-node=1", "--pal-class=auto"], name=name)
    other = _submit(slurm_filter, jobs, ["--gpus-per-node=1"])
    _assert_held(slurm_filter, by_rule, "pal:held class=B src=rule:rule-7")
    _assert_held(slurm_filter, by_option, "pal:held class=auto src=spank")
    _assert_held(slurm_filter, other, "pal:held class=auto src=default")
    for jobid in (by_rule, by_option, other):
        _release_and_run(slurm_filter, jobid)


def test_existing_admin_comment_and_odd_names(slurm_filter: Any, jobs: list[str]) -> None:
    """A name with quotes, shell metacharacters and unicode is logged escaped, and the job is held."""
    name = 'x"; rm -rf / # ünï $(id)'
    _configure(slurm_filter, "enforce")
    jobid = _submit(slurm_filter, jobs, ["--gres=gpu:1"], name=name)
    _assert_held(slurm_filter, jobid, "pal:held class=auto src=default")
    log = _wait_log(slurm_filter, r'pal: held job "x\"; rm -rf / # ')
    assert r'pal: held job "x\"; rm -rf / # ' in log
    _release_and_run(slurm_filter, jobid)


# ---------------------------------------------------------------- modes, heartbeat, kill switch


def test_observe_mode_runs_the_job_unchanged(slurm_filter: Any, jobs: list[str]) -> None:
    name = _name()
    _configure(slurm_filter, "observe")
    jobid = _submit(slurm_filter, jobs, ["--gres=gpu:1", "--pal-class=B"], name=name)
    slurm_filter.wait_state(jobid, {"RUNNING", "COMPLETED"}, timeout=30)
    job = _job(slurm_filter, jobid)
    assert job["admin_comment"] == ""
    assert GPU_RE.match(job["tres_per_node"]) and job["tres_per_node"].endswith(":1")
    line = f'pal: observe job "{name}" would hold class=B'
    assert line in _wait_log(slurm_filter, line)


def test_stale_heartbeat_holds_nothing(slurm_filter: Any, jobs: list[str]) -> None:
    _configure(slurm_filter, "enforce", heartbeat_age_s=120)
    jobid = _submit(slurm_filter, jobs, ["--gres=gpu:1", "--pal-class=A"])
    _assert_untouched(slurm_filter, jobid)
    slurm_filter.wait_state(jobid, {"RUNNING", "COMPLETED"}, timeout=30)


def test_kill_switch_leaves_everything_to_slurm(slurm_filter: Any, jobs: list[str]) -> None:
    _configure(slurm_filter, "enforce")
    slurm_filter.set_filter("off")         # the kill switch takes effect at once (no cache)
    jobid = _submit(slurm_filter, jobs, ["--gres=gpu:1"])
    _assert_untouched(slurm_filter, jobid)
    slurm_filter.wait_state(jobid, {"RUNNING", "COMPLETED"}, timeout=30)
    # Not even the bare-type rewrite: plain Slurm refuses a model type our per-slot gres.conf lacks.
    proc = slurm_filter.run(["sbatch", "--gres=gpu:v100:1", "-o", "/dev/null", "--wrap", "true"], check=False)
    assert proc.returncode != 0, proc.stdout
    jobs.extend(re.findall(r"(\d+)", proc.stdout))


def test_broken_state_files_do_not_break_submission(slurm_filter: Any, jobs: list[str]) -> None:
    format1 = f'return {{ format = 1, mode = "enforce", heartbeat = {int(time.time())}, models = {{ "v100" }} }}'
    for text in ("return {", "os.exit(1)", "return 42", "slurm.SUCCESS = 7 return {}", "while true do end",
                 "return ('x'):rep(256 * 1024 * 1024)", format1, "format 2\nmode enforce\nheartbeat soon"):
        slurm_filter.filter_state.write_text(text + "\n", encoding="utf-8")
        slurm_filter.kill_switch.unlink(missing_ok=True)
        time.sleep(STATE_CACHE_S)
        jobid = _submit(slurm_filter, jobs, ["--gres=gpu:1"])
        _assert_untouched(slurm_filter, jobid)
        slurm_filter.wait_state(jobid, {"RUNNING", "COMPLETED"}, timeout=30)
    assert slurm_filter.scontrol("ping").stdout.count("UP") >= 1
    assert "pal: no usable filter state" in _ctld_log(slurm_filter)


# ---------------------------------------------------------------- bare model types


@pytest.mark.parametrize(
    ("args", "field", "count"),
    [
        (["--gres=gpu:v100:2"], "tres_per_node", "2"),
        (["--gpus=v100:1"], "tres_per_job", "1"),
        (["--gpus-per-task=v100:1", "-n", "2"], "tres_per_task", "1"),
    ],
    ids=["gres", "gpus", "gpus-per-task"],
)
def test_bare_model_type_is_rewritten_and_runs(slurm_filter: Any, jobs: list[str], args: list[str], field: str,
                                               count: str) -> None:
    _configure(slurm_filter, "observe")
    jobid = _submit(slurm_filter, jobs, args)
    job = _job(slurm_filter, jobid)
    assert re.fullmatch(rf"gres[:/]gpu[:=]{count}", job[field]), job[field]
    assert job["features"] == "v100"
    slurm_filter.wait_state(jobid, {"RUNNING", "COMPLETED"}, timeout=30)


def test_bare_model_type_with_constraint_in_enforce_mode(slurm_filter: Any, jobs: list[str]) -> None:
    _configure(slurm_filter, "enforce")
    jobid = _submit(slurm_filter, jobs, ["--gres=gpu:v100:2", "--constraint=v100|v100"])
    job = _job(slurm_filter, jobid)
    assert re.fullmatch(r"gres[:/]gpu:2", job["tres_per_node"]), job["tres_per_node"]
    assert job["features"] == "(v100|v100)&v100"
    _assert_held(slurm_filter, jobid, "pal:held class=auto src=default")
    _release_and_run(slurm_filter, jobid)


# ---------------------------------------------------------------- jobs never moved, bad option


@pytest.mark.parametrize(
    "args",
    [
        ["--nodelist=pal-n2", "--gres=gpu:1"],
        ["--gres=gpu:v100_g1:1"],
        ["--array=0-1", "--gres=gpu:1"],
        ["--pal-class=off", "--gres=gpu:1"],
        ["--comment=pal:class=OFF", "--gres=gpu:1"],
        ["--gres=gpu:0"],
        ["-n", "1"],
    ],
    ids=["nodelist", "slot-type", "array", "pal-class-off", "comment-off", "zero-gpus", "no-gpus"],
)
def test_jobs_that_are_never_held(slurm_filter: Any, jobs: list[str], args: list[str]) -> None:
    _configure(slurm_filter, "enforce")
    jobid = _submit(slurm_filter, jobs, args)
    _assert_untouched(slurm_filter, jobid)


def test_het_job_is_never_held(slurm_filter: Any, jobs: list[str], tmp_path: Path) -> None:
    script = tmp_path / "het.sh"
    script.write_text("#!/bin/sh\nsleep 1\n")
    _configure(slurm_filter, "enforce")
    jobid = slurm_filter.submit(["-J", _name(), "--gres=gpu:1", ":", "--gres=gpu:1", str(script)])
    jobs.append(jobid)
    components = _jobs(slurm_filter, jobid)
    assert len(components) == 2
    _assert_untouched(slurm_filter, jobid)


def test_hold_s_from_the_state_and_the_hold_ends_by_itself(slurm_filter: Any, jobs: list[str]) -> None:
    """Nobody releases the job: it starts once its begin time (now + hold_s) has passed."""
    _configure(slurm_filter, "enforce", hold_s=12)
    jobid = _submit(slurm_filter, jobs, ["--gres=gpu:1"])
    t0 = time.time()
    _assert_held(slurm_filter, jobid, "pal:held class=auto src=default", hold_s=12)
    slurm_filter.wait_state(jobid, {"RUNNING", "COMPLETED"}, timeout=45)
    assert time.time() - t0 >= 8  # not before its begin time


def test_own_begin_time_in_the_future_is_not_held(slurm_filter: Any, jobs: list[str]) -> None:
    _configure(slurm_filter, "enforce")
    jobid = _submit(slurm_filter, jobs, ["--begin=now+600", "--gres=gpu:1"])
    job = _job(slurm_filter, jobid)
    assert job["admin_comment"] == "", job
    assert 590 < (int_field(job["eligible_time"]) or 0) - time.time() <= 601  # the user's, not ours


def test_requests_slurm_rejects_are_rejected_in_enforce_mode(slurm_filter: Any, jobs: list[str]) -> None:
    """The reason for the begin-time hold: Slurm validates the job at submit as without pal-slurm."""
    _configure(slurm_filter, "enforce")
    for args in (["--gres=gpu:9"], ["--mem=999999", "--gres=gpu:1"], ["-c", "9", "--gres=gpu:1"]):
        proc = slurm_filter.run(["sbatch", *args, "-o", "/dev/null", "--wrap", "true"], check=False)
        jobs.extend(re.findall(r"(\d+)", proc.stdout))
        assert proc.returncode != 0, (args, proc.stdout)


def test_user_hold_is_left_alone(slurm_filter: Any, jobs: list[str]) -> None:
    _configure(slurm_filter, "enforce")
    jobid = _submit(slurm_filter, jobs, ["--hold", "--gres=gpu:1"])
    job = _job(slurm_filter, jobid)
    assert int_field(job["priority"]) == 0
    assert job["admin_comment"] == ""


def test_invalid_pal_class_is_the_plugins_error(slurm_filter: Any) -> None:
    assert "pal_spank.so" in (slurm_filter.conf_dir / "plugstack.conf").read_text(), "pal_spank.so not built"
    before = len(slurm_filter.squeue_json()["jobs"])
    proc = slurm_filter.run(["sbatch", "--pal-class=bogus", "--gres=gpu:1", "-o", "/dev/null", "--wrap", "true"],
                            check=False)
    assert proc.returncode != 0
    assert "pal: invalid --pal-class value 'bogus': use one of A, B, C, D, auto, off" in proc.stderr
    assert proc.stdout.strip() == ""
    assert len(slurm_filter.squeue_json()["jobs"]) == before
