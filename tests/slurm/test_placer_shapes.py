"""Shapes on the real test cluster: every job keeps its shape, nobody is stranded, held
jobs are served in Slurm's order, and a long job waits for a fast GPU that frees soon.

Each test fills GPUs with `sleep` jobs that name their node and slot types (never held,
never moved) to make the layout it needs, then runs a real `pal placer` (enforce mode,
0.5 s cycles) against plain `sbatch` submissions. What a job got is proven by the job
itself: it prints the node count, its node and its GPUs (SLURM_JOB_NUM_NODES,
SLURMD_NODENAME, SLURM_JOB_GPUS).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Sequence

import pytest

from tests.slurm.placer_support import A_PERFVAR
from tests.slurm.records import int_field, job_state
from tests.slurm.placer_rig import Rig, classified_db, rig  # noqa: F401  (fixtures)

pytestmark = pytest.mark.slurm

def show(seconds: float) -> str:
    """A job script that prints its node count, node and GPUs, then sleeps."""
    return ("echo NODES=$SLURM_JOB_NUM_NODES; echo NODE=$SLURMD_NODENAME; echo GPUS=${SLURM_JOB_GPUS:-none}; "
            f"sleep {seconds}")

#: fragmented layouts, as the slots filled on each node: pal-n1 keeps 2 free (minors 2, 3);
#: pal-n2 and pal-n3 keep one each, at different slots or at the same slot (where the old
#: placer's two-node split ran a job with one GPU on each node); pal-n4 is full
LAYOUTS = {
    "different-slots": {"pal-n1": (0, 1), "pal-n2": (1, 2, 3), "pal-n3": (0, 2, 3), "pal-n4": (0, 1, 2, 3)},
    "same-slot": {"pal-n1": (0, 1), "pal-n2": (1, 2, 3), "pal-n3": (1, 2, 3), "pal-n4": (0, 1, 2, 3)},
}
SHAPES = {"gres": ["--gres=gpu:2"], "gpus-per-node": ["--gpus-per-node=2"], "gpus-N1": ["--gpus=2", "-N", "1"]}


def fill(rig: Rig, layout: dict[str, Sequence[int]], wrap: str = "sleep 600") -> dict[str, str]:
    """One filler per node on exactly the given slots; node -> filler job id."""
    out = {}
    for node, minors in layout.items():
        if minors:
            gres = ",".join(f"gpu:v100_g{m}:1" for m in minors)
            out[node] = rig.submit(["-w", node, f"--gres={gres}"], wrap=wrap)
            rig.fillers.append(out[node])
    rig.wait_fillers()
    return out


def shown(rig: Rig, jobid: str) -> tuple[int, str, list[int]]:
    """(node count, node, GPU indices) as the job printed them."""
    env = rig.cluster.job_env(jobid)
    gpus = [] if env.get("GPUS", "none") == "none" else [int(g) for g in env["GPUS"].split(",")]
    return int(env["NODES"]), env["NODE"], gpus


def wait_running(rig: Rig, jobid: str, timeout: float = 30) -> None:
    rig.cluster.wait_state(jobid, {"RUNNING", "COMPLETED"}, timeout=timeout)


#: every shape on the layout where the old placer's split even ran; the other layout once
CASES = [("same-slot", shape) for shape in sorted(SHAPES)] + [("different-slots", "gres")]


@pytest.mark.parametrize("layout,shape", CASES)
def test_two_gpu_jobs_on_a_fragmented_cluster_run_on_one_node_with_two_gpus(rig: Rig, layout: str,
                                                                             shape: str) -> None:
    fillers = fill(rig, LAYOUTS[layout])
    rig.start(rig.config())
    rig.filter_on()
    first = rig.submit(SHAPES[shape], wrap=show(4))
    second = rig.submit(SHAPES[shape], wrap=show(0.2))
    wait_running(rig, first)
    time.sleep(3)  # several placer cycles: the second job must still wait, whole (not split, not stranded)
    rec = rig.records([second])[second]
    assert job_state(rec) == "PENDING", rec
    assert rec["state_reason"] != "BadConstraints" and int_field(rec["node_count"]) == 1, rec
    rig.cluster.cancel([fillers["pal-n2"]])  # pal-n2's three slots free up
    done = rig.wait_finished([first, second], timeout=60)
    assert {j: job_state(r) for j, r in done.items()} == {first: "COMPLETED", second: "COMPLETED"}
    nodes, node, gpus = shown(rig, first)
    assert (nodes, node, sorted(gpus)) == (1, "pal-n1", [2, 3])
    nodes, node, gpus = shown(rig, second)
    # on pal-n2 once its filler is gone, or on pal-n1 if the first job ended first: whole either way
    assert nodes == 1 and len(gpus) == 2 and node in ("pal-n1", "pal-n2"), (nodes, node, gpus)


def test_repeated_gres_entries_run_with_one_gpu_as_under_plain_slurm(rig: Rig) -> None:
    rig.start(rig.config())
    rig.filter_on()
    jobid = rig.submit(["--gres=gpu:1,gpu:1"], wrap=show(0))
    rec = rig.wait_finished([jobid])[jobid]
    assert rec["admin_comment"].startswith("pal: placed"), rec["admin_comment"]
    assert shown(rig, jobid)[0] == 1 and len(shown(rig, jobid)[2]) == 1


# ---------------------------------------------------------------- nobody stranded


def old_placement(rig: Rig, jobid: str) -> None:
    """Place a `--gpus=2 -N1` job the way earlier placers did: one per-slot GPU on
    each of two nodes, tagged as placed. Slurm accepts the update; once the job is eligible,
    22.05 sets it BadConstraints at priority 0 for good, and 24.11 runs it on one node with
    one GPU (both found on the real clusters). The placer must get to it first."""
    rec = rig.records([jobid])[jobid]
    prefix = "gres/" if "gres/" in rec["tres_per_job"] else "gres:"
    rig.cluster.scontrol("update", f"jobid={jobid}", "TresPerJob=")
    rig.cluster.scontrol("update", f"jobid={jobid}", f"TresPerNode={prefix}gpu:v100_g0:1", "NodeList=pal-n2,pal-n3",
                         f"AdminComment=pal: placed class=A gpus=pal-n2:0;pal-n3:0 sf=1.000,1.000 policy=pal at=1 "
                         f"was tres_per_job {prefix}gpu:2")


def bad_placement(rig: Rig, jobid: str) -> None:
    """A placement Slurm accepts and then never starts, on both versions: slot types no node
    has (the job goes BadConstraints; 22.05 also drops it to priority 0)."""
    rec = rig.records([jobid])[jobid]
    prefix = "gres/" if "gres/" in rec["tres_per_node"] else "gres:"
    rig.cluster.scontrol("update", f"jobid={jobid}", "TresPerNode=")
    rig.cluster.scontrol("update", f"jobid={jobid}", f"TresPerNode={prefix}gpu:v100_g8:1,{prefix}gpu:v100_g9:1",
                         "NodeList=pal-n2",
                         f"AdminComment=pal: placed class=A gpus=pal-n2:8,9 sf=1.000,1.000 policy=pal at=1 "
                         f"was tres_per_node {prefix}gpu:2")


def slurm_major(rig: Rig) -> int:
    out = rig.cluster.run(["sinfo", "--version"]).stdout  # "slurm 22.05.8" / "slurm-wlm 24.11.5"
    return int(out.split()[-1].split(".")[0])


def stranded_job(rig: Rig) -> str:
    """A placed job that goes BadConstraints, each version's own way: on 22.05 the old placer's
    two-node pin of a `--gpus=2 -N1` job (BadConstraints, priority 0). On 24.11 that pin runs
    at once, reshaped, so there: slot types no node has. (On 22.05 that second way would be
    beyond repair: 22.05 keeps a job's typed GRES entries, with count 0, through every later
    update, and a zero-count entry of a type no node has leaves it never runnable. The placer
    never sets a type a node lacks.)"""
    if slurm_major(rig) < 24:
        jobid = rig.submit(["--gpus=2", "-N", "1", "--begin=now+2"], wrap=show(0))
        old_placement(rig, jobid)
    else:
        jobid = rig.submit(["--gres=gpu:2", "--begin=now+2"], wrap=show(0))
        bad_placement(rig, jobid)
    return jobid


def wait_bad_constraints(rig: Rig, jobid: str) -> None:
    deadline = time.monotonic() + 30
    while True:
        rec = rig.records([jobid])[jobid]
        if rec["state_reason"] == "BadConstraints":
            return
        assert time.monotonic() < deadline, rec
        time.sleep(0.3)


def assert_restored_and_run(rig: Rig, jobid: str, why: str) -> None:
    rec = rig.records([jobid])[jobid]
    assert rec["admin_comment"].startswith("pal: released restored") and why in rec["admin_comment"], \
        rec["admin_comment"]
    rec = rig.wait_finished([jobid], timeout=60)[jobid]
    assert job_state(rec) == "COMPLETED", rec
    nodes, _node, gpus = shown(rig, jobid)
    assert nodes == 1 and len(gpus) == 2, (nodes, gpus)


def test_bad_constraints_at_priority_0_is_restored_by_the_next_cycle(rig: Rig) -> None:
    cfg = rig.config()
    rig.start(cfg)
    rig.placers[-1].stop(signal.SIGKILL)  # no placer while the job goes bad
    jobid = stranded_job(rig)
    wait_bad_constraints(rig, jobid)
    rig.start(cfg)
    deadline = time.monotonic() + 20
    while not rig.records([jobid])[jobid]["admin_comment"].startswith("pal: released restored"):
        assert time.monotonic() < deadline, rig.records([jobid])
        time.sleep(0.2)
    assert_restored_and_run(rig, jobid, "the placement could not start")


def test_sigterm_restores_a_placement_that_cannot_start(rig: Rig) -> None:
    cfg = rig.config(interval=300)  # one cycle at start, then none before the SIGTERM
    placer = rig.start_once(cfg)
    jobid = rig.submit(["--gpus=2", "-N", "1", "--begin=now+60"], wrap=show(0))
    old_placement(rig, jobid)
    assert placer.stop() == 0
    assert_restored_and_run(rig, jobid, "placer stopped")


def test_release_stale_restores_a_placement_that_cannot_start(rig: Rig) -> None:
    cfg = rig.config()
    rig.start(cfg)
    rig.placers[-1].stop(signal.SIGKILL)
    jobid = stranded_job(rig)
    wait_bad_constraints(rig, jobid)
    out = rig.pal(cfg, "placer", "release-stale", "--force", "--json")
    assert out.returncode == 0 and jobid in out.stdout, (out.stdout, out.stderr)
    assert_restored_and_run(rig, jobid, "released by the fail-safe")


def test_a_placement_pinned_to_a_drained_node_is_restored_and_runs_elsewhere(rig: Rig) -> None:
    """Placed and waiting (for a dependency), then its node is drained: unrunnable as it
    stands; the cycle gives it the user's request back (or its shape elsewhere) and it runs."""
    rig.start(rig.config())
    rig.filter_on()
    dep = rig.submit(["--hold"], wrap="true")
    jobid = rig.submit(["--gres=gpu:2", f"--dependency=afterok:{dep}"], wrap=show(0))
    deadline = time.monotonic() + 20
    while not rig.records([jobid])[jobid]["admin_comment"].startswith("pal: placed"):
        assert time.monotonic() < deadline, rig.records([jobid])
        time.sleep(0.2)
    node = rig.records([jobid])[jobid]["required_nodes"]
    rig.cluster.scontrol("update", f"nodename={node}", "state=drain", "reason=pal-test")
    try:
        deadline = time.monotonic() + 20
        while not rig.records([jobid])[jobid]["admin_comment"].startswith("pal: released restored"):
            assert time.monotonic() < deadline, rig.records([jobid])
            time.sleep(0.2)
        assert f"its node {node} is drain" in rig.records([jobid])[jobid]["admin_comment"]
        rig.cluster.scontrol("release", dep)
        rec = rig.wait_finished([jobid], timeout=60)[jobid]
        assert job_state(rec) == "COMPLETED", rec
        nodes, ran_on, gpus = shown(rig, jobid)
        assert nodes == 1 and len(gpus) == 2 and ran_on != node
    finally:
        rig.cluster.scontrol("update", f"nodename={node}", "state=resume")


