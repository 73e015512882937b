"""A synthetic cluster for timing the placement daemon (bench/placer_cycle.py): the squeue and
sinfo documents of N nodes in Slurm 22.05's JSON shape, built from the recorded ones in
tests/data, with running jobs (most placed by pal earlier), jobs placed but not started, the
held jobs a cycle decides, and each GPU slot's factors. Seeded: the same arguments give the same
cluster."""

from __future__ import annotations

import copy
import json
import random
from dataclasses import dataclass, field
from typing import Any

from pal_eval.paths import REPO
from pal_slurm.placement.model import DEFAULT_POLICY
from pal_slurm.placement.variability import GpuVariability
from pal_slurm.placer.factors import Factors
from pal_slurm.placer.tag import PLACED, Tag

DATA = REPO / "tests" / "data" / "slurm" / "22.05"
MODEL = "h100"
CLASSES = ("A", "B", "C", "D")
LEVELS = {"A": (0.93, 1.0, 1.07, 1.21), "B": (0.97, 1.0, 1.03, 1.1), "C": (0.97, 1.0, 1.04, 1.12),
          "D": (0.99, 1.0, 1.01, 1.02)}
NOW = 1_800_000_000.0


def _templates() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    squeue = json.loads((DATA / "squeue.json").read_text(encoding="utf-8"))
    sinfo = json.loads((DATA / "sinfo.json").read_text(encoding="utf-8"))
    running = next(j for j in squeue["jobs"] if j["job_state"] == "RUNNING")
    pending = next(j for j in squeue["jobs"] if j["job_state"] == "PENDING")
    return running, pending, sinfo["nodes"][0]


@dataclass
class _State:
    """The synthetic cluster as it is built: one random stream, job ids counted up, the squeue
    jobs and sinfo nodes so far, the free slots and each slot's factors."""

    rng: random.Random
    names: list[str]
    per_node: int
    next_id: int = 100_000
    jobs: list[dict[str, Any]] = field(default_factory=list)
    node_docs: list[dict[str, Any]] = field(default_factory=list)
    free_slots: list[tuple[str, int]] = field(default_factory=list)
    by_slot: dict[tuple[str, int], GpuVariability] = field(default_factory=dict)

    def new_id(self) -> int:
        self.next_id += 1
        return self.next_id


CPUS_PER_GPU, MEM_PER_GPU = 8, 64_000


def build_state(nodes: int, per_node: int, held: int, seed: int, scenario: str = "burst",
                ) -> tuple[dict[str, Any], dict[str, Any], Factors]:
    """(squeue doc, sinfo doc, factors) of the synthetic cluster, in the 22.05 JSON shape."""
    run_t, pend_t, node_t = _templates()
    squeue = json.loads((DATA / "squeue.json").read_text(encoding="utf-8"))
    sinfo = json.loads((DATA / "sinfo.json").read_text(encoding="utf-8"))
    st = _State(random.Random(seed), [f"gn{i:04d}" for i in range(1, nodes + 1)], per_node)
    for name in st.names:
        _node(st, name, scenario, run_t, node_t)
    _placed_not_started(st, pend_t)
    for k in range(held):
        _held_job(st, k, pend_t)
    squeue["jobs"] = st.jobs
    sinfo["nodes"] = st.node_docs
    return squeue, sinfo, Factors(by_slot=st.by_slot, version=3, loaded_at=NOW)


def _node(st: _State, name: str, scenario: str, run_t: dict[str, Any], node_t: dict[str, Any]) -> None:
    """One node: its busy GPUs held by running jobs of 1-2 GPUs, its sinfo entry, its free slots
    and each slot's factors."""
    rng, per_node = st.rng, st.per_node
    r = rng.random()
    if scenario == "burst":  # 15 % idle, 35 % full, the rest partly busy: most held jobs fit
        busy_n = 0 if r < 0.15 else per_node if r < 0.5 else rng.randint(1, per_node - 1)
    else:  # steady: a full cluster, 3 % of the nodes with 1-3 GPUs free: few held jobs fit
        busy_n = per_node - rng.randint(1, 3) if r < 0.03 else per_node
    busy = sorted(rng.sample(range(per_node), busy_n))
    # running jobs of 1-2 GPUs holding the busy slots
    i = 0
    while i < len(busy):
        size = min(rng.choice((1, 1, 1, 2)), len(busy) - i)
        minors = busy[i:i + size]
        i += size
        st.jobs.append(_running_job(st, name, minors, run_t))
    node = copy.deepcopy(node_t)
    node.update(name=name, hostname=name, address=name, cpus=128, real_memory=2_000_000,
                features=MODEL, active_features=MODEL, partitions=["gpu"],
                state="mixed" if 0 < busy_n < per_node else ("allocated" if busy_n else "idle"),
                alloc_cpus=CPUS_PER_GPU * busy_n, idle_cpus=128 - CPUS_PER_GPU * busy_n,
                alloc_memory=MEM_PER_GPU * busy_n,
                gres=",".join(f"gpu:{MODEL}_g{m}:1" for m in range(per_node)),
                gres_used=",".join(f"gpu:{MODEL}_g{m}:1(IDX:{m})" if m in busy else f"gpu:{MODEL}_g{m}:0(IDX:N/A)"
                                   for m in range(per_node)))
    st.node_docs.append(node)
    st.free_slots += [(name, m) for m in range(per_node) if m not in busy]
    for m in range(per_node):
        lv = rng.randrange(4)
        # each class has its own level for the GPU (a GPU slow for A need not be slow for
        # D); within a class the slowdown factor is the binned PerfVar, as classification makes it
        levels = {c: (lv + k) % 4 for k, c in enumerate(CLASSES)}
        st.by_slot[(name, m)] = GpuVariability(
            perfvar={c: LEVELS[c][levels[c]] * rng.uniform(0.99, 1.01) for c in CLASSES},
            slowdown={c: LEVELS[c][levels[c]] for c in CLASSES},
            uuid=f"GPU-{name}-{m}", node=name)


