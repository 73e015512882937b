"""The placer's cycle on a queue of 50,000 jobs on a real Slurm test cluster
(bench/placer_scale.py): its seconds and memory, and what slurmctld spends meanwhile."""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pal_eval import cluster as test_cluster
from pal_slurm.config import load_config
from pal_slurm.db.engine import open_engine
from pal_slurm.demo.cluster_gpus import make_db
from pal_slurm.placer import holds
from pal_slurm.placer.process import write_config
from pal_slurm.placer.service import build_placer, tune_gc

TARGET_CYCLE_S = 1.0
TARGET_RSS_MB = 400.0
FORMS = (["--gres=gpu:1"], ["--gpus=2"], ["--gpus-per-node=1"])
CLASSES = ("A", "B", "C", "D")


class Cluster:
    """The test cluster of PAL_TEST_SLURM_DIR (started if it is not running)."""

    def __init__(self) -> None:
        env = {**os.environ, "PAL_PYTHON": sys.executable}
        proc = test_cluster.start(env)
        if proc.returncode != 0:
            fail(f"slurm-cluster.sh start failed: {proc.stderr.strip().splitlines()[-1:]}")
        self.env = test_cluster.exports(env)
        os.environ.update(self.env)  # the placer's squeue/scontrol talk to this cluster
        self.dir = Path(self.env["PAL_TEST_SLURM_DIR"])
        self.state_file = self.dir / "pal" / "filter-state"
        self.kill_switch = self.dir / "pal" / "filter-disabled"

    def run(self, argv: Sequence[str], timeout: float = 60, check: bool = True) -> str:
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False,
                              stdin=subprocess.DEVNULL)
        if check and proc.returncode != 0:
            raise RuntimeError(f"{' '.join(argv[:2])}: {(proc.stderr or proc.stdout).strip()[:300]}")
        return proc.stdout

    def config(self) -> dict[str, str]:
        out = self.run(["scontrol", "show", "config"])
        return dict(re.findall(r"^(\w+)\s+=\s+(.*?)\s*$", out, flags=re.MULTILINE))

    def active_jobs(self) -> int:
        return len([ln for ln in self.run(["squeue", "--all", "--noheader", "-o", "%A"]).splitlines() if ln.strip()])

    def submit(self, args: Sequence[str]) -> str:
        out = self.run(["sbatch", "--parsable", "--output=/dev/null", *args]).strip()
        job = out.split(";")[0]
        if not job.isdigit():
            raise RuntimeError(f"sbatch printed {out!r}")
        return job

    def cancel(self, ids: Sequence[str]) -> None:
        for i in range(0, len(ids), 2000):
            self.run(["scancel", *ids[i:i + 2000]], timeout=300, check=False)


def fail(msg: str) -> None:
    print(f"placer_scale: {msg}", file=sys.stderr)
    sys.exit(2)


# -- sdiag ---------------------------------------------------------------------------------------
@dataclass
class Sdiag:
    """What sdiag says at one moment: RPCs by message type (count, total µs), and the main
    scheduler's and backfill's cycles (count, total µs: the mean times the count)."""

    rpcs: dict[str, tuple[int, int]] = field(default_factory=dict)
    main: tuple[int, int] = (0, 0)
    backfill: tuple[int, int] = (0, 0)


_RPC = re.compile(r"^\s*([A-Z_]+)\s+\(\s*\d+\)\s+count:(\d+)\s+ave_time:\d+\s+total_time:(\d+)", re.MULTILINE)


def sdiag(cluster: Cluster) -> Sdiag:
    text = cluster.run(["sdiag"])
    by_type = text.split("Remote Procedure Call statistics by message type", 1)[-1]
    by_type = by_type.split("Remote Procedure Call statistics by user", 1)[0]
    out = Sdiag(rpcs={m[0]: (int(m[1]), int(m[2])) for m in _RPC.findall(by_type)})
    main = text.split("Main schedule statistics", 1)[-1].split("Backfilling stats", 1)[0]
    back = text.split("Backfilling stats", 1)[-1].split("Latency for", 1)[0]
    out.main = _cycles(main)
    out.backfill = _cycles(back)
    return out


def _cycles(section: str) -> tuple[int, int]:
    total = re.search(r"Total cycles:\s*(\d+)", section)
    mean = re.search(r"Mean cycle:\s*(\d+)", section)
    n = int(total.group(1)) if total else 0
    return n, n * (int(mean.group(1)) if mean else 0)


