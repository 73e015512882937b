"""One placer at a time, and a placer killed in a burst, on a real slurmctld with the real
submit filter: two `pal placer` processes started together (one places, the other stands by
and takes over when the first stops, releasing nothing while it stands by), and `kill -9`
in the middle of 200 submissions (nothing starts with another GPU request than its user's or
the placement's whole one, nothing is left held, everything runs)."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from pal_slurm.slurm import parse_json
from pal_slurm.slurm.command import SQUEUE_ALL_JOBS_JSON
from pal_slurm.slurm.model import SlurmJob
from tests.support.faults import check_job
from tests.slurm.conftest import FINISHED
from tests.slurm.placer_rig import Rig, classified_db, rig  # noqa: F401 - fixtures
from tests.slurm.records import job_state

pytestmark = pytest.mark.slurm


def _all_jobs(rig: Rig, ids: set[str]) -> dict[str, SlurmJob]:
    out = rig.cluster.run(list(SQUEUE_ALL_JOBS_JSON)).stdout
    doc = parse_json.load(out, "squeue --json")
    return {j.job_id: j for j in parse_json.jobs_from_doc(doc, active_only=False) if j.job_id in ids}


def _wait_log(p: object, text: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while text not in p.output():  # type: ignore[attr-defined]
        assert time.monotonic() < deadline, f"{text!r} not in the log:\n{p.output()}"  # type: ignore[attr-defined]
        time.sleep(0.2)


def test_two_placers_started_together_one_places_the_other_stands_by(rig: Rig, tmp_path: Path) -> None:
    from tests.slurm.placer_support import PlacerProcess

    config = rig.config()
    rig.assert_no_other_placer()
    a = PlacerProcess(config, rig.cluster.env, tmp_path / "a.log")
    b = PlacerProcess(config, rig.cluster.env, tmp_path / "b.log")
    rig.placers += [a, b]
    deadline = time.monotonic() + 30
    while not any("standing by" in p.output() for p in (a, b)):
        assert time.monotonic() < deadline, f"no placer stands by:\nA:\n{a.output()}\nB:\n{b.output()}"
        time.sleep(0.2)
    active, standby = (b, a) if "standing by" in a.output() else (a, b)
    assert "standing by" not in active.output()
    assert str(active.proc.pid) in standby.output(), "the standby names the placer that holds the lock"
    rig.filter_on()

    # the active placer keeps a job waiting (every GPU busy); the standby, stopped, releases nothing
    rig.fill_gpus()
    waiting = rig.submit(["--gres=gpu:1"])
    rig.wait_held([waiting])
    assert standby.stop() == 0
    time.sleep(1)
    assert rig.held([waiting]) == [waiting], "a standby placer released a job it does not own"
    assert "released nothing" in standby.output()
    rig.free_gpus()
    rig.wait_finished([waiting], timeout=60)

    # the standby of a second pair takes over when the active one stops
    c = PlacerProcess(config, rig.cluster.env, tmp_path / "c.log")
    rig.placers.append(c)
    _wait_log(c, "standing by")
    assert active.stop() == 0
    _wait_log(c, "the placer lock is ours now", timeout=30)
    jobs = [rig.submit(["--gres=gpu:2"]) for _ in range(3)]
    recs = rig.wait_finished(jobs, timeout=90)
    assert all(job_state(r) == "COMPLETED" for r in recs.values()), recs
    assert all(str(r["admin_comment"]).startswith("pal: placed") for r in recs.values()), \
        {j: r["admin_comment"] for j, r in recs.items()}


def test_a_placer_killed_during_a_burst_of_200_submissions_loses_no_job(rig: Rig, tmp_path: Path) -> None:
    """`kill -9` mid-burst, then what systemd does: ExecStopPost's release-stale and a restart."""
    config = rig.config(hold_s=60)
    p = rig.start(config)
    rig.filter_on()
    shapes = [["--gres=gpu:1"], ["--gres=gpu:2"], ["--gpus=3"], ["--gres=gpu:4"], ["-N", "2", "--gres=gpu:1"]]
    killed_at = None
    for i in range(200):
        jobid = rig.submit(shapes[i % len(shapes)], wrap="sleep 0.1")
        if i == 90:
            p.proc.send_signal(signal.SIGKILL)
            p.proc.wait(10)
            killed_at = i
    assert killed_at is not None
    out = rig.pal(config, "placer", "release-stale", "--max-age", "0", "--grace")
    assert out.returncode == 0, out.stderr
    rig.start(config)
    recs = rig.wait_finished(rig.jobs, timeout=400)
    bad = {j: job_state(r) for j, r in recs.items() if job_state(r) != "COMPLETED"}
    assert not bad, bad
    final = _all_jobs(rig, set(rig.jobs))
    assert set(final) == set(rig.jobs)
    for i, jobid in enumerate(rig.jobs):
        job = final[jobid]
        shape = shapes[i % len(shapes)]
        user = {"tres_per_node": "", "tres_per_job": ""}
        if shape[-1].startswith("--gpus="):
            user["tres_per_job"] = "gres:gpu:" + shape[-1].split("=")[1]
        else:
            user["tres_per_node"] = "gres:gpu:" + shape[-1].split(":")[-1]
        how = check_job(job, user, time.time())
        assert how in ("user", "intent"), (jobid, how, job)
        if not user["tres_per_job"]:  # --gpus=N without -N: Slurm picks the node count, as without pal
            assert job.node_count == (2 if "-N" in shape else 1), (jobid, job.node_count, shape)


