"""The node agent's overhead: CPU and memory over a simulated hour, then in real time (bench/agent_overhead.py)."""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from pal_eval.targets import Targets

TARGET_PCT = 1.0
MAX_RSS_GROWTH_MIB = 2.0

WORKLOADS = ("resnet50", "bert", "vgg19", "pagerank", "gpt2", "pointnet")


class SimClock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class TimedBackend:
    """Wraps the GPU backend to measure the CPU time spent inside sample() (the NVML stand-in)."""

    def __init__(self, backend) -> None:  # type: ignore[no-untyped-def]
        self._b = backend
        self.name = backend.name
        self.cpu_s = 0.0

    def __getattr__(self, item: str):  # type: ignore[no-untyped-def]
        return getattr(self._b, item)

    def sample(self, index: int):  # type: ignore[no-untyped-def]
        t0 = time.thread_time()
        try:
            return self._b.sample(index)
        finally:
            self.cpu_s += time.thread_time() - t0


def write_map(directory: Path, job: int, gpu: int, start: float, name: str, end: float | None = None) -> None:
    text = (f"format=pal-jobmap/1\njob_id={job}\nuser=u{job % 17}\ngpus={gpu}\nstart={int(start)}\n"
            f"partition=gpu\nname={name}\n")
    if end is not None:
        text += f"end={int(end)}\n"
    tmp = directory / f".{job}.tmp"
    tmp.write_text(text)
    os.replace(tmp, directory / f"{job}.job")


def rss_mib() -> float:
    return psutil.Process().memory_info().rss / 2**20


@dataclass
class JobChurn:
    """The prolog's and epilog's part of the simulated node, not the agent's: each second a job
    whose time is up ends and a free GPU starts one with probability `busy`, both written to the
    job map as the real scripts write it, so the agent reads a node whose jobs come and go."""

    jobmap: Path
    gpus: int
    busy: float
    rng: random.Random
    running: dict[int, tuple[int, float]] = field(default_factory=dict)  # gpu -> (job id, end time)
    next_job: int = 1000

    @property
    def started(self) -> int:
        return self.next_job - 1000

    def step(self, now: float) -> None:
        for gpu in range(self.gpus):
            job = self.running.get(gpu)
            if job is not None and now >= job[1]:
                path = self.jobmap / f"{job[0]}.job"
                path.write_text(path.read_text() + f"end={int(now)}\n")
                del self.running[gpu]
            elif job is None and self.rng.random() < self.busy:
                self.next_job += 1
                self.running[gpu] = (self.next_job, now + self.rng.uniform(300, 1800))
                write_map(self.jobmap, self.next_job, gpu, now, self.rng.choice(WORKLOADS))