# -- memory --------------------------------------------------------------------------------------
def rss_mb() -> tuple[float, float]:
    """(now, peak) resident set of this process, MB."""
    now = peak = 0.0
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                now = int(line.split()[1]) / 1024
            elif line.startswith("VmHWM:"):
                peak = int(line.split()[1]) / 1024
    return now, max(peak, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


# -- the run -------------------------------------------------------------------------------------
def submit_all(cluster: Cluster, specs: list[list[str]], workers: int, what: str) -> list[str]:
    ids: list[str] = []
    errors: list[str] = []
    t0 = time.monotonic()

    def one(args: list[str]) -> None:
        try:
            ids.append(cluster.submit(args))
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            errors.append(str(exc))

    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(one, specs))
    print(f"  {what}: {len(ids)} submitted in {time.monotonic() - t0:.0f} s"
          + (f", {len(errors)} refused (first: {errors[0]})" if errors else ""), flush=True)
    return ids


def timed(fn: Callable[..., list], sink: list[tuple[float, int]]) -> Callable[..., list]:
    def wrapper(*a: object, **kw: object) -> list:
        t0 = time.perf_counter()
        out = fn(*a, **kw)
        sink.append((time.perf_counter() - t0, len(out)))
        return out
    return wrapper


def run(args: argparse.Namespace) -> int:
    """args: bench/placer_scale.py's options."""
    if os.geteuid() != 0:
        fail("needs root (the test cluster runs slurmd as root; the placer updates other users' jobs)")
    if not 0 <= args.held <= args.pending or args.cycles < 1:
        fail("want 0 <= --held <= --pending and --cycles >= 1")
    cluster = usable_cluster(args)
    submitted: list[str] = []
    stop_beat = threading.Event()
    with tempfile.TemporaryDirectory(prefix="pal-scale-", dir=cluster.dir) as tmpdir:
        tmp = Path(tmpdir)
        db_url = make_db(tmp)
        cfg = load_config(write_config(tmp, db_url, cluster.state_file, mode="enforce", interval=2.0, hold_s=3600,
                                       max_hold=7200.0, stale_after=120, wake=False))
        engine = open_engine(cfg)
        # as `pal placer` builds and tunes it: the database on a thread of its own, the collector tuned
        placer = build_placer(cfg, lambda: engine, background_db=True)
        tune_gc()
        if not placer.prime(30.0):  # the first reads of the classes and rules, as the daemon waits for them
            fail("the placer's first database reads did not come within 30 s")
        try:
            fill_gpus(cluster, submitted)
            filter_on(cluster, placer, stop_beat)
            submit_queue(cluster, args, submitted)
            stop_beat.set()
            return measure(cluster, placer, args)
        finally:
            stop_beat.set()
            cluster.kill_switch.touch()
            try:
                placer.publish(alive=False)
            except OSError as exc:
                print(f"placer_scale: stopping heartbeat not written: {exc}", file=sys.stderr)
            print(f"cleaning up: scancel {len(submitted)} job(s)", flush=True)
            cluster.cancel(submitted)
            engine.dispose()


def usable_cluster(args: argparse.Namespace) -> Cluster:
    """The test cluster, started, with its filter off, no jobs, and room for the queue."""
    cluster = Cluster()
    if not cluster.kill_switch.exists():
        fail(f"the filter of the cluster in {cluster.dir} is on (no {cluster.kill_switch}): another placer or "
             "test uses it; use your own PAL_TEST_SLURM_DIR and ports")
    if (busy := cluster.active_jobs()):
        fail(f"{busy} job(s) already pending or running on the cluster in {cluster.dir}; they would skew the figures")
    conf = cluster.config()
    room = int(conf.get("MaxJobCount", "10000"))
    if room < args.pending + 1000:
        fail(f"MaxJobCount={room} is too small for {args.pending} jobs (slurm-cluster.sh writes 200000: restart "
             "your cluster with the current script)")
    if args.array_size > int(conf.get("MaxArraySize", "1001")) - 1:
        fail(f"--array-size {args.array_size} is over MaxArraySize={conf.get('MaxArraySize')}")
    print(f"cluster {cluster.dir}: Slurm {conf.get('SLURM_VERSION', '?')}, {conf.get('SchedulerParameters', '')}")
    return cluster


def fill_gpus(cluster: Cluster, submitted: list[str]) -> None:
    """Every GPU busy, unheld (the filter is still off): the held jobs then wait, and the cycles
    measure reading and planning, not placements. Each job joins `submitted` (cancelled at the end)."""
    fill = [cluster.submit(["-N1", "--gres=gpu:4", "-J", "scale-fill", "--wrap", "sleep 100000"])
            for _ in range(4)]
    submitted += fill
    deadline = time.monotonic() + 60
    while cluster.run(["squeue", "--noheader", "-t", "RUNNING", "-o", "%A", "-j", ",".join(fill)]).count(
            "\n") < len(fill):
        if time.monotonic() > deadline:
            fail("the 16 GPU fill jobs did not start within 60 s")
        time.sleep(0.5)


