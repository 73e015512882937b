"""The placer's lean job read (CliBackend.jobs: squeue -O, scontrol -d show job) against the
full `squeue --json` read on the real test cluster: the same held, pending and running GPU
jobs, with what the placer needs of each, and none of the queue's CPU jobs."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import time
from collections.abc import Iterator

import pytest

from pal_slurm.placer import cluster_view, holds
from pal_slurm.slurm import parse_json, parse_squeue
from pal_slurm.slurm.cli_backend import CliBackend
from pal_slurm.slurm.command import SQUEUE_ALL_JOBS_JSON
from pal_slurm.slurm.model import SlurmJob

from .conftest import SlurmCluster

pytestmark = pytest.mark.slurm

#: fields -O says otherwise than the JSON, read to the same effect (parse_squeue's docstring;
#: memory and the node maximum are compared by what they mean below)
DIFFERENT = {"memory_per_node_mb", "memory_per_cpu_mb", "max_nodes", "end_time"}


@dataclasses.dataclass
class Queue:
    cluster: SlurmCluster
    running: list[str]
    held: str
    pending: list[str]
    cpu: list[str]
    array: str
    split: str

    @property
    def gpu_ids(self) -> set[str]:
        return {*self.running, self.held, *self.pending, self.split}


@pytest.fixture(scope="module")
def queue(slurm_cluster: SlurmCluster) -> Iterator[Queue]:
    c = slurm_cluster
    first = len(c.submitted)
    try:
        running = [c.submit(["--gres=gpu:1", "-J", "lean-run", "--wrap", "sleep 600"]),
                   c.submit(["-N2", "--gres=gpu:1", "--mem-per-cpu=700", "--wrap", "sleep 600"])]
        cpu = [c.submit(["-J", "lean-cpu-run", "--wrap", "sleep 600"]),
               c.submit(["--begin=now+3600", "-J", "lean-cpu", "--wrap", "true"])]
        later = "--begin=now+3600"
        held = c.submit([later, "--gres=gpu:2", "--mem-per-cpu=500", "-c2", "-J", "lean held, one|two",
                         "--comment=a\x1fb c", "--wrap", "true"])
        c.scontrol("update", f"jobid={held}", "AdminComment=pal:held class=A src=default | site note")
        pending = [c.submit([later, "--gpus=3", "--exclusive", "-x", c.nodes[0], "--mem=2000", "-N", "1-2",
                             "-t", "1-00:00:00", "--wrap", "true"]),
                   c.submit([later, "--gpus-per-task=1", "-n2", "-w", c.nodes[1], "--wrap", "true"]),
                   c.submit([later, "-N2", "--gpus-per-node=1", "--exclusive=user", "-t", "30",
                             "-J", "two\nnodes\x1e\nJobId=1 forged", "--wrap", "true"]),
                   c.submit(["--hold", "--gres=gpu:1", "--wrap", "true"])]
        array = c.submit([later, "--array=1-5", "--gres=gpu:1", "--wrap", "true"])
        c.scontrol("update", f"jobid={array}_2", "Comment=split-task")
        split = next(line.split()[0].split("=")[1] for line in
                     c.scontrol("show", "job", "-o", f"{array}_2").stdout.splitlines() if line.startswith("JobId="))
        for jid in running + cpu[:1]:
            c.wait_state(jid, "RUNNING", timeout=60)
        yield Queue(c, running, held, pending, cpu, array, split)
    finally:
        c.cancel(c.submitted[first:])


def _full(ids: set[str]) -> dict[str, SlurmJob]:
    """The full read as the placer made it before (every job as JSON), for our jobs."""
    out = subprocess.run(list(SQUEUE_ALL_JOBS_JSON), capture_output=True, text=True, check=True, timeout=60).stdout
    doc = parse_json.load(out, "squeue --json")
    return {j.job_id: j for j in parse_json.jobs_from_doc(doc, active_only=True) if j.job_id in ids}


def _both(q: Queue) -> tuple[dict[str, SlurmJob], dict[str, SlurmJob]]:
    ids = q.gpu_ids | set(q.cpu) | {q.array}
    backend = CliBackend(timeout=30)
    for _ in range(5):  # a job of an earlier test may still be finishing between the reads
        lean = {j.job_id: j for j in backend.jobs() if j.job_id in ids}
        full = _full(ids)
        if lean.keys() == {k for k, j in full.items() if parse_squeue.placer_needs(j)}:
            break
        time.sleep(0.5)
    return lean, full


def test_the_lean_read_has_the_placers_jobs_as_the_full_read_has_them(queue: Queue) -> None:
    lean, full = _both(queue)
    assert set(lean) == queue.gpu_ids | {queue.array}
    assert not set(lean) & set(queue.cpu)  # the CPU jobs, running or pending, are not read
    assert {j for j, job in full.items() if parse_squeue.placer_needs(job)} == set(lean)
    assert {j for j, job in lean.items() if job.exclusive} == {queue.pending[0], queue.pending[2]}
    # 26.05's squeue --json (data_parser v0.0.45) has no field that says a job is exclusive; -O does
    no_exclusive = CliBackend(timeout=30).version() >= parse_squeue.EXCLUSIVE_SINCE
    for job_id, got in lean.items():
        want = full[job_id]
        diff = {f.name for f in dataclasses.fields(SlurmJob) if getattr(got, f.name) != getattr(want, f.name)}
        if not want.gres_detail:  # 24.11's squeue --json has no per-node slots without detail
            diff.discard("gres_detail")
        if no_exclusive:
            diff.discard("exclusive")
        assert diff <= DIFFERENT, (job_id, {d: (getattr(got, d), getattr(want, d)) for d in diff - DIFFERENT})
        assert got.memory_on_node_mb() == want.memory_on_node_mb(), job_id
        assert got.max_nodes == (want.max_nodes or want.node_count), job_id
    assert lean[queue.split].comment == "split-task" and lean[queue.split].array_job_id == queue.array
    assert lean[queue.array].array_task == "1,3-5"
    assert lean[queue.pending[2]].name == "two\nnodes\x1e\nJobId=1 forged"


def test_what_the_cycle_makes_of_either_read_is_the_same(queue: Queue) -> None:
    """Held jobs, running jobs' GPUs (the cluster view's occupancy), promised slots."""
    lean, full = _both(queue)
    now = time.time()
    assert [j for j in lean.values() if holds.is_held_by_pal(j, now)] == [lean[queue.held]]
    assert ({j for j, job in lean.items() if holds.is_held_by_pal(job, now)}
            == {j for j, job in full.items() if holds.is_held_by_pal(job, now)})
    nodes = CliBackend(timeout=30).nodes()
    by_slot = {(s.node, s.gres_type): i for i, s in enumerate(cluster_view.build_view(nodes, [], {}, ("A",)).slots)}
    got = cluster_view.running_gpus(lean.values(), by_slot)
    assert set(got) == set(queue.running) and sum(len(g) for g in got.values()) == 3
    if all(j.gres_detail for j in full.values() if j.running):
        assert got == cluster_view.running_gpus(full.values(), by_slot)


def test_reading_a_few_ids_and_a_gone_one(queue: Queue) -> None:
    backend = CliBackend(timeout=30)
    [held] = backend.jobs(only={queue.held})
    assert held.admin_comment.startswith("pal:held") and held.pending
    assert {j.job_id for j in backend.jobs(only={queue.held, queue.running[1], queue.cpu[0]})} == {
        queue.held, queue.running[1]}
    assert backend.jobs(only={"99999999"}) == []
    assert backend.jobs(only=set()) == []


def test_a_running_jobs_slots_are_read_once(queue: Queue) -> None:
    backend = CliBackend(timeout=30)
    first = {j.job_id: j.gres_detail for j in backend.jobs() if j.running}
    assert set(queue.running) <= set(first) and all(first[j] for j in queue.running)
    calls: list[list[str]] = []
    run = backend._run

    def counting(argv: list[str]) -> str:
        calls.append(list(argv))
        return run(argv)

    backend._run = counting  # type: ignore[method-assign]
    again = {j.job_id: j.gres_detail for j in backend.jobs() if j.running}
    assert again == first
    assert not [a for a in calls if a[:2] == ["scontrol", "-d"]]


def test_the_separator_in_jobs_own_text_costs_one_more_read(queue: Queue) -> None:
    """The held job's comment holds the field separator: it is read again alone. Ten more such
    jobs: the whole queue is read again once, strictly, not ten times. The whole queue is read
    without --array, and the pending GPU array (with its split-off task) again alone, with it."""
    backend = CliBackend(timeout=30)
    reads: list[list[str]] = []
    squeue = backend._squeue

    def counting(argv: list[str], **env: str) -> str:
        if "SQUEUE_FORMAT2" in env:
            reads.append(list(argv))
        return squeue(argv, **env)

    backend._squeue = counting  # type: ignore[method-assign]
    few = {j.job_id: j for j in backend.jobs(only={queue.held, queue.running[0]})}
    assert few[queue.held].comment == "a\x1fb c" and set(few) == {queue.held, queue.running[0]}
    reads.clear()
    backend.jobs()
    whole = [a for a in reads if not a[-1].startswith("--jobs")]
    assert len(whole) == 1 and "--array" not in whole[0], reads  # the queue once, each pending array one record
    assert [a[-1] for a in reads if a[-1].startswith("--jobs")] == [f"--jobs={queue.held}", f"--jobs={queue.array}"]
    assert "--array" in reads[-1], reads  # the GPU array's tasks, the split-off one with its own fields
    odd = [queue.cluster.submit(["--begin=now+3600", "--gres=gpu:1", "-J", f"odd\x1f{i}\x1e", "--wrap", "true"])
           for i in range(10)]
    try:
        reads.clear()
        got = {j.job_id: j for j in backend.jobs()}
        assert [got[j].name for j in odd] == [f"odd\x1f{i}\x1e" for i in range(10)]
        assert got[queue.held].comment == "a\x1fb c"
        # the queue, the queue again strictly, the GPU array again: never one read per odd job
        assert len(reads) == 3 and [a[-1] for a in reads if a[-1].startswith("--jobs")] == [f"--jobs={queue.array}"]
    finally:
        queue.cluster.cancel(odd)


def test_excluded_nodes_are_read_once_per_job(queue: Queue) -> None:
    """Before 24.05 -O has no ExcNodes: a pending job's exclusions come from `squeue -o %x`,
    the whole queue on the first read, then only each new job's, alone."""
    backend = CliBackend(timeout=30)
    version = backend.version()
    calls: list[list[str]] = []
    squeue = backend._squeue

    def counting(argv: list[str], **env: str) -> str:
        if "SQUEUE_FORMAT" in env:
            calls.append(list(argv))
        return squeue(argv, **env)

    backend._squeue = counting  # type: ignore[method-assign]
    first = {j.job_id: j for j in backend.jobs()}
    assert first[queue.pending[0]].excluded_nodes == queue.cluster.nodes[0]
    if version >= parse_squeue.EXCNODES_SINCE:
        assert calls == []
        return
    assert len(calls) == 1 and not [a for a in calls[0] if a.startswith("--jobs")]
    calls.clear()
    assert {j.job_id: j.excluded_nodes for j in backend.jobs()} == {k: j.excluded_nodes for k, j in first.items()}
    assert calls == []
    late = queue.cluster.submit(["--begin=now+3600", "--gres=gpu:1", "-x", queue.cluster.nodes[2], "--wrap", "true"])
    try:
        got = {j.job_id: j for j in backend.jobs()}
        assert got[late].excluded_nodes == queue.cluster.nodes[2]
        assert calls == [["squeue", "--all", "--array", "--noheader", f"--jobs={late}"]]
    finally:
        queue.cluster.cancel([late])