def simulated(gpus: int, hours: float, busy: float, seed: int) -> tuple[float, float]:
    """Part 1; (the agent's own CPU as % of one core, RSS growth from start to end in MiB)."""
    from pal_slurm.agent.service import AgentService
    from pal_slurm.agent.simload import SimLoad
    from pal_slurm.config import AgentConfig
    from pal_slurm.db import migrate
    from pal_slurm.db.engine import make_engine
    from pal_slurm.gpu.simulated import SimBackend
    from pal_slurm.gpu.simulated_fleet import make_fleet

    rng = random.Random(seed)
    tmp = Path(tempfile.mkdtemp(prefix="pal-agent-bench-"))
    url = f"sqlite:///{tmp / 'pal.db'}"
    migrate.upgrade(make_engine(url))
    fleet = make_fleet(nodes=1, gpus_per_node=gpus, seed=seed)
    clock = SimClock(1_796_000_000.0)
    load = SimLoad()
    backend = TimedBackend(SimBackend(fleet, (fleet.nodes[0],), load=load, clock=clock))
    jobmap = tmp / "jobs"
    jobmap.mkdir()
    settings = AgentConfig(jobmap_dir=str(jobmap), metrics_port=0)
    service = AgentService(settings, backend, node=fleet.nodes[0], db_url=url, state_file=None, clock=clock,  # type: ignore[arg-type]
                           on_jobs=load.assign)
    churn = JobChurn(jobmap, gpus, busy, rng)
    total = int(hours * 3600)
    cpu = 0.0
    marks: list[tuple[str, int, float]] = []
    scrape_bytes = 0
    for second in range(total + 60):
        clock.t += 1.0
        churn.step(clock.t)
        t0 = time.process_time()
        service.agent.cycle()
        service.worker.step(now=clock.t)
        if second % 15 == 0:
            scrape_bytes = len(service.render_metrics())
        spent = time.process_time() - t0
        if second >= 60:  # the first simulated minute is warm-up (imports, first DB connection)
            cpu += spent
            done = second - 60 + 1
            if done in (1, total // 2, total):
                marks.append(({1: "start", total // 2: "middle", total: "end"}[done], done, rss_mib()))
    sim_share = backend.cpu_s * total / (total + 60)
    h = service.health
    print(f"simulated: {gpus} GPUs x 1 Hz for {total} s ({hours:g} h), jobs started {churn.started}, "
          f"profiles written {h.profiles_queued - len(service.queue)}, scrape {scrape_bytes} bytes")
    print(f"  agent CPU: {cpu:.2f} s over {total} s = {100 * cpu / total:.3f} % of one core "
          f"({1000 * cpu / total:.2f} ms per cycle)")
    print(f"    of which in the simulated backend's sample() (physics model, NVML stand-in): "
          f"{100 * sim_share / total:.3f} %; agent code itself: {100 * (cpu - sim_share) / total:.3f} %")
    for label, done, rss in marks:
        print(f"  RSS at {label:<6} (cycle {done:>5}): {rss:.1f} MiB")
    print(f"  samples {h.samples}, sample errors {h.sample_errors}, DB errors {h.db_errors}, "
          f"pending {len(service.queue)}, dropped {service.queue.dropped}")
    service.worker.close()
    return 100 * (cpu - sim_share) / total, marks[-1][2] - marks[0][2]


def real_time(gpus: int, seconds: float, seed: int) -> None:
    from pal_slurm.agent.service import AgentService
    from pal_slurm.agent.simload import SimLoad
    from pal_slurm.config import AgentConfig
    from pal_slurm.db import migrate
    from pal_slurm.db.engine import make_engine
    from pal_slurm.gpu.simulated import SimBackend
    from pal_slurm.gpu.simulated_fleet import make_fleet

    tmp = Path(tempfile.mkdtemp(prefix="pal-agent-bench-rt-"))
    url = f"sqlite:///{tmp / 'pal.db'}"
    migrate.upgrade(make_engine(url))
    fleet = make_fleet(nodes=1, gpus_per_node=gpus, seed=seed)
    load = SimLoad()
    jobmap = tmp / "jobs"
    jobmap.mkdir()
    for gpu in range(gpus):
        write_map(jobmap, 5000 + gpu, gpu, time.time(), WORKLOADS[gpu % len(WORKLOADS)])
    settings = AgentConfig(jobmap_dir=str(jobmap), metrics_address="127.0.0.1")
    service = AgentService(settings, SimBackend(fleet, (fleet.nodes[0],), load=load), node=fleet.nodes[0],
                           db_url=url, state_file=None, on_jobs=load.assign)
    service.start_metrics(0)
    proc = psutil.Process()
    warm = threading.Thread(target=service.run, kwargs={"duration_s": seconds + 5}, daemon=True)
    warm.start()
    time.sleep(5)  # startup: imports done, first DB read
    c0, w0, r0 = proc.cpu_times(), time.monotonic(), rss_mib()
    warm.join()
    c1, w1 = proc.cpu_times(), time.monotonic()
    cpu = (c1.user + c1.system) - (c0.user + c0.system)
    print(f"real time: {gpus} GPUs x 1 Hz for {w1 - w0:.1f} s (DB thread and metrics server running): "
          f"process CPU {cpu:.3f} s = {100 * cpu / (w1 - w0):.3f} % of one core; RSS {r0:.1f} -> {rss_mib():.1f} MiB")


def run(args: argparse.Namespace) -> int:
    """args: bench/agent_overhead.py's options."""
    own_pct, growth = simulated(args.gpus, args.hours, args.busy, args.seed)
    if args.real_seconds > 0:
        real_time(args.gpus, args.real_seconds, args.seed)
    targets = Targets()
    targets.check(f"the agent's own CPU at {args.gpus} GPUs x 1 Hz (NVML stand-in excluded)", own_pct,
                  "<", args.target_pct, "% of one core", digits=3)
    targets.check(f"RSS growth over {args.hours:g} simulated h", growth, "<=", args.max_rss_growth_mib, "MiB", digits=1)
    return targets.exit_status()