def filter_on(cluster: Cluster, placer: Any, stop_beat: threading.Event) -> None:
    """The filter on, as `pal placer` turns it on: its heartbeat (kept fresh until `stop_beat`),
    then no kill switch."""
    placer.publish(nodes=placer.backend.nodes())

    def beat() -> None:
        while not stop_beat.wait(5):
            placer.publish()

    threading.Thread(target=beat, daemon=True).start()
    cluster.kill_switch.unlink()
    time.sleep(2.3)  # the filter re-reads its state at most every 2 s


def submit_queue(cluster: Cluster, args: argparse.Namespace, submitted: list[str]) -> None:
    """--held GPU jobs the filter holds, then the rest of --pending as CPU jobs (arrays with
    --array-size; pending for resources with --eligible, else for a begin time), into `submitted`."""
    print(f"submitting {args.pending} pending jobs ({args.held} GPU jobs held by the filter) with "
          f"{args.submitters} sbatch at once", flush=True)
    gpu = [[*FORMS[i % len(FORMS)], f"--pal-class={CLASSES[i % 4]}", "-J", f"scale-gpu-{i}", "--wrap", "true"]
           for i in range(args.held)]
    submitted += submit_all(cluster, gpu, args.submitters, "held GPU jobs")
    cpu_n = args.pending - args.held
    when = ["--exclusive"] if args.eligible else ["--begin=now+86400"]
    if args.array_size:
        sizes = [min(args.array_size, cpu_n - i) for i in range(0, cpu_n, args.array_size)]
        cpu = [[*when, f"--array=0-{n - 1}", "-J", "scale-cpu", "--wrap", "true"] for n in sizes]
    else:
        cpu = [[*when, "-J", f"scale-cpu-{i}", "--wrap", "true"] for i in range(cpu_n)]
    submitted += submit_all(cluster, cpu, args.submitters, "CPU jobs")


def time_stages(sink: dict[str, list[float]]) -> None:
    """Each cycle stage timed (pal_slurm.placer.cycle.STAGES, looked up by Placer.cycle as it runs)."""
    from pal_slurm.placer import cycle

    def timed_stage(stage: Callable[..., bool]) -> Callable[..., bool]:
        def run(p: object, c: object) -> bool:
            t0 = time.perf_counter()
            try:
                return stage(p, c)
            finally:
                sink.setdefault(stage.__name__, []).append(time.perf_counter() - t0)
        run.__name__ = stage.__name__
        return run

    cycle.STAGES = tuple(timed_stage(s) for s in cycle.STAGES)


@dataclass
class Cycles:
    """The timed cycles: each one's seconds, each stage's, each read of the jobs and the nodes
    (seconds, records), the wall time they took."""

    seconds: list[float] = field(default_factory=list)
    stages: dict[str, list[float]] = field(default_factory=dict)
    reads_jobs: list[tuple[float, int]] = field(default_factory=list)
    reads_nodes: list[tuple[float, int]] = field(default_factory=list)
    wall: float = 0.0