def test_a_database_that_hangs_never_stalls_the_placer(rig: Rig, tmp_path: Path) -> None:
    """The placer's database locked by another process (every read and write waits out its
    10 s busy timeout, then fails, as a black-holed server costs its connect timeout): jobs are
    still placed within seconds with the classes in memory, the heartbeat stays fresh, no hold
    runs out mid-placement, and the decisions are written once the database is free."""
    import sqlite3

    from pal_slurm.db.engine import make_engine
    from pal_slurm.placer.audit import placements_for
    from pal_slurm.slurm.filter_state import heartbeat_age

    url, path = rig.db_copy()
    config = rig.config(db_url=url, hold_s=30)
    rig.start(config)
    rig.filter_on()
    first = rig.submit(["--gres=gpu:1"])
    rig.wait_finished([first], timeout=60)

    blocker = sqlite3.connect(path, timeout=1, isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")
    try:
        t0 = time.monotonic()
        jobs = [rig.submit(["--gres=gpu:1" if i % 2 else "--gres=gpu:2"]) for i in range(8)]
        ages: list[float] = []
        while time.monotonic() - t0 < 25:
            ages.append(heartbeat_age(str(rig.cluster.filter_state)) or 99.0)
            time.sleep(0.25)
        recs = rig.records(jobs)
        started = {j: r for j, r in recs.items() if job_state(r) in FINISHED | {"RUNNING"}}
        assert len(started) == len(jobs), {j: (job_state(r), r["admin_comment"]) for j, r in recs.items()}
        assert all(str(r["admin_comment"]).startswith("pal: placed") for r in recs.values()), \
            {j: r["admin_comment"] for j, r in recs.items()}
        assert max(ages) < 3.0, f"heartbeat ages while the database hung: max {max(ages):.1f} s"
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    engine = make_engine(url, create=False)
    deadline = time.monotonic() + 60
    while True:
        applied = {r["job_id"] for r in placements_for(engine, limit=500) if r["outcome"] == "applied"}
        if set(jobs) <= applied:
            break
        assert time.monotonic() < deadline, f"decisions not written after the database came back: {applied}"
        time.sleep(1)
    log = rig.placers[-1].output()
    assert "database is locked" in log, "the database did hang for the placer"
    assert "hold ended" not in log
