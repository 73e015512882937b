"""What a stopped replay arm says about the jobs it cancelled (pal_eval.replay.harness, cancel).

These tests put fake `sbatch`/`scancel`/`squeue` scripts first on PATH. A fake is used here
only because what is tested is our own wording when Slurm cannot be reached or does not let a
job go, which a healthy test cluster cannot produce on demand; that cancel_all really cancels
jobs is tested on the real cluster (tests/slurm/test_replay.py).
"""

from __future__ import annotations

import json
import signal
from dataclasses import replace
from pathlib import Path

import pytest

from pal_eval.replay import harness
from pal_eval.replay.cancel import cancel_all, cancel_note
from pal_eval.replay.harness import ReplayInterrupted, run_arm
from pal_eval.replay.plan import plan_replay
from pal_slurm.errors import PalError
from pal_slurm.simulate.estimates import parse_runtime_estimate
from pal_slurm.simulate.traces import Trace, TraceJob

UNREACHABLE = 'echo "{cmd}: error: Unable to contact slurm controller (connect failure)" >&2; exit 1'


def fake_slurm(tmp_path: Path, **scripts: str) -> dict[str, str]:
    """A bin directory with one sh script per command; the env that puts it first on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for cmd, body in scripts.items():
        path = bin_dir / cmd
        path.write_text(f"#!/bin/sh\n{body.format(cmd=cmd, dir=tmp_path)}\n", encoding="utf-8")
        path.chmod(0o755)
    return {"PATH": f"{bin_dir}:/usr/bin:/bin"}


def squeue_doc(**states: str) -> str:
    return json.dumps({"jobs": [{"job_id": int(j), "name": "replay-x", "job_state": [s]} for j, s in states.items()]})


def test_jobs_are_reported_left_when_scancel_and_squeue_cannot_reach_slurm(tmp_path: Path):
    env = fake_slurm(tmp_path, scancel=UNREACHABLE, squeue=UNREACHABLE)
    left = cancel_all(["101", "102"], env, wait_s=0.5)
    assert left == ["101", "102"]
    assert cancel_note(["101", "102"], left) == ("cancelled 0 of its 2 submitted jobs; 2 may still be queued or "
                                                 "running: 101 102 (scancel them)")


def test_only_the_jobs_squeue_still_lists_active_are_reported_left(tmp_path: Path):
    doc = tmp_path / "squeue.json"
    doc.write_text(squeue_doc(**{"101": "CANCELLED", "102": "RUNNING"}), encoding="utf-8")
    env = fake_slurm(tmp_path, scancel="exit 0", squeue=f"cat {doc}")
    left = cancel_all(["101", "102", "103"], env, wait_s=0.5)  # 103: no longer listed at all
    assert left == ["102"]
    assert cancel_note(["101", "102", "103"], left) == ("cancelled 2 of its 3 submitted jobs; 1 may still be "
                                                        "queued or running: 102 (scancel them)")


def test_all_jobs_seen_gone_are_reported_cancelled(tmp_path: Path):
    doc = tmp_path / "squeue.json"
    doc.write_text(squeue_doc(**{"101": "CANCELLED"}), encoding="utf-8")
    env = fake_slurm(tmp_path, scancel="exit 0", squeue=f"cat {doc}")
    left = cancel_all(["101", "102"], env, wait_s=5.0)
    assert left == []
    assert cancel_note(["101", "102"], left) == "cancelled 2 submitted jobs"


def two_job_plan():
    jobs = tuple(TraceJob(job_id=str(i), num_gpus=1, submit_time=0.0, work=300.0, work_unit="seconds", model="m",
                          job_class="D", iter_time_s=1.0, line=i + 2, source="t") for i in range(2))
    return plan_replay(Trace(name="t", jobs=jobs), seconds_per_hour=3600.0, estimate=parse_runtime_estimate("x1"),
                       nodes=1, gpus_per_node=4)


# the first sbatch is accepted (job 101), every later one refused
SBATCH_ONCE = ('if [ -e "{dir}/sbatch.done" ]; then echo "sbatch: error: Batch job submission failed: '
               'Requested node configuration is not available" >&2; exit 1; fi; : > "{dir}/sbatch.done"; echo 101')
FACTORS = {"n0": {str(m): {"D": 1.0} for m in range(4)}}


def test_a_stopped_arm_does_not_claim_to_have_cancelled_jobs_slurm_never_let_go(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(harness, "_CANCEL_WAIT_ON_ERROR_S", 0.5)
    env = fake_slurm(tmp_path, sbatch=SBATCH_ONCE, scancel=UNREACHABLE, squeue=UNREACHABLE)
    with pytest.raises(PalError, match=r"^replay arm 'slurm' stopped after 1 of 2 submissions \(sbatch: .*\); "
                                       r"cancelled 0 of its 1 submitted jobs; 1 may still be queued or running: "
                                       r"101 \(scancel them\); no result$"):
        run_arm(two_job_plan(), arm="slurm", work_dir=tmp_path / "w", factors=FACTORS, locality_penalty=1.0,
                env=env)


def test_an_interrupted_arm_names_the_jobs_it_could_not_confirm_cancelled(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(harness, "_CANCEL_WAIT_S", 0.5)
    doc = tmp_path / "squeue.json"
    doc.write_text(squeue_doc(**{"101": "RUNNING"}), encoding="utf-8")
    env = fake_slurm(tmp_path, sbatch="echo 101", scancel="exit 0", squeue=f"cat {doc}")
    plan = two_job_plan()
    plan = replace(plan, jobs=plan.jobs[:1])

    def ctrl_c(_: str) -> None:  # the first progress note comes after the first submission
        raise KeyboardInterrupt

    with pytest.raises(ReplayInterrupted, match=r"^replay arm 'slurm' interrupted: cancelled 0 of its 1 submitted "
                                                r"jobs; 1 may still be queued or running: 101 \(scancel them\); "
                                                r"no result$"):
        run_arm(plan, arm="slurm", work_dir=tmp_path / "w", factors=FACTORS, locality_penalty=1.0, env=env,
                say=ctrl_c)


def test_a_ctrl_c_that_lands_while_sbatch_runs_still_cancels_that_job(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch,
                                                                      request: pytest.FixtureRequest):
    """The signal arrives while sbatch runs, after it submitted: the job is on the list the
    clean-up cancels (a Ctrl-C before its id was recorded left it running on, unwatched). Python's
    own Ctrl-C handler is put in place first: a test run started in the background by a shell without
    job control inherits SIGINT ignored, and the harness rightly keeps an ignored signal ignored."""
    monkeypatch.setattr(harness, "_CANCEL_WAIT_S", 0.5)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    request.addfinalizer(lambda: signal.signal(signal.SIGINT, previous))
    env = fake_slurm(tmp_path, sbatch='kill -INT $PPID; sleep 0.3; echo 101',
                     scancel='echo "$@" >> "{dir}/scancelled"', squeue="echo '{{\"jobs\": []}}'")
    plan = two_job_plan()
    with pytest.raises(ReplayInterrupted, match=r"^replay arm 'slurm' interrupted: cancelled 1 submitted jobs; "
                                                r"no result$"):
        run_arm(plan, arm="slurm", work_dir=tmp_path / "w", factors=FACTORS, locality_penalty=1.0, env=env)
    assert "101" in (tmp_path / "scancelled").read_text(encoding="utf-8").split()
