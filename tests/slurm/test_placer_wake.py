"""The placer woken at once on the real test cluster: by the submit filter when it holds a job,
and by EpilogSlurmctld (spank_hooks/pal-epilog-slurmctld.sh) when a job ends; and a poke to a
dead placer neither blocks nor fails a submission or a job's end, while the holds still end by
themselves.

Each placer runs with a 30 s cycle, so a job placed within a few seconds was placed because
the placer was woken, not because its cycle came round; the control run (waking off) shows
the same job still held after those seconds.
"""

from __future__ import annotations

import signal
import time

import pytest

from tests.slurm.placer_support import NODES
from tests.slurm.records import HELD_TAG, int_field, job_state
from tests.slurm.placer_rig import Rig, classified_db, rig  # noqa: F401 - fixtures

pytestmark = pytest.mark.slurm

SLOW_CYCLE_S = 30


def _wake_file(rig: Rig) -> int:
    path = rig.cluster.filter_state.with_name("placer-wake")
    return path.stat().st_size if path.exists() else -1


def _started_within(rig: Rig, jobid: str, seconds: float) -> dict:
    deadline = time.monotonic() + seconds
    while True:
        rec = rig.records([jobid]).get(jobid, {})
        if job_state(rec) in ("RUNNING", "COMPLETED", "COMPLETING"):
            return rec
        assert time.monotonic() < deadline, f"job {jobid} not started within {seconds:g} s: {rec}"
        time.sleep(0.05)


def test_a_held_job_is_placed_at_once_not_at_the_next_cycle(rig: Rig) -> None:
    placer = rig.start_once(rig.config(interval=SLOW_CYCLE_S))
    rig.filter_on()
    assert f"woken at once by {rig.cluster.filter_state.with_name('placer-wake')}" in placer.output()
    assert "\nwake 1\n" in rig.cluster.filter_state.read_text(encoding="utf-8")
    before = _wake_file(rig)
    t0 = time.time()
    job = rig.submit(["--gres=gpu:1"], wrap="sleep 1")
    rec = _started_within(rig, job, 5)
    assert rec["admin_comment"].startswith("pal: placed"), rec["admin_comment"]
    assert int_field(rec["start_time"]) - t0 < 5
    assert _wake_file(rig) > before


def test_without_waking_the_same_job_waits_for_the_cycle(rig: Rig) -> None:
    placer = rig.start_once(rig.config(interval=SLOW_CYCLE_S, wake=False))
    rig.filter_on()
    assert "woken at once" not in placer.output()
    assert "\nwake" not in rig.cluster.filter_state.read_text(encoding="utf-8")
    job = rig.submit(["--gres=gpu:1"], wrap="sleep 1")
    time.sleep(4)
    assert rig.held([job]) == [job], rig.records([job])


def test_a_jobs_end_wakes_the_placer_for_the_job_waiting_for_gpus(rig: Rig) -> None:
    """Every GPU busy; a held job waits; one node's job ends: the held job is placed and
    starts on the freed GPUs within seconds, long before the placer's next cycle."""
    rig.fill_gpus()
    node, short = NODES[0], rig.fillers[0]   # fill_gpus fills the nodes in this order
    placer = rig.start_once(rig.config(interval=SLOW_CYCLE_S))
    rig.filter_on()
    waiting = rig.submit(["--gres=gpu:1"], wrap="echo NODE=$SLURMD_NODENAME")
    rig.wait_held([waiting])
    ended = time.time()
    rig.cluster.cancel([short])
    rec = _started_within(rig, waiting, 8)
    assert int_field(rec["start_time"]) - ended < 8
    assert rec["admin_comment"].startswith("pal: placed"), (rec["admin_comment"], placer.output()[-2000:])
    assert rig.cluster.job_env(waiting).get("NODE") == node


def test_a_placer_killed_while_a_job_is_held_pokes_block_nothing_and_holds_end(rig: Rig) -> None:
    hold_s = 12
    rig.fill_gpus()
    # a heartbeat that stays fresh for a minute after the kill: the filter must still hold (and
    # poke) the next job whatever its 2 s state cache and a loaded machine make of the timing
    placer = rig.start_once(rig.config(interval=SLOW_CYCLE_S, hold_s=hold_s, stale_after=60))
    rig.filter_on()
    held = [rig.submit(["--gres=gpu:1"])]
    rig.wait_held(held)
    assert placer.stop(signal.SIGKILL) == -signal.SIGKILL
    killed = time.monotonic()
    # the heartbeat is still fresh: the filter holds and pokes the dead placer; sbatch is not slowed
    before = _wake_file(rig)
    t0 = time.monotonic()
    held.append(rig.submit(["--gres=gpu:1"]))
    assert time.monotonic() - t0 < 2
    assert _wake_file(rig) > before
    # job ends poke it too (EpilogSlurmctld): the jobs end as usual
    rig.free_gpus()
    for jobid in rig.fillers:
        rig.cluster.wait_state(jobid, "CANCELLED", timeout=30)
    deadline = killed + hold_s + 20
    while rig.held(held):
        assert time.monotonic() < deadline, f"still held {hold_s + 20} s after the kill: {rig.records(held)}"
        time.sleep(0.5)
    done = rig.wait_finished(held)
    assert {j: job_state(r) for j, r in done.items()} == dict.fromkeys(held, "COMPLETED")
    assert all(r["admin_comment"].startswith(HELD_TAG) for r in done.values()), done