# ---------------------------------------------------------------- Slurm's order


def test_held_jobs_are_placed_in_slurms_order_nice_and_priority_tier(rig: Rig) -> None:
    """Three free GPUs (minor 0 on pal-n1..n3), six held jobs submitted lowest priority first
    (--nice 500 .. 0) and one in the PriorityTier=10 partition: the three that start are the
    first three in Slurm's own order (tier, then the priority Slurm reports, then submit
    time), and the first of them gets the best of the three GPUs for class A. On 22.05
    priority/basic lowers a job's priority by its nice value, so these are the tier job,
    nice 0 and nice 100 (what plain Slurm starts); 24.11 is packaged with priority/multifactor
    and every weight 0, which gives every job priority 1, so nice does not count there, for
    Slurm or for us."""
    fill(rig, {"pal-n1": (1, 2, 3), "pal-n2": (1, 2, 3), "pal-n3": (1, 2, 3), "pal-n4": (0, 1, 2, 3)})
    placer = rig.start(rig.config())
    rig.filter_on()
    placer.proc.send_signal(signal.SIGSTOP)  # all seven held before the placer sees any of them
    try:
        ids = {nice: rig.submit(["--gres=gpu:1", f"--nice={nice}"], wrap=show(30))
               for nice in (500, 400, 300, 200, 100, 0)}
        ids["tier"] = rig.submit(["--gres=gpu:1", "-p", "gpu-high", "--nice=300"], wrap=show(30))
        recs = rig.records(ids.values())
        prio = {k: int_field(recs[j]["priority"]) or 0 for k, j in ids.items()}
    finally:
        placer.proc.send_signal(signal.SIGCONT)
    rank = sorted(ids, key=lambda k: (k != "tier", -prio[k], int(ids[k])))
    started = set(rank[:3])
    if len(set(prio.values())) > 1:  # priority reflects nice (22.05)
        assert started == {"tier", 0, 100}, prio
    for key in started:
        wait_running(rig, ids[key])
    time.sleep(2)
    recs = rig.records(ids.values())
    running = {k for k, j in ids.items() if job_state(recs[j]) == "RUNNING"}
    assert running == started, ({k: (job_state(recs[j]), recs[j]["admin_comment"]) for k, j in ids.items()}, prio)
    best = min(A_PERFVAR[(n, 0)] for n in ("pal-n1", "pal-n2", "pal-n3"))
    _nodes, node, _gpus = shown(rig, ids["tier"])
    assert A_PERFVAR[(node, 0)] == best, node


