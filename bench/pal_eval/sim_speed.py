"""Simulator speed and memory at scale: a synthetic trace on a large cluster in event mode
(bench/sim_speed.py)."""

from __future__ import annotations

import resource
import time

import numpy as np

from pal_eval.targets import Targets

TARGET_S = 300.0
TARGET_MB = 2048.0


def synthetic_cluster(nodes: int, gpn: int, seed: int):  # type: ignore[no-untyped-def]
    """PerfVar lognormal around 1 per class with a few slow outliers, binned like the artifact."""
    from pal_slurm.placement.variability import GpuVariability, cluster_from_variability
    from pal_slurm.simulate.artifact_draw import artifact_slowdowns

    rng = np.random.default_rng(seed)
    n = nodes * gpn
    sens = {"A": 0.05, "B": 0.02, "C": 0.015, "D": 0.005}
    pv = {c: np.exp(rng.normal(0, s, n)) for c, s in sens.items()}
    bad = rng.choice(n, size=max(1, n // 100), replace=False)
    for c in "AB":
        pv[c][bad] *= 1.4
    sf = {c: artifact_slowdowns(list(v)) for c, v in pv.items()}
    var = [GpuVariability(perfvar={c: float(pv[c][g]) for c in pv}, slowdown={c: float(sf[c][g]) for c in sf})
           for g in range(n)]
    return cluster_from_variability(var, nodes, gpn)


def synthetic_trace(jobs: int, n_gpus: int, interarrival: float | None):  # type: ignore[no-untyped-def]
    """`jobs` synthetic jobs arriving `interarrival` s apart on average (None: aimed at ~80 %
    offered load), and that mean."""
    from pal_slurm.simulate.synthetic import generate

    probe = generate(2000, seed=7, max_gpus=n_gpus)
    work = sum(j.nominal_runtime_s * j.num_gpus for j in probe.jobs) / len(probe.jobs)
    inter = interarrival or work / (0.8 * n_gpus)
    return generate(jobs, seed=7, max_gpus=n_gpus, mean_interarrival_s=inter), inter


#: the targets of a site-scale run of the LLM-era mix (a month of a 16,384-GPU site)
LLM_TARGET_S = 600.0
LLM_TARGET_MB = 4096.0


def llm_inputs(jobs: int, nodes: int, gpus_per_node: int):  # type: ignore[no-untyped-def]
    """The LLM-era mix at 90 % offered load, and the options a headline run uses with it
    (runtimes known x U[1, 5], lambda 1.0: whole-node jobs on a fast fabric)."""
    from pal_slurm.simulate.estimates import parse_runtime_estimate
    from pal_slurm.simulate.event import EventOptions
    from pal_slurm.simulate.llm_workload import generate_llm

    trace = generate_llm(jobs, nodes=nodes, gpus_per_node=gpus_per_node, seed=7)
    return trace, EventOptions(order="fifo", locality_penalty=1.0, runtime_estimate=parse_runtime_estimate("uniform:1:5"))


def run(jobs: int, nodes: int, gpus_per_node: int, policies: list[str], interarrival: float | None,
        target_s: float, target_mb: float, workload: str = "philly") -> int:
    from pal_slurm.placement.policies import get_policy
    from pal_slurm.simulate.event import EventOptions, simulate_events

    n_gpus = nodes * gpus_per_node
    t0 = time.perf_counter()
    cluster = synthetic_cluster(nodes, gpus_per_node, seed=1)
    if workload == "llm":
        trace, opts = llm_inputs(jobs, nodes, gpus_per_node)
        inter = max(j.submit_time for j in trace.jobs) / max(len(trace.jobs), 1)
    else:
        trace, inter = synthetic_trace(jobs, n_gpus, interarrival)
        opts = EventOptions(order="fifo", locality_penalty=1.7)
    span = max(j.submit_time for j in trace.jobs) or 1.0
    offered = sum(j.nominal_runtime_s * j.num_gpus for j in trace.jobs) / (n_gpus * span)
    print(f"setup: {workload} mix, {n_gpus} GPUs ({nodes} x {gpus_per_node}), {len(trace.jobs)} jobs over "
          f"{span / 86400:.1f} days, mean inter-arrival {inter:.1f} s, offered load {offered:.0%} of the cluster "
          f"over the arrival span, in {time.perf_counter() - t0:.1f} s")
    walls: dict[str, float] = {}
    for name in policies:
        t1, c1 = time.perf_counter(), time.process_time()
        res = simulate_events(trace, cluster, get_policy(name), opts)
        dt, cpu = time.perf_counter() - t1, time.process_time() - c1
        walls[name] = dt
        m = res.metrics
        # CPU time beside wall time: on a shared machine the wall time counts others' work too
        print(f"{name:14s} {dt:7.1f} s ({cpu:.1f} s CPU)  avg JCT {m.avg_jct_s / 3600:8.2f} h  makespan {m.makespan_s / 3600:8.1f} h  "
              f"utilization {m.utilization:.3f}")
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak memory (max RSS of this process): {peak_mb:.0f} MB")
    targets = Targets()
    for name, dt in walls.items():
        targets.check(f"{name}: {len(trace.jobs)} jobs on {n_gpus} GPUs, wall", dt, "<", target_s, "s", digits=1)
    targets.check("peak memory (max RSS)", peak_mb, "<", target_mb, "MB", digits=0)
    return targets.exit_status()
