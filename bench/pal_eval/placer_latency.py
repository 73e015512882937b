"""The delay pal-slurm adds on the test cluster (bench/placer_latency.py): submit to start, and a
job's end to the next start on its GPUs, with the filter and `pal placer` on against the same jobs
with pal-slurm off."""

from __future__ import annotations

import argparse
import random
import re
import statistics
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from pal_eval.end_to_start import EndsRun, ends_run, ends_summary
from pal_eval.latency_cluster import ACTIVE, Cluster
from pal_eval.targets import Targets
from pal_slurm.demo.cluster_gpus import make_db
from pal_slurm.errors import PalError
from pal_slurm.placer.process import PlacerProcess, wait_heartbeat, write_config
from pal_slurm.placer.tag import RELEASED_UNCHANGED, Tag

TARGET_S = 0.2
END_TARGET_S = 0.2
CLASSES = ("A", "B", "C", "D")
FORMS = ("--gres=gpu:{n}", "--gpus={n}", "--gpus-per-node={n}")


@dataclass(frozen=True)
class JobSpec:
    cls: str
    gpus: int
    form: str

    def args(self) -> list[str]:
        return [f"--pal-class={self.cls}", self.form.format(n=self.gpus)]


@dataclass
class Run:
    name: str
    submitted: dict[str, float] = field(default_factory=dict)  # job id -> wall clock before sbatch
    started: dict[str, float] = field(default_factory=dict)
    records: dict[str, dict[str, str]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def delays(self) -> list[float]:
        return sorted(self.started[j] - t for j, t in self.submitted.items() if j in self.started)


def job_list(n: int, seed: int) -> list[JobSpec]:
    rng = random.Random(seed)
    return [JobSpec(rng.choice(CLASSES), rng.choice((1, 1, 2, 2, 3, 4)), rng.choice(FORMS)) for _ in range(n)]


def one_run(cluster: Cluster, name: str, specs: list[JobSpec], rate: float, drain_s: float, out: Path) -> Run:
    run = Run(name)
    out.mkdir(parents=True)
    t0 = time.time()
    for i, spec in enumerate(specs):
        delay = t0 + i / rate - time.time()
        if delay > 0:
            time.sleep(delay)
        argv = ["sbatch", "--parsable", f"--output={out}/%j.out", f"--job-name=lat-{name}-{i}", *spec.args(),
                "--wrap", "date +%s.%N; sleep 0.1"]
        before = time.time()
        proc = cluster.run(argv)
        jid = proc.stdout.strip().split(";")[0]
        if proc.returncode != 0 or not jid.isdigit():
            run.problems.append(f"sbatch {' '.join(spec.args())} failed: {proc.stderr.strip()[:200]}")
            continue
        run.submitted[jid] = before
    deadline = time.time() + drain_s
    while True:
        known = cluster.jobs()
        active = [j for j in run.submitted if known.get(j, {}).get("JobState") in ACTIVE]
        if not active or time.time() > deadline:
            break
        time.sleep(0.5)
    run.seconds = time.time() - t0
    run.records = {j: known.get(j, {}) for j in run.submitted}
    for jid, rec in run.records.items():
        state = rec.get("JobState", "(forgotten by Slurm)")
        if state != "COMPLETED" or rec.get("ExitCode") != "0:0":
            run.problems.append(f"job {jid}: {state} exit {rec.get('ExitCode')} reason {rec.get('Reason')} "
                                f"admin comment {rec.get('AdminComment', '')[:120]!r}")
        path = out / f"{jid}.out"
        try:
            run.started[jid] = float(path.read_text(encoding="utf-8").split()[0])
        except (OSError, ValueError, IndexError):
            run.problems.append(f"job {jid}: no start time in {path}")
    if active:
        cluster.run(["scancel", *active])  # bounded run: do not leave our jobs behind
        run.problems.append(f"{len(active)} job(s) still pending/running after {drain_s:g} s: cancelled {active[:10]}")
    return run


def accrue_delays(run: Run) -> list[float]:
    """Seconds from SubmitTime to AccrueTime of each job (scontrol's local-time stamps)."""
    from datetime import datetime

    out = []
    for rec in run.records.values():
        try:
            out.append((datetime.fromisoformat(rec["AccrueTime"]) - datetime.fromisoformat(rec["SubmitTime"]))
                       .total_seconds())
        except (KeyError, ValueError):
            continue
    return sorted(out)


def waited_on_purpose(db_url: str) -> set[str]:
    """Jobs the placer kept waiting for better GPUs (its audit's `waiting` records)."""
    from sqlalchemy import select

    from pal_slurm.db.engine import make_engine, session_scope
    from pal_slurm.db.models import Placement

    with session_scope(make_engine(db_url)) as session:
        return set(session.scalars(select(Placement.slurm_job_id).where(Placement.outcome == "waiting")))


def summary(run: Run, skip: set[str] = frozenset()) -> str:  # type: ignore[assignment]
    d = sorted(run.started[j] - t for j, t in run.submitted.items() if j in run.started and j not in skip)
    if not d:
        return f"{run.name}: no delays measured"
    p90 = d[min(len(d) - 1, round(0.9 * (len(d) - 1)))]
    return (f"{run.name:<9} jobs {len(run.submitted):>3} started {len(run.started):>3}  delay submit->start: "
            f"median {statistics.median(d):.2f} s  p90 {p90:.2f} s  max {d[-1]:.2f} s  (run {run.seconds:.0f} s)")


def pal_outcomes(run: Run) -> str:
    counts: dict[str, int] = {}
    for rec in run.records.values():
        tag = Tag.parse(rec.get("AdminComment", ""))
        key = ("untouched" if tag is None else "placed by pal" if tag.placed else
               "released unchanged: " + tag.note[:60] if tag.head == RELEASED_UNCHANGED else
               "held tag left" if tag.held else tag.head)
        counts[key] = counts.get(key, 0) + 1
    return ", ".join(f"{k}: {v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))


@dataclass
class PalRuns:
    """Runs (b) and (d), with the placer on, and what the placer left: its audit database, its
    exit status, its log."""

    on: Run
    ends: EndsRun
    db_url: str
    rc: int | None
    output: str
    log: Path


def run(args: argparse.Namespace) -> int:
    """args: bench/placer_latency.py's options."""
    cluster = usable_cluster()
    print(f"cluster {cluster.dir}: {cluster.sched_config()}")
    specs = job_list(args.jobs, args.seed)
    mix = {c: sum(1 for s in specs if s.cls == c) for c in CLASSES}
    print(f"{len(specs)} jobs, {sum(s.gpus for s in specs)} GPU requests in all (1-4 each; classes {mix}), "
          f"submitted at {args.rate:g}/s to 16 GPUs, each `date +%s.%N; sleep 0.1`")
    with tempfile.TemporaryDirectory(prefix="pal-latency-", dir=cluster.dir) as tmpdir:
        tmp = Path(tmpdir)
        off = one_run(cluster, "(a) off", specs, args.rate, args.drain_timeout, tmp / "off")
        print(summary(off))
        ends_off = ends_run(cluster, "(c) off", args.drain_timeout, tmp / "ends-off")
        print(ends_summary(ends_off))
        pal = pal_runs(cluster, args, specs, tmp)
        waited = waited_on_purpose(pal.db_url) & set(pal.on.submitted)
        print_pal_figures(off, pal, waited)
        leftover = [j for j, r in cluster.jobs().items() if r.get("JobState") == "PENDING"
                    and (j in pal.on.submitted or j in pal.ends.records)]
        targets = check_targets(specs, (off, pal.on), (ends_off, pal.ends), leftover, waited)
    return targets.exit_status()


def usable_cluster() -> Cluster:
    """The test cluster, started; the run ends here (exit status 1, one line) when this process is
    not root, or another placer, test or job uses the cluster."""
    if os.geteuid() != 0:
        sys.exit("placer_latency: needs root (the test cluster runs slurmd as root)")
    cluster = Cluster()
    if not cluster.kill_switch.exists():
        sys.exit(f"placer_latency: the filter of the cluster in {cluster.dir} is on (no {cluster.kill_switch}): "
                 "another placer or test uses it; use your own PAL_TEST_SLURM_DIR/ports")
    busy = [j for j, r in cluster.jobs().items() if r.get("JobState") in ACTIVE]
    if busy:
        sys.exit(f"placer_latency: {len(busy)} job(s) already pending/running on the cluster in {cluster.dir} "
                 f"(e.g. {busy[:5]}); they would skew the figures")
    return cluster


def pal_runs(cluster: Cluster, args: argparse.Namespace, specs: list[JobSpec], tmp: Path) -> PalRuns:
    """(b) and (d): `pal placer` in the background, the filter on once its heartbeat is fresh; the
    filter off and the placer stopped afterwards, whatever happened."""
    db_url = make_db(tmp)
    # every class held (noise 0): the figures are the hold's, not of classes left to Slurm
    config = write_config(tmp, db_url, cluster.state_file, mode="enforce", interval=args.interval,
                          wake=not args.no_wake, noise=0.0)
    log_path = cluster.dir / "log" / "placer-latency.log"
    log_path.unlink(missing_ok=True)
    placer = PlacerProcess(config, cluster.env, log_path)
    try:
        try:
            wait_heartbeat(cluster.state_file, placer, timeout=60)
        except PalError as exc:  # the finally below still stops the placer and turns the filter off
            sys.exit(f"placer_latency: {exc}")
        cluster.kill_switch.unlink()
        time.sleep(2.2)  # the filter's state cache
        on = one_run(cluster, "(b) pal", specs, args.rate, args.drain_timeout, tmp / "pal")
        ends_on = ends_run(cluster, "(d) pal", args.drain_timeout, tmp / "ends-pal")
    finally:
        cluster.kill_switch.touch()
        rc = placer.stop()
    return PalRuns(on, ends_on, db_url, rc, placer.output(), log_path)


def print_pal_figures(off: Run, pal: PalRuns, waited: set[str]) -> None:
    """(b)'s delays without the jobs kept waiting on purpose, those apart, AccrueTime in both
    runs, what the placer did and its cycles; (d)'s delays."""
    on = pal.on
    print(summary(on, skip=waited))
    if waited:
        w = sorted(on.started[j] - on.submitted[j] for j in waited if j in on.started)
        print(f"    waited on purpose for better GPUs: {len(waited)} job(s), delay median "
              f"{statistics.median(w):.2f} s, max {w[-1]:.2f} s (not counted above)")
    else:
        print("    waited on purpose for better GPUs: none")
    for run in (off, on):
        a = accrue_delays(run)
        if a:
            print(f"    {run.name}: AccrueTime - SubmitTime median {statistics.median(a):.1f} s, "
                  f"max {a[-1]:.1f} s ({len(a)} jobs)")
    print(f"    pal outcomes: {pal_outcomes(on)}; placer exit status {pal.rc}, log {pal.log}")
    cycles = re.findall(r"cycle: .*; ([0-9.]+) s$", pal.output, flags=re.MULTILINE)
    if cycles:
        secs = sorted(float(c) for c in cycles)
        print(f"    placer cycles that changed jobs: {len(secs)}, median {statistics.median(secs):.3f} s, "
              f"max {secs[-1]:.3f} s")
    print(ends_summary(pal.ends))
    print(f"    (d) pal outcomes: {pal_outcomes(pal.ends)}")  # type: ignore[arg-type]


def check_targets(specs: list[JobSpec], runs: tuple[Run, Run], ends: tuple[EndsRun, EndsRun], leftover: list[str],
                  waited: set[str]) -> Targets:
    """Every job submitted and completed in each run, none left pending, and the two added delays."""
    targets = Targets()
    for run in runs:
        lost = len(specs) - len(run.submitted)
        print(f"{run.name}: submitted {len(run.submitted)}/{len(specs)}, completed "
              f"{sum(1 for r in run.records.values() if r.get('JobState') == 'COMPLETED')}, lost {lost}, "
              f"problems {len(run.problems)}")
        for p in run.problems[:10]:
            print(f"    {p}")
        targets.state(not run.problems and not lost,
                      f"{run.name}: every job submitted and completed ({lost} lost, {len(run.problems)} problems)")
    for er in ends:
        bad = [j for j, r in er.records.items() if r.get("JobState") != "COMPLETED"]
        print(f"{er.name}: {len(er.records)} jobs, not completed {len(bad)}, problems {len(er.problems)}")
        for p in er.problems[:10]:
            print(f"    {p}")
        targets.state(not er.problems and not bad,
                      f"{er.name}: every job completed ({len(bad)} not, {len(er.problems)} problems)")
    targets.state(not leftover, f"no job left pending after the runs ({len(leftover)}: {leftover[:10]})")
    (off, on), (ends_off, ends_on) = runs, ends
    if off.delays() and on.delays():
        mine = [on.started[j] - t for j, t in on.submitted.items() if j in on.started and j not in waited]
        theirs = [off.started[j] - t for j, t in off.submitted.items() if j in off.started]
        added = statistics.median(mine) - statistics.median(theirs)
        targets.check("added median delay submit->start (b - a)", added, "<", TARGET_S, "s")
    else:
        targets.state(False, "added median delay submit->start (b - a): not measured (no start times)")
    if ends_off.delays and ends_on.delays:
        added = statistics.median(ends_on.delays.values()) - statistics.median(ends_off.delays.values())
        targets.check("added median delay end->next start (d - c)", added, "<", END_TARGET_S, "s")
    else:
        targets.state(False, "added median delay end->next start (d - c): not measured (no end-to-start delays)")
    return targets
