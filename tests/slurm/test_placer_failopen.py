"""Fail-open paths of the placement daemon on the real test cluster (docs/admin-guide.md, "Failure modes").

Each test runs its own `pal placer` (enforce mode, 0.5 s cycle, stale_after 5 s) as systemd
would, with the filter's kill switch removed; the `rig` fixture (tests/slurm/placer_rig.py)
always stops the placer, restores the kill switch and cancels every job the test submitted.

Jobs are kept held on purpose by filling all 16 GPUs first with `sleep` jobs that name their
node (the filter never holds those): the placer then has nothing free and leaves the GPU jobs
held, which is the state a crash or a stop must not strand.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from pal_slurm.placer.tag import Tag
from tests.slurm.conftest import FINISHED, SCRIPT
from tests.slurm.placer_rig import STALE_AFTER, STATE_CACHE_S, Rig, classified_db, rig  # noqa: F401 - fixtures
from tests.slurm.records import HELD_TAG, int_field, job_state

pytestmark = pytest.mark.slurm


def _assert_released_and_run(rig: Rig, ids: Sequence[str], why: str) -> None:
    recs = rig.records(ids)
    assert not rig.held(ids), recs
    for rec in recs.values():
        assert rec["admin_comment"] == f"pal: released unchanged: {why}", rec["admin_comment"]
        assert int_field(rec["priority"]) != 0
        assert (int_field(rec["eligible_time"]) or 0) <= time.time() + 1, rec  # StartTime=now: no begin time ahead
    rig.assert_requests_unchanged(recs)
    rig.free_gpus()
    done = rig.wait_finished(ids)
    assert {j: job_state(r) for j, r in done.items()} == dict.fromkeys(ids, "COMPLETED")
    rig.assert_requests_unchanged(done)


# ---------------------------------------------------------------- crash, stop


def test_kill_9_then_release_stale_releases_every_held_job(rig: Rig) -> None:
    cfg = rig.config()
    rig.fill_gpus()
    placer = rig.start(cfg)
    rig.filter_on()
    held = [rig.submit(["--gres=gpu:1"]), rig.submit(["--gpus=2"]), rig.submit(["--gpus-per-node=1", "--pal-class=D"])]
    rig.wait_held(held)

    assert placer.stop(signal.SIGKILL) == -signal.SIGKILL
    # the timer fires while the heartbeat is still fresh: a live daemon's jobs are not touched
    early = rig.pal(cfg, "placer", "release-stale", "--json")
    assert early.returncode == 0, early.stderr
    assert json.loads(early.stdout)["stale"] is False
    assert rig.held(held) == sorted(held)

    while time.time() - rig.heartbeat() <= STALE_AFTER + 1:
        time.sleep(0.2)
    # stale heartbeat: the filter holds nothing new, even before the fail-safe has run
    late = rig.submit(["--gres=gpu:1"])
    time.sleep(0.5)
    assert not rig.held([late]), rig.records([late])

    out = rig.pal(cfg, "placer", "release-stale", "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["stale"] is True and sorted(report["released"]) == sorted(held), report
    assert rig.heartbeat() == 0
    _assert_released_and_run(rig, held, "placer heartbeat stale; released by the fail-safe")
    assert rig.wait_finished([late])[late]["admin_comment"] == ""


def test_kill_9_the_hold_ends_by_itself_without_release_stale(rig: Rig) -> None:
    """The hold is a begin time: while the placer lives it moves it on (jobs stay held past
    hold_s); after a kill -9, with no fail-safe run at all, each hold runs out by itself."""
    hold_s = 12
    cfg = rig.config(hold_s=hold_s)
    rig.fill_gpus()
    placer = rig.start(cfg)
    rig.filter_on()
    held = [rig.submit(["--gres=gpu:1"]), rig.submit(["--gpus=2"])]
    rig.wait_held(held)
    time.sleep(hold_s + 4)   # past the filter's begin time: the placer extended it
    assert rig.held(held) == sorted(held), rig.records(held)
    # held by a begin time still ahead (the reason may read None for a moment right after the
    # placer moved it, until slurmctld's scheduler looks at the job again)
    now = time.time()
    assert all((int_field(r.get("eligible_time")) or 0) > now for r in rig.records(held).values()), rig.records(held)

    assert placer.stop(signal.SIGKILL) == -signal.SIGKILL
    killed = time.monotonic()
    deadline = killed + hold_s + 15
    while rig.held(held):
        assert time.monotonic() < deadline, f"still held {hold_s + 15}s after the kill: {rig.records(held)}"
        time.sleep(0.5)
    assert time.monotonic() - killed <= hold_s + 15
    # nobody released them: the tag is still there, Slurm schedules them as submitted
    recs = rig.records(held)
    assert all(r["admin_comment"].startswith(HELD_TAG) and r["state_reason"] != "BeginTime" for r in recs.values()), recs
    rig.free_gpus()
    done = rig.wait_finished(held)
    assert {j: job_state(r) for j, r in done.items()} == dict.fromkeys(held, "COMPLETED")


def test_sigterm_releases_every_held_job_and_zeroes_the_heartbeat(rig: Rig) -> None:
    cfg = rig.config(restart_grace_s=0)
    rig.fill_gpus()
    placer = rig.start(cfg)
    rig.filter_on()
    held = [rig.submit(["--gres=gpu:1"]), rig.submit(["--gres=gpu:1", "--comment", "pal:class=B"]),
            rig.submit(["--gpus=1"])]
    rig.wait_held(held)

    assert placer.stop() == 0
    assert rig.heartbeat() == 0
    assert f"released {len(held)} held job(s)" in placer.output()
    time.sleep(STATE_CACHE_S)
    late = rig.submit(["--gres=gpu:1"])
    assert not rig.held([late]), rig.records([late])
    _assert_released_and_run(rig, held, "placer stopped")
    assert rig.wait_finished([late])[late]["admin_comment"] == ""


def test_a_restart_leaves_no_unheld_window(rig: Rig) -> None:
    """SIGTERM with the default restart grace: the filter keeps holding for a few seconds, each
    new hold short (grace + 5 s). A job submitted between stop and start is held, and the new
    placer, which publishes its heartbeat before anything else, places it; a job submitted
    after a stop without a restart is held only briefly and then starts by itself."""
    cfg = rig.config()
    placer = rig.start(cfg)
    rig.filter_on()
    assert placer.stop() == 0
    between = rig.submit(["--gres=gpu:1"], wrap="echo GPUS=$SLURM_JOB_GPUS")
    assert rig.held([between]) == [between], rig.records([between])
    hold_end = int_field(rig.records([between])[between]["eligible_time"]) or 0
    assert hold_end <= time.time() + 16, "a hold in the grace window is short"
    rig.start(cfg)
    rec = rig.wait_finished([between], timeout=30)[between]
    assert rec["admin_comment"].startswith("pal: placed"), rec["admin_comment"]
    # no restart: a job held in the grace window starts by itself once its short hold ends
    placer = rig.placers[-1]
    assert placer.stop() == 0
    alone = rig.submit(["--gres=gpu:1"])
    started = time.time()
    rec = rig.wait_finished([alone], timeout=60)[alone]
    assert job_state(rec) == "COMPLETED" and time.time() - started < 45, rec


# ---------------------------------------------------------------- database down


def test_database_lost_after_start_keeps_placing_from_memory(rig: Rig) -> None:
    url, path = rig.db_copy()
    placer = rig.start(rig.config(url))
    deadline = time.monotonic() + 20  # the classes are in memory (a first load that fails is retried)
    while "classes loaded: version" not in placer.output():
        assert time.monotonic() < deadline, placer.output()
        time.sleep(0.3)
    # the database file becomes an empty one (same inode: the pooled connection sees it too)
    # and the old one is moved away
    shutil.copyfile(path, path.with_suffix(".moved"))
    with open(path, "r+b") as fh:
        fh.truncate(0)
    deadline = time.monotonic() + 45  # the database thread backs off (up to 15 s) after each failure
    while "classes not reloaded" not in placer.output():
        assert time.monotonic() < deadline, placer.output()
        time.sleep(0.3)

    rig.filter_on()
    ids = [rig.submit(["--gres=gpu:1"]), rig.submit(["--gpus=2", "--pal-class=D"]), rig.submit(["--gres=gpu:1"])]
    done = rig.wait_finished(ids)
    for rec in done.values():
        assert rec["admin_comment"].startswith("pal: placed class="), rec["admin_comment"]
        assert " v1 " in rec["admin_comment"]          # the classification version held in memory
        assert job_state(rec) == "COMPLETED"
    assert "placing with version 1 from memory" in placer.output()
    assert placer.proc.poll() is None


def test_database_never_reachable_releases_held_jobs_unchanged(rig: Rig) -> None:
    url = "postgresql+psycopg://pal:s3cret-pw@127.0.0.1:1/pal"
    placer = rig.start(rig.config(url))
    rig.filter_on()
    ids = [rig.submit(["--gres=gpu:1"]), rig.submit(["--gpus=2"])]
    done = rig.wait_finished(ids)
    for rec in done.values():
        assert rec["admin_comment"] == "pal: released unchanged: no GPU classes known yet (run pal classify)"
        assert job_state(rec) == "COMPLETED"
    rig.assert_requests_unchanged(done)  # each its own: gpu:1 per node, --gpus=2 per job; never none
    log = placer.output()
    assert "placing with none" in log and placer.proc.poll() is None
    assert "s3cret-pw" not in log


# ---------------------------------------------------------------- slurmctld restart


def test_slurmctld_restart_the_placer_carries_on(rig: Rig) -> None:
    placer = rig.start(rig.config())
    rig.filter_on()
    before = rig.submit(["--gres=gpu:1"])
    rig.wait_finished([before])
    proc = subprocess.run([str(SCRIPT), "restart-ctld"], check=False, capture_output=True, text=True, timeout=120,
                          env={**os.environ, **rig.cluster.env, "PAL_PYTHON": sys.executable})
    assert proc.returncode == 0, proc.stderr
    # at once, while the nodes are still registering again: the job waits for them, held
    after = rig.submit(["--gres=gpu:1"])
    rec = rig.wait_finished([after])[after]
    assert rec["admin_comment"].startswith("pal: placed class="), rec["admin_comment"]
    assert job_state(rec) == "COMPLETED"
    assert placer.proc.poll() is None, placer.output()
    # and the heartbeat never stopped for long
    assert time.time() - rig.heartbeat() < 3


def test_slurmctld_down_for_a_while_is_logged_and_survived(rig: Rig) -> None:
    """slurmctld gone for ~15 s: the placer says so (Slurm unavailable), its heartbeat stops
    (so the filter stops holding), it does not exit, and it places again once slurmctld is back."""
    placer = rig.start(rig.config())
    rig.filter_on()
    pid = int((rig.cluster.dir / "pids" / "slurmctld").read_text().strip())
    os.kill(pid, signal.SIGTERM)   # the slurmctld our cluster script started for this cluster
    try:
        deadline = time.monotonic() + 60
        while "Slurm unavailable" not in placer.output():
            assert time.monotonic() < deadline and placer.proc.poll() is None, placer.output()
            time.sleep(0.3)
        assert time.time() - rig.heartbeat() > 5, "heartbeat kept going without Slurm"
    finally:
        proc = subprocess.run([str(SCRIPT), "start"], check=False, capture_output=True, text=True, timeout=180,
                              env={**os.environ, **rig.cluster.env, "PAL_PYTHON": sys.executable})
    assert proc.returncode == 0, proc.stderr
    assert placer.proc.poll() is None, placer.output()
    time.sleep(STATE_CACHE_S)
    after = rig.submit(["--gres=gpu:1"])
    rec = rig.wait_finished([after], timeout=60)[after]
    assert rec["admin_comment"].startswith("pal: placed class="), rec["admin_comment"]
    assert "Traceback" not in placer.output()


# ---------------------------------------------------------------- re-planning


def _fill_all_but_two_slots(rig: Rig) -> None:
    """Every GPU busy but pal-n3's g2 and g3, the only free slots."""
    for node in ("pal-n1", "pal-n2", "pal-n4"):
        rig.fillers.append(rig.submit(["-w", node, "--gres=gpu:4"], wrap="sleep 600"))
    rig.fillers.append(rig.submit(["-w", "pal-n3", "--gres=gpu:v100_g0:1,gpu:v100_g1:1"], wrap="sleep 600"))
    rig.wait_fillers()


