"""One placement-daemon cycle timed over a synthetic cluster (bench/placer_cycle.py; the cluster
is pal_eval.synthetic_cluster's): the placer wired as `pal placer` wires it against the
slurmctld stand-in, the timed cycles and what their figure leaves out."""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import os
import pstats
import statistics
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from pal_eval.fakes import InMemorySlurm, Phases, StaticFactors
from pal_eval.synthetic_cluster import CLASSES, NOW, build_state
from pal_eval.targets import Targets
from pal_slurm.config import PlacerConfig
from pal_slurm.db.accounting_store import AccountingSink
from pal_slurm.placer import cluster_view, shapes
from pal_slurm.placer import cycle as cycle_mod
from pal_slurm.placer.accounting import Accounting
from pal_slurm.placer.audit import AuditSink
from pal_slurm.placer.cycle import Placer
from pal_slurm.placer.factors import Factors
from pal_slurm.placer.service import tune_gc
from pal_slurm.slurm import parse_json
from pal_slurm.slurm.model import SlurmJob

TARGET_S = 1.0
PHASES = ("read/parse", "publish", "identities", "view", "plan", "place", "account", "apply", "audit")

#: one timed cycle: per clock (wall, cpu), per phase, seconds
Row = dict[str, dict[str, float]]


def database(tmp: Path, use_db: bool) -> tuple[AuditSink, Callable[[Sequence[SlurmJob]], None] | None]:
    """The audit sink and the job-identity recorder as `pal placer` wires them (placer/service.py),
    on a fresh SQLite database; none of either with --no-audit-db."""
    if not use_db:
        return AuditSink(None), None
    from pal_slurm.db.engine import make_engine, session_scope
    from pal_slurm.db.migrate import upgrade
    from pal_slurm.db.sensitivity_store import record_identities

    engine = make_engine(f"sqlite:///{tmp / 'pal.db'}")
    upgrade(engine)

    def identities(jobs: Sequence[SlurmJob]) -> None:
        with session_scope(engine) as session:
            record_identities(session, [(j.job_id, j.user, j.name, j.command) for j in jobs])

    return AuditSink(lambda: engine), identities


def split(d: dict[str, float]) -> dict[str, float]:
    """One cycle's phases; `apply` is what the named phases and the stand-in leave of the cycle."""
    out = {p: d[p] for p in PHASES if p != "apply"}
    out["apply"] = d["cycle"] - sum(out.values()) - d["stand-in"]
    out["ours"] = d["cycle"] - d["stand-in"]
    out["stand-in"] = d["stand-in"]
    out["total"] = d["cycle"]
    return out