def _running_job(st: _State, name: str, minors: list[int], run_t: dict[str, Any]) -> dict[str, Any]:
    """A job running on `minors` of node `name`: 70 % placed by pal earlier (a typed per-slot
    request and its tag), the rest as Slurm placed them."""
    rng, size = st.rng, len(minors)
    next_id = st.new_id()
    typed = rng.random() < 0.7  # placed by pal earlier: typed per-slot request
    job = copy.deepcopy(run_t)
    job.update(job_id=next_id, name=f"train-{next_id}", nodes=name, batch_host=name, required_nodes=name if typed else "",
               job_state="RUNNING", priority=4_294_000_000 - next_id, submit_time=int(NOW - rng.uniform(600, 86400)),
               start_time=int(NOW - rng.uniform(1, 600)), cpus=CPUS_PER_GPU * size, node_count=1,
               time_limit=rng.choice((60, 240, 1440)), end_time=int(NOW + rng.uniform(60, 86400)),
               memory_per_node=MEM_PER_GPU * size, memory_per_cpu=None,
               tres_per_node=(",".join(f"gres:gpu:{MODEL}_g{m}:1" for m in minors) if typed
                              else f"gres:gpu:{size}"),
               gres_detail=[",".join(f"gpu:{MODEL}_g{m}:1(IDX:{m})" for m in minors)],
               admin_comment=Tag(head=PLACED, job_class=rng.choice(CLASSES),
                                 was=(("tres_per_node", f"gres:gpu:{size}"),),
                                 intent=",".join(f"gres:gpu:{MODEL}_g{m}:1" for m in minors), nodes=name,
                                 gpus=f"{name}:{','.join(map(str, minors))}", sf="1.000", policy=DEFAULT_POLICY,
                                 version=3, at=int(NOW - 900)).render() if typed else "")
    return job


def _placed_not_started(st: _State, pend_t: dict[str, Any]) -> None:
    """20 jobs placed by an earlier cycle, released, not started yet: their slots are promised."""
    st.rng.shuffle(st.free_slots)
    for name, m in st.free_slots[:20]:
        next_id = st.new_id()
        job = copy.deepcopy(pend_t)
        job.update(job_id=next_id, name=f"placed-{next_id}", priority=4_294_000_000 - next_id,
                   submit_time=int(NOW - 30), tres_per_node=f"gres:gpu:{MODEL}_g{m}:1", required_nodes=name,
                   admin_comment=Tag(head=PLACED, job_class="B", was=(("tres_per_node", "gres:gpu:1"),),
                                     intent=f"gres:gpu:{MODEL}_g{m}:1", nodes=name, gpus=f"{name}:{m}", sf="1.000",
                                     policy=DEFAULT_POLICY, version=3, at=int(NOW - 5)).render())
        st.jobs.append(job)


def _held_job(st: _State, k: int, pend_t: dict[str, Any]) -> None:
    """Held job `k`, as the filter holds it: class A-D, 1-8 GPUs per node or per job, ~2 % on two
    nodes, ~0.5 % by task (released unchanged), a few with named nodes."""
    rng = st.rng
    next_id = st.new_id()
    job = copy.deepcopy(pend_t)
    cls = rng.choice(CLASSES)
    gpus = rng.choice((1, 1, 1, 1, 2, 2, 2, 3, 4, 4, 8))
    nodes_n, per_job, by_task = 1, rng.random() < 0.25, False
    r = rng.random()
    if r < 0.02:
        nodes_n, gpus, per_job = 2, rng.choice((4, 8)), False
    elif r < 0.025:
        by_task = True
    job.update(job_id=next_id, name=f"job-{next_id}", user_name=f"user{k % 37}", job_state="PENDING",
               priority=4_000_000_000 - next_id, state_reason="BeginTime", eligible_time=int(NOW + 60),
               time_limit=rng.choice((30, 60, 240, 1440, None)),
               submit_time=int(NOW - 300 + k * 0.25),
               admin_comment=f"pal:held class={cls} src=spank", node_count=nodes_n,
               cpus=CPUS_PER_GPU * gpus * nodes_n, minimum_cpus_per_node=CPUS_PER_GPU * gpus,
               memory_per_node=None, memory_per_cpu=4000,
               tres_per_node="" if per_job or by_task else f"gres:gpu:{gpus}",
               tres_per_job=f"gres:gpu:{gpus}" if per_job and not by_task else "",
               tres_per_task="gres:gpu:1" if by_task else "",
               required_nodes=rng.choice(st.names) if r > 0.995 else "")
    st.jobs.append(job)