def _assert_placed_afresh_from_the_request(rig: Rig, cfg: Path, ids: dict[str, tuple[str, int]],
                                           seen: dict[str, list[str]], recs: dict[str, dict[str, Any]]) -> None:
    """Each job ran, placed at least twice (on pal-n3 first, on pal-n1 last) and never released
    unchanged; its tag keeps the request the user made, it got as many GPUs as it asked for,
    and `pal placements` shows the same."""
    for jobid, (was, ngpus) in ids.items():
        rec = recs[jobid]
        assert job_state(rec) == "COMPLETED", (rec, seen[jobid])
        placed = [c for c in seen[jobid] if c.startswith("pal: placed")]
        assert len(placed) >= 2 and "gpus=pal-n3:" in placed[0] and "gpus=pal-n1:" in placed[-1], seen[jobid]
        assert not any("released unchanged" in c for c in seen[jobid]), seen[jobid]
        # the recorded original keeps the running version's TRES prefix (gres: on 22.05, gres/ on 24.11)
        tag = Tag.parse(rec["admin_comment"].replace("gres/", "gres:"))
        assert placed[-1] == rec["admin_comment"] and tag is not None and (was.split()[0], was.split()[1]) in tag.was
        env = rig.cluster.job_env(jobid)
        assert env["NODE"] == "pal-n1" and len(env["GPUS"].split(",")) == ngpus and env["GPUS"] != "none", env
        out = rig.pal(cfg, "placements", "--job", jobid, "--format", "json")
        assert out.returncode == 0, out.stderr
        outcomes = [r["outcome"] for r in json.loads(out.stdout)]
        assert outcomes.count("applied") >= 2 and "released-unchanged" not in outcomes, outcomes