def measure(cluster: Cluster, placer: object, args: argparse.Namespace) -> int:
    p = placer  # a pal_slurm.placer.cycle.Placer
    backend = p.backend  # type: ignore[attr-defined]
    cycles = Cycles()
    time_stages(cycles.stages)
    backend.jobs = timed(backend.jobs, cycles.reads_jobs)
    backend.nodes = timed(backend.nodes, cycles.reads_nodes)
    now = time.time()
    held = [j for j in backend.jobs() if holds.is_held_by_pal(j, now)]
    cycles.reads_jobs.clear()
    if len(held) < args.held:
        print(f"placer_scale: only {len(held)} of {args.held} GPU jobs are held by the filter", file=sys.stderr)
        return 2
    rss_before, _ = rss_mb()
    before = sdiag(cluster)
    run_cycles(p, args, cycles)
    after = sdiag(cluster)
    # squeue as the read ran it before (the whole queue, --array), alone and after sdiag's count:
    # what of such a read is Slurm's (slurmctld and squeue), not ours
    from pal_slurm.slurm import parse_squeue

    layout = parse_squeue.Layout.new(backend.version())
    alone = []
    for _ in range(3):
        t0 = time.perf_counter()
        text = backend._read_squeue(layout, [])
        alone.append(time.perf_counter() - t0)
    lines = (text or "").count(layout.end)
    rss_now, rss_peak = rss_mb()
    median = statistics.median(cycles.seconds)
    print(f"median cycle: {median:.3f} s (min {min(cycles.seconds):.3f}, max {max(cycles.seconds):.3f}); "
          f"the job read alone: median {statistics.median(s for s, _n in cycles.reads_jobs):.3f} s")
    print(f"  squeue --all --array alone (after the cycles): median {statistics.median(alone):.3f} s for "
          f"{lines} records")
    print("  by stage (median s): " + ", ".join(f"{name} {statistics.median(t):.3f}" for name, t in cycles.stages.items()))
    print(f"placer RSS: peak {rss_peak:.0f} MB, now {rss_now:.0f} MB (before the cycles {rss_before:.0f} MB)")
    print_slurmctld(before, after, cycles.wall, args.cycles)
    if len(cycles.stages.get("place", [])) < args.cycles:  # the gate ended them: nothing was decided, nothing measured
        print(f"placer_scale: only {len(cycles.stages.get('place', []))} of {args.cycles} cycles reached the place stage",
              file=sys.stderr)
        return 2
    missed = []
    if median >= TARGET_CYCLE_S:
        missed.append(f"median cycle {median:.3f} s >= {TARGET_CYCLE_S:g} s")
    if rss_peak >= TARGET_RSS_MB:
        missed.append(f"placer RSS {rss_peak:.0f} MB >= {TARGET_RSS_MB:g} MB")
    if missed:
        print("TARGETS MISSED: " + "; ".join(missed))
        return 1
    print(f"targets met: median cycle < {TARGET_CYCLE_S:g} s, RSS < {TARGET_RSS_MB:g} MB")
    return 0


def run_cycles(p: Any, args: argparse.Namespace, cycles: Cycles) -> None:
    """--cycles cycles, one every placer.interval_s, as the service loop runs them (--profile:
    under cProfile, its stats written and the top printed)."""
    interval = p.cfg.interval_s
    t_start = time.monotonic()
    profiler = None
    if args.profile:
        import cProfile

        profiler = cProfile.Profile()
    print(f"{args.cycles} cycles, one every {interval:g} s:")
    for i in range(args.cycles):
        started = time.monotonic()
        if profiler is not None:
            profiler.enable()
        report = p.cycle()
        if profiler is not None:
            profiler.disable()
        cycles.seconds.append(report.seconds)
        read_s, read_n = cycles.reads_jobs[-1] if cycles.reads_jobs else (0.0, 0)
        print(f"  cycle {i + 1}: {report.seconds:.3f} s (jobs read: {read_n} in {read_s:.3f} s; nodes "
              f"{cycles.reads_nodes[-1][0] if cycles.reads_nodes else 0:.3f} s); held {report.held}, placed "
              f"{len(report.placed)}, waiting {len(report.waiting)}, released {len(report.released)}", flush=True)
        if i + 1 < args.cycles:
            time.sleep(max(0.0, interval - (time.monotonic() - started)))
    cycles.wall = time.monotonic() - t_start
    if profiler is not None:
        import pstats

        profiler.dump_stats(args.profile)
        print(f"cProfile of the {args.cycles} cycles ({args.profile}), top 30 by cumulative time:")
        pstats.Stats(profiler, stream=sys.stdout).sort_stats("cumulative").print_stats(30)


def print_slurmctld(before: Sdiag, after: Sdiag, wall: float, n: int) -> None:
    """slurmctld's RPCs per cycle by message type (sdiag's own left out), and its own scheduler's
    and backfill's cycles, over the same wall time."""
    print(f"slurmctld over the {n} cycles ({wall:.1f} s), per cycle (sdiag):")
    rpc_total_us = 0
    for name, (n1, t1) in sorted(after.rpcs.items()):
        n0, t0 = before.rpcs.get(name, (0, 0))
        if n1 - n0 <= 0 or name == "REQUEST_STATS_INFO":  # sdiag's own
            continue
        rpc_total_us += t1 - t0
        print(f"  {name:<32} {(n1 - n0) / n:7.1f} RPCs  {(t1 - t0) / n / 1e3:9.1f} ms")
    print(f"  {'all RPCs but sdiag':<32} {'':7}       {rpc_total_us / n / 1e3:9.1f} ms"
          f"   ({rpc_total_us / 1e4 / wall:.1f} % of the wall time)")
    for label, (c0, u0), (c1, u1) in (("main scheduler", before.main, after.main),
                                      ("backfill", before.backfill, after.backfill)):
        dc, du = c1 - c0, u1 - u0
        print(f"  Slurm's {label:<24} {dc / n:7.1f} cycles {du / n / 1e3:9.1f} ms"
              f"   ({du / 1e4 / wall:.1f} % of the wall time)")