# ---------------------------------------------------------------- waiting for better GPUs


def _waiting_layout(rig: Rig) -> str:
    """Every GPU busy but pal-n1 minor 0 (the slowest for class A); the fastest, pal-n3 minor 2,
    held by a job with a three-minute limit (so its expected end is known, and still ahead
    when the placer decides on a loaded machine: a release already overdue is no longer known);
    returns that job."""
    assert max(A_PERFVAR.values()) == A_PERFVAR[("pal-n1", 0)]
    assert min(A_PERFVAR.values()) == A_PERFVAR[("pal-n3", 2)]
    fill(rig, {"pal-n1": (1, 2, 3), "pal-n2": (0, 1, 2, 3), "pal-n3": (0, 1, 3), "pal-n4": (0, 1, 2, 3)})
    fast = rig.submit(["-w", "pal-n3", "--gres=gpu:v100_g2:1", "-t", "3"], wrap="sleep 600")
    rig.fillers.append(fast)
    rig.wait_fillers()
    return fast


def test_a_long_job_waits_for_a_fast_gpu_that_frees_within_minutes(rig: Rig) -> None:
    fast = _waiting_layout(rig)
    cfg = rig.config()
    rig.start(cfg)
    rig.filter_on()
    jobid = rig.submit(["--gres=gpu:1", "-t", "60"], wrap=show(0))
    time.sleep(4)
    rec = rig.records([jobid])[jobid]
    assert job_state(rec) == "PENDING" and rec["admin_comment"].startswith("pal:held"), rec
    rig.cluster.cancel([fast])
    rec = rig.wait_finished([jobid], timeout=40)[jobid]
    assert shown(rig, jobid)[1:] == ("pal-n3", [2])
    out = rig.pal(cfg, "explain", jobid)
    assert out.returncode == 0, out.stderr
    assert "waits up to" in out.stdout and "pal-n3:2" in out.stdout and "sooner" in out.stdout, out.stdout
    assert "waited" in out.stdout, out.stdout


def test_with_waiting_off_it_starts_at_once_on_the_slow_gpu(rig: Rig) -> None:
    _waiting_layout(rig)
    rig.start(rig.config(wait_fraction=0.0))
    rig.filter_on()
    jobid = rig.submit(["--gres=gpu:1", "-t", "60"], wrap=show(0))
    rig.wait_finished([jobid], timeout=20)
    assert shown(rig, jobid)[1:] == ("pal-n1", [0])