def test_a_released_job_that_does_not_start_is_replanned(rig: Rig) -> None:
    """Provoked: two jobs are placed on the only free slots (pal-n3 g2, g3) with a dependency on a
    held job (a job with its own --begin ahead is never held, so not placed); while they wait for
    it their slots are not kept, so a 2-GPU job is placed there and runs. When the dependency is
    released and they become eligible their pinned slots are busy: after replan_after_s
    they are held again and, once a filler ends, placed afresh elsewhere from the request
    the user made. Neither is ever released with a stale pinned slot, nor loses its GPUs
    (22.05 refuses an untyped request once a job carried typed ones: typed -> typed)."""
    _fill_all_but_two_slots(rig)
    cfg = rig.config(replan_after=2)
    rig.start(cfg)
    rig.filter_on()
    wrap = "echo GPUS=${SLURM_JOB_GPUS:-none}; echo NODE=$SLURMD_NODENAME"
    dep = rig.submit(["--hold"], wrap="true")
    after = f"--dependency=afterok:{dep}"
    ids = {rig.submit(["--gres=gpu:1", after], wrap=wrap): ("tres_per_node gres:gpu:1", 1),
           rig.submit(["--gpus=1", after], wrap=wrap): ("tres_per_job gres:gpu:1", 1)}
    seen: dict[str, list[str]] = {j: [] for j in ids}

    def watch() -> dict[str, dict[str, Any]]:
        recs = rig.records(ids)
        for jobid, rec in recs.items():
            if not seen[jobid] or seen[jobid][-1] != rec["admin_comment"]:
                seen[jobid].append(rec["admin_comment"])
        return recs

    deadline = time.monotonic() + 15
    while not all(c and c[-1].startswith("pal: placed") for c in seen.values()):
        watch()
        assert time.monotonic() < deadline, seen
        time.sleep(0.2)
    blocker = rig.submit(["--gres=gpu:2"], wrap="sleep 120")
    rig.cluster.wait_state(blocker, "RUNNING", timeout=20)
    assert "pal-n3:2,3" in rig.records([blocker])[blocker]["admin_comment"]
    rig.cluster.scontrol("release", dep)               # the dependency is met: the two become eligible
    deadline = time.monotonic() + 40
    while not all(any("src=replan" in c for c in cs) for cs in seen.values()):
        watch()
        assert time.monotonic() < deadline, seen
        time.sleep(0.2)
    rig.cluster.cancel(rig.fillers[:1])                  # pal-n1's GPUs free up
    deadline = time.monotonic() + 40
    while not all(job_state(r) in FINISHED for r in watch().values()):
        assert time.monotonic() < deadline, seen
        time.sleep(0.2)
    recs = watch()
    _assert_placed_afresh_from_the_request(rig, cfg, ids, seen, recs)