def run(args: argparse.Namespace) -> int:
    """args: bench/placer_cycle.py's options."""
    backend, factors, squeue_text = synthetic_slurm(args)
    n_jobs = len(backend.doc["jobs"])
    gc.collect()
    gc.freeze()
    parse_alone(squeue_text, n_jobs)
    del squeue_text
    with tempfile.TemporaryDirectory(prefix="pal-bench-") as tmpdir:
        placer, audit = wired_placer(args, backend, factors, Path(tmpdir))
        with timed_steps(backend.phases, placer, audit):
            rows, calls = timed_cycles(args, placer, backend)
    print(f"{args.cycles} cycles, scenario {args.scenario}, policy {args.policy}, audit {'in memory' if args.no_audit_db else 'SQLite'}; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    wall_med = print_phases(rows)
    left_out(calls)
    targets = Targets()
    targets.check("our code's median cycle (wall)", wall_med, "<", args.target_s, "s")
    return targets.exit_status()


def synthetic_slurm(args: argparse.Namespace) -> tuple[InMemorySlurm, Factors, str]:
    """The stand-in over the synthetic state, its factors, and its squeue document as squeue
    prints it (the documents themselves are not kept: the stand-in holds its own copy)."""
    t0 = time.perf_counter()
    squeue, sinfo, factors = build_state(args.nodes, args.per_node, args.held, args.seed, args.scenario)
    squeue_text = json.dumps(squeue)
    held_n = sum(1 for j in squeue["jobs"] if (j.get("admin_comment") or "").startswith("pal:held"))
    running_n = sum(1 for j in squeue["jobs"] if j["job_state"] == "RUNNING")
    print(f"state: {args.nodes * args.per_node} GPUs on {args.nodes} nodes, {len(squeue['jobs'])} jobs in squeue "
          f"({held_n} held, {running_n} running), squeue --json {len(squeue_text) / 1e6:.1f} MB, sinfo --json "
          f"{len(json.dumps(sinfo)) / 1e6:.1f} MB; built in {time.perf_counter() - t0:.1f} s")
    return InMemorySlurm(squeue, sinfo, Phases(), now=NOW), factors, squeue_text


def parse_alone(squeue_text: str, n_jobs: int) -> None:
    """parse_json alone on the squeue document, five times: json.loads and jobs_from_doc apart."""
    times, parse_times = [], []
    for _ in range(5):
        t = time.perf_counter()
        doc = parse_json.load(squeue_text, "squeue --json")
        t1 = time.perf_counter()
        parse_json.iter_unique(parse_json.jobs_from_doc(doc))
        times.append(time.perf_counter() - t)
        parse_times.append(time.perf_counter() - t1)
        del doc
    print(f"parse_json alone, squeue --json of {n_jobs} jobs: median {1000 * statistics.median(times):.0f} ms "
          f"(json.loads {1000 * (statistics.median(times) - statistics.median(parse_times)):.0f} ms + "
          f"jobs_from_doc {1000 * statistics.median(parse_times):.0f} ms)")


def wired_placer(args: argparse.Namespace, backend: InMemorySlurm, factors: Factors, tmp: Path,
                 ) -> tuple[Placer, AuditSink]:
    """The real Placer in enforce mode, with the audit, the job identities and the accounting
    ledger as `pal placer` wires them (each timed as its phase), the collector tuned as at start."""
    phases = backend.phases
    cfg = PlacerConfig(mode="enforce", policy=args.policy, state_file=str(tmp / "filter-state"))
    audit, identities = database(tmp, not args.no_audit_db)
    accounting = Accounting(AccountingSink(None), cfg.mode)
    accounting.cycle = phases.wrap("account", accounting.cycle)  # type: ignore[method-assign]
    accounting.placed = phases.wrap("account", accounting.placed)  # type: ignore[method-assign]
    placer = Placer(backend, cfg, StaticFactors(factors), audit, classes=CLASSES,  # type: ignore[arg-type]
                    identities=phases.wrap("identities", identities) if identities else None, clock=lambda: NOW,
                    accounting=accounting)
    tune_gc()  # as `pal placer` does at start
    return placer, audit


@contextmanager
def timed_steps(phases: Phases, placer: Placer, audit: AuditSink) -> Iterator[None]:
    """The daemon's own steps timed where they are called, restored afterwards."""
    saved = (cluster_view.build_view, shapes.plan_requests, cycle_mod.decide)
    cluster_view.build_view = phases.wrap("view", cluster_view.build_view)  # type: ignore[assignment]
    shapes.plan_requests = phases.wrap("plan", shapes.plan_requests)  # type: ignore[assignment]
    # the decision step as the place stage calls it (a policy is a frozen value: its own
    # `place` cannot be wrapped; ordering and windowing the queue are counted with it)
    cycle_mod.decide = phases.wrap("place", cycle_mod.decide)  # type: ignore[assignment]
    placer.publish = phases.wrap("publish", placer.publish)  # type: ignore[method-assign]
    audit.flush = phases.wrap("audit", audit.flush)  # type: ignore[method-assign]
    try:
        yield
    finally:
        cluster_view.build_view, shapes.plan_requests, cycle_mod.decide = saved  # type: ignore[assignment]


def timed_cycles(args: argparse.Namespace, placer: Placer, backend: InMemorySlurm,
                 ) -> tuple[list[Row], list[tuple[Counter[str], int]]]:
    """--cycles cycles from the same state, after one that warms up (imports, the first publish):
    each one's phases, and the Slurm calls it made with the jobs it placed; --profile: one more,
    under cProfile."""
    phases = backend.phases
    # burst: the held jobs have just arrived, their identities are new (the daemon records
    # up to 500 a cycle); steady: every job was seen in an earlier cycle
    seen_before = {str(j["job_id"]) for j in backend.doc["jobs"] if not (j.get("admin_comment") or "").startswith("pal:held") or args.scenario == "steady"}
    rows: list[Row] = []
    calls: list[tuple[Counter[str], int]] = []  # per timed cycle: the Slurm calls made, jobs placed
    for c in range(args.cycles + 1):  # cycle 0 warms up (imports, first publish)
        backend.reset()
        placer.seen.identified = set(seen_before)
        # the stand-in's documents (a million Python objects the real daemon does not
        # hold) would otherwise make every full garbage collection in the cycle slower
        gc.collect()
        gc.freeze()
        phases.clear()
        with phases.span("cycle"):
            rep = placer.cycle()
        row = {"wall": split(phases.wall), "cpu": split(phases.cpu)}
        if c == 0:
            print(f"cycle report: held={rep.held} placed={len(rep.placed)} released_unchanged="
                  f"{len(rep.released)} failed={len(rep.failed)} waiting={len(rep.waiting)} "
                  f"(of which on purpose, for better GPUs: {len(rep.waits)})")
            if rep.failed:
                print(f"FAILED verification: {rep.failed[:10]}")
        else:
            rows.append(row)
            calls.append((backend.calls, len(rep.placed)))
    if args.profile:
        profiled_cycle(placer, backend)
    return rows, calls


def profiled_cycle(placer: Placer, backend: InMemorySlurm) -> None:
    backend.reset()
    gc.collect()
    gc.freeze()
    prof = cProfile.Profile()
    prof.enable()
    placer.cycle()
    prof.disable()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(35)
    print(buf.getvalue())


def print_phases(rows: list[Row]) -> float:
    """Each phase's fastest, median and slowest cycle, wall and CPU; our code's median wall time."""
    print(f"{'phase (ms)':<30}{'wall min':>9}{'median':>8}{'max':>7}{'CPU min':>9}{'median':>8}{'max':>7}")
    for p in (*PHASES, "ours", "stand-in", "total"):
        label = {"ours": "cycle, our code", "stand-in": "slurmctld stand-in (excluded)",
                 "total": "cycle incl. stand-in"}.get(p, "  " + p)
        wall, cpu = [r["wall"][p] for r in rows], [r["cpu"][p] for r in rows]
        print(f"{label:<30}{1000 * min(wall):>9.0f}{1000 * statistics.median(wall):>8.0f}{1000 * max(wall):>7.0f}"
              f"{1000 * min(cpu):>9.0f}{1000 * statistics.median(cpu):>8.0f}{1000 * max(cpu):>7.0f}")
    wall_med = statistics.median(r["wall"]["ours"] for r in rows)
    cpu_med = statistics.median(r["cpu"]["ours"] for r in rows)
    print(f"our code: median {wall_med:.3f} s wall ({cpu_med:.3f} s CPU), slowest "
          f"{max(r['wall']['ours'] for r in rows):.3f} s wall; the slurmctld stand-in's time is not in it")
    return wall_med


def spawn_floor_s(runs: int = 21) -> float:
    """What starting one process costs this process here (`true`, nothing run in it): the least
    each Slurm command of the cli backend costs, before scontrol's own start-up and slurmctld."""
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run(["true"], check=False)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def left_out(calls: Sequence[tuple[Counter[str], int]]) -> None:
    """The Slurm calls the placer made per timed cycle, by the command the cli backend runs for
    each: not counted in the figure compared with the target."""
    writes = ("scontrol update", "scontrol release", "scontrol hold")
    kinds = sorted({k for c, _n in calls for k in c}, key=lambda k: (k.startswith(writes), k))  # reads first
    totals = [sum(c.values()) for c, _n in calls]
    placed = [n for _c, n in calls]

    def span(xs: Sequence[int]) -> str:
        return f"{min(xs)}" if min(xs) == max(xs) else f"{min(xs)}-{max(xs)}"

    print(f"NOT counted above: the Slurm commands the placer issued, {span(totals)} per cycle for "
          f"{span(placed)} placed jobs (cli backend: one process and one slurmctld RPC each, one after the other):")
    for k in kinds:
        print(f"  {span([c[k] for c, _n in calls]):>9}  {k}")
    floor = spawn_floor_s()
    med = statistics.median(totals)
    per_job = f", {med / statistics.median(placed):.1f} per placed job" if statistics.median(placed) else ""
    print(f"  their cost is Slurm's and not modelled here{per_job}; at least {med:.0f} x {1000 * floor:.1f} ms "
          f"(starting one process on this machine, nothing run in it) = {med * floor:.2f} s more per cycle with "
          f"the cli backend, before scontrol's own start-up and slurmctld's work (bench/placer_latency.py "
          f"measures them on the test cluster)")