def test_squeue_json_of_this_slurm_and_its_filters(queue: Queue) -> None:
    """Why the lean read exists on 22.05: squeue --json there ignores -t and -j (it dumps every
    job); from 24.05 on it honours them."""
    version = CliBackend().version()
    out = subprocess.run(["squeue", "--all", "--json", "--states=RUNNING", f"--jobs={queue.held}"],
                         capture_output=True, text=True, check=True, timeout=60).stdout
    ids = {str(parse_json.number(j.get("job_id"))) for j in json.loads(out)["jobs"]}
    if version < (24, 5):
        assert {queue.held, *queue.running} <= ids
    else:
        assert ids == set()


def test_a_job_that_ends_gives_its_gpus_back_in_the_read(queue: Queue) -> None:
    """slurmctld frees a job's GPUs as it ends: while it is COMPLETING (its epilog, here a
    slow exit) the lean read shows no GPUs held, as squeue --json does, though the job's slots
    were read (and kept) while it ran. Seen otherwise: a held job waited for a GPU already free."""
    c = queue.cluster
    jid = c.submit(["--gres=gpu:1", "--wrap", "trap 'sleep 4' TERM; sleep 600 & wait"])
    try:
        c.wait_state(jid, "RUNNING", timeout=60)
        backend = CliBackend(timeout=30)
        nodes = backend.nodes()
        by_slot = {(s.node, s.gres_type): i
                   for i, s in enumerate(cluster_view.build_view(nodes, [], {}, ("A",)).slots)}
        [running] = backend.jobs(only={jid})
        assert running.state == "RUNNING" and len(cluster_view.running_gpus([running], by_slot)[jid]) == 1
        c.run(["scancel", jid])
        deadline = time.monotonic() + 10
        while (state := c.job(jid).get("JobState")) != "COMPLETING":
            assert time.monotonic() < deadline and state in ("RUNNING", "COMPLETING"), state
            time.sleep(0.1)
        [ending] = backend.jobs(only={jid})
        full = _full({jid})
        if ending.state == "COMPLETING" and jid in full and full[jid].state == "COMPLETING":
            assert cluster_view.running_gpus([ending], by_slot) == {}
            assert cluster_view.running_gpus([full[jid]], by_slot) == {}
    finally:
        c.cancel([jid])