def test_jobs_waiting_for_a_begin_time_or_dependency_do_not_block_gpus(rig: Rig) -> None:
    """Placed jobs that cannot start for a reason other than resources (a dependency) must not
    keep their slots from other jobs: 16 such jobs on 16 GPUs, then a plain GPU job that plain
    Slurm would start at once -- it must start, not wait held. Jobs with their own begin time
    ahead are not held at all (nor placed), and keep their begin time."""
    rig.start(rig.config())
    rig.filter_on()
    dep = rig.submit(["--hold"], wrap="true")
    later = [rig.submit(["--gres=gpu:1", "--begin=now+1hour"]) for _ in range(4)]
    waiting = [rig.submit(["--gres=gpu:1", f"--dependency=afterok:{dep}"]) for _ in range(16)]
    deadline = time.monotonic() + 30
    while not all(r["admin_comment"].startswith("pal: placed") for r in rig.records(waiting).values()):
        assert time.monotonic() < deadline, rig.records(waiting)
        time.sleep(0.3)
    plain = rig.submit(["--gres=gpu:1"])
    rec = rig.wait_finished([plain], timeout=20)[plain]
    assert job_state(rec) == "COMPLETED" and rec["admin_comment"].startswith("pal: placed"), rec["admin_comment"]
    recs = rig.records(waiting)
    assert {r["state_reason"] for r in recs.values()} == {"Dependency"}
    assert not rig.held(waiting)
    for rec in rig.records(later).values():
        assert rec["admin_comment"] == "" and rec["state_reason"] == "BeginTime", rec
        assert (int_field(rec["eligible_time"]) or 0) > time.time() + 3000, rec
