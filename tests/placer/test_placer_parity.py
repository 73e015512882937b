"""One policy engine, one truth: the simulator and the placement daemon decide alike.

The event simulator runs a small trace and records every decision it makes (its snapshot,
queue and result). Each recorded moment is then rendered the way Slurm would show it to
the daemon: nodes with per-slot GPU types and the slots in use, running jobs with their
gres_detail and EndTime, held jobs with their request, time limit and the filter's tag.
The daemon's own path (cluster_view.build_view -> shapes.plan_requests -> decide, through
`Placer.problem.build`) must reach exactly the simulator's decision: the same GPUs (node and
slot) for the same jobs, the same jobs waiting on purpose.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from pal_eval.fakes import StaticFactors
from pal_slurm.config import PlacerConfig
from pal_slurm.placement.decide import decide
from pal_slurm.placement.model import Decision, JobRequest, Snapshot
from pal_slurm.placement.policies import get_policy
from pal_slurm.placement.variability import GpuVariability
from pal_slurm.placer.audit import AuditSink
from pal_slurm.placer.cycle import Placer
from pal_slurm.placer.factors import Factors
from pal_slurm.simulate.event import EventOptions, simulate_events
from pal_slurm.simulate.traces import Trace, TraceJob
from pal_slurm.slurm.model import SlurmJob, SlurmNode
from tests.support.placement_cases import CLASSES, fleet
from tests.support.recording_slurm import Recorder


def trace(n: int = 40) -> Trace:
    """One-node jobs of 1-4 GPUs and two-node jobs of 4 per node, seconds of work, all classes."""
    import random

    rng = random.Random(7)
    jobs = []
    t = 0.0
    for i in range(n):
        t += rng.choice([0.0, 30.0, 120.0, 600.0])
        if rng.random() < 0.15:
            gpus, per = 8, 4
        else:
            gpus = rng.choice([1, 1, 2, 4])
            per = gpus  # one node, as --gres=gpu:N gives it
        jobs.append(TraceJob(job_id=str(100 + i), num_gpus=gpus, submit_time=t, work=rng.uniform(300, 20000),
                             work_unit="seconds", model="m", job_class=rng.choice(CLASSES), iter_time_s=1.0,
                             line=i + 1, source="parity", gpus_per_node=per))
    return Trace(name="parity", jobs=tuple(jobs))


def slurm_view(snap: Snapshot, queue: Sequence[JobRequest]) -> tuple[list[SlurmNode], list[SlurmJob]]:
    """The moment as squeue/sinfo would show it (22.05 spellings)."""
    c = snap.cluster
    owner = {g: jid for jid, gs in snap.running.items() for g in gs}
    nodes = []
    for v, name in enumerate(c.node_names):
        slots = c.node_gpus[v]
        used = [c.gpus[g].slot for g in slots if g in owner]
        gres = ",".join(f"gpu:v100_g{c.gpus[g].slot}:1" for g in slots)
        gres_used = ",".join(f"gpu:v100_g{c.gpus[g].slot}:{1 if g in owner else 0}"
                             f"(IDX:{c.gpus[g].slot if g in owner else 'N/A'})" for g in slots)
        nodes.append(SlurmNode(name=name, state="MIXED" if used else "IDLE", flags=frozenset(), cpus=64,
                               alloc_cpus=len(used), real_memory_mb=512000, alloc_memory_mb=0,
                               features=frozenset({"v100"}), active_features=frozenset({"v100"}),
                               partitions=("gpu",), gres=gres, gres_used=gres_used))
    jobs = []
    for jid, gs in snap.running.items():
        on = sorted({c.node_of[g] for g in gs})
        detail = tuple(",".join(f"gpu:v100_g{c.gpus[g].slot}:{1 if g in gs else 0}(IDX:{c.gpus[g].slot if g in gs else ''})"
                                for g in c.node_gpus[v]) for v in on)
        jobs.append(SlurmJob(job_id=jid, name="r", user="u", state="RUNNING", state_reason="None", priority=1,
                             partition="gpu", submit_time=0.0, nodes=",".join(c.node_names[v] for v in on),
                             node_count=len(on), gres_detail=detail, start_time=0.0,
                             end_time=snap.expected_end.get(jid)))
    for r in queue:
        per = r.gpus_per_node or r.gpus
        jobs.append(SlurmJob(job_id=r.id, name="j", user="u", state="PENDING", state_reason="BeginTime", priority=1000,
                             partition="gpu", submit_time=r.submit_time, tres_per_node=f"gres:gpu:{per}",
                             node_count=r.gpus // per, admin_comment=f"pal:held class={r.job_class} src=rule",
                             begin_time=(snap.now or 0.0) + 80, time_limit_s=r.remaining_s))
    return nodes, jobs


def daemon_decision(policy: str, snap: Snapshot, queue: Sequence[JobRequest], tmp: Path) -> tuple[Decision, list]:
    c = snap.cluster
    nodes, jobs = slurm_view(snap, queue)
    by_slot = {(c.node_names[g.node], g.slot): GpuVariability(
        perfvar={k: c.perfvar[k][g.id] for k in CLASSES}, slowdown={k: c.slowdown[k][g.id] for k in CLASSES})
        for g in c.gpus}
    factors = Factors(by_slot=by_slot, version=1, loaded_at=0.0)
    cfg = PlacerConfig(mode="enforce", policy=policy, state_file=str(tmp / "state"), max_hold_s=1e9)
    placer = Placer(Recorder(jobs, nodes), cfg, StaticFactors(factors), AuditSink(None), classes=CLASSES,  # type: ignore[arg-type]
                    clock=lambda: snap.now or 0.0)
    held = [j for j in jobs if j.pending]
    prob = placer.problem.build(held, jobs, nodes, factors, snap.now or 0.0)
    assert not prob.planned.skips, prob.planned.skips
    return decide(placer.policy, placer.order, prob.snapshot, prob.planned.requests, placer.ctx), list(prob.view.slots)


@pytest.mark.parametrize("policy", ["pal-guard", "slurm-backfill", "pal-match", "pal-backfill", "pal", "pm-first",
                                    "packed-sticky"])
def test_the_daemon_decides_what_the_simulator_decided(policy: str, tmp_path: Path) -> None:
    c = fleet()
    recorded: list[tuple[Snapshot, list[JobRequest], Decision]] = []

    def keep(snap: Snapshot, queue: Sequence[JobRequest], backfill: bool, decision: Decision) -> None:
        if backfill or not get_policy(policy).backfills:  # every daemon cycle is a backfill pass
            # the simulator hands live views of its running jobs: copy them as they are now
            frozen = Snapshot(cluster=snap.cluster, free=snap.free, running=dict(snap.running), now=snap.now,
                              expected_end=dict(snap.expected_end))
            recorded.append((frozen, list(queue), decision))

    opts = EventOptions(same_slots=True, backfill_interval_s=0.0)
    simulate_events(trace(), c, get_policy(policy), opts, on_decision=keep)
    assert len(recorded) > 20
    waited = 0
    for snap, queue, sim in recorded:
        live, slots = daemon_decision(policy, snap, queue, tmp_path)
        as_slots = {a.job_id: sorted((c.node_names[c.gpus[g].node], c.gpus[g].slot) for g in a.gpus)
                    for a in sim.assignments}
        got = {a.job_id: sorted((slots[g].node, slots[g].minor) for g in a.gpus) for a in live.assignments}
        assert got == as_slots, f"at t={snap.now}: daemon {got} vs simulator {as_slots}"
        assert [w.job_id for w in live.waits] == [w.job_id for w in sim.waits]
        waited += len(sim.waits)
    if policy in ("pal-match", "pal-backfill"):
        assert waited > 0, "the trace should make some job wait for better GPUs"
