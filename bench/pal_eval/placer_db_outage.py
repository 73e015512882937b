"""The placer with its database black-holed, on the real test cluster (bench/placer_db_outage.py):
its cycles, its heartbeat, and whether any hold ran out mid-placement."""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pal_slurm.config import DatabaseConfig, PalConfig, PlacerConfig
from pal_slurm.db.engine import make_engine
from pal_slurm.demo.cluster_gpus import make_db
from pal_slurm.placer.service import build_placer
from pal_slurm.placer.tag import Tag
from pal_slurm.slurm.cli_backend import CliBackend
from pal_slurm.slurm.filter_state import heartbeat_age
from pal_slurm.slurm.tres import parse_tres


class Only:
    """The real backend, showing only this run's jobs (the cluster may have others)."""

    def __init__(self, inner: CliBackend, ids: set[str]) -> None:
        self.inner, self.ids, self.name = inner, ids, inner.name

    def __getattr__(self, attr: str):  # noqa: ANN204
        return getattr(self.inner, attr)

    def jobs(self, only=None):  # noqa: ANN001, ANN201
        return [j for j in self.inner.jobs(only) if j.job_id in self.ids]


def sbatch(args: list[str]) -> str:
    out = subprocess.run(["sbatch", "--parsable", "-J", "pal-db-outage", "-o", "/dev/null", *args],
                         capture_output=True, text=True, check=True, timeout=30).stdout
    return out.strip().split(";")[0]


@dataclass
class Observed:
    """What the run saw: each cycle's seconds with the database up and black-holed, the
    heartbeat's age after each, the jobs whose hold lapsed (why), the jobs' admin comments at the
    end, and the jobs submitted (id -> the GPU request)."""

    cycles_in: list[float] = field(default_factory=list)
    cycles_out: list[float] = field(default_factory=list)
    ages: list[float] = field(default_factory=list)
    lapsed: dict[str, str] = field(default_factory=dict)
    comments: dict[str, str] = field(default_factory=dict)
    submitted: dict[str, str] = field(default_factory=dict)


class Database:
    """The placer's database: a copy of the classified test database, or a port that accepts
    connections into its backlog and never answers (every connection costs the connect timeout)."""

    def __init__(self, url: str) -> None:
        self.hole = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.hole.bind(("127.0.0.1", 0))
        self.hole.listen(1)
        self.engines = {"good": make_engine(url, create=False),
                        "hole": make_engine(f"postgresql+psycopg://pal:x@127.0.0.1:{self.hole.getsockname()[1]}/pal",
                                            connect_timeout_s=10)}
        self.current = self.engines["good"]

    def black_holed(self, yes: bool) -> None:
        self.current = self.engines["hole" if yes else "good"]


def run(args: argparse.Namespace) -> int:
    """args: bench/placer_db_outage.py's options."""
    if not os.environ.get("SLURM_CONF") or shutil.which("sbatch") is None:
        print("placer_db_outage: needs the test cluster: eval \"$(tests/services/slurm-cluster.sh env)\"",
              file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="pal-db-outage-"))
    url = make_db(tmp)
    db = Database(url)
    cfg = PalConfig(database=DatabaseConfig(url=url), data_dir=tmp,
                    placer=PlacerConfig(mode="enforce", state_file=str(tmp / "filter-state"), hold_s=args.hold_s,
                                        classes_refresh_s=5.0, noise=0.0))
    p = build_placer(cfg, lambda: db.current, background_db=True)
    ids: set[str] = set()
    cli = CliBackend()
    p.backend = Only(cli, ids)  # type: ignore[assignment]
    p.prime(10)
    seen = Observed()
    try:
        outage_cycles(p, cli, ids, db, args, seen)
        drained(p, cli, ids, db)
        seen.comments = {j.job_id: j.admin_comment for j in cli.jobs(only=ids)}
    finally:
        subprocess.run(["scancel", *sorted(ids)], capture_output=True, check=False)
        db.hole.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return report(p, args, seen)


def outage_cycles(p: Any, cli: CliBackend, ids: set[str], db: Database, args: argparse.Namespace,
                  seen: Observed) -> None:
    """--seconds of cycles, a job submitted every --every seconds as the filter holds it, the
    database black-holed after --outage-after; each cycle timed and the running jobs checked."""
    t0 = time.monotonic()
    next_submit = t0
    while time.monotonic() - t0 < args.seconds:
        now = time.monotonic()
        outage = now - t0 >= args.outage_after
        db.black_holed(outage)
        if now >= next_submit:
            gres = ("gpu:1", "gpu:2")[len(seen.submitted) % 2]
            jobid = sbatch([f"--gres={gres}", f"--begin=now+{args.hold_s}", "--wrap", "sleep 2"])
            subprocess.run(["scontrol", "update", f"jobid={jobid}", "AdminComment=pal:held class=A src=default"],
                           check=True, capture_output=True, timeout=30)
            ids.add(jobid)
            seen.submitted[jobid] = f"gres:{gres}"
            next_submit = now + args.every
        report = p.cycle()
        (seen.cycles_out if outage else seen.cycles_in).append(report.seconds)
        seen.ages.append(heartbeat_age(p.cfg.state_file) or 0.0)
        check_running(cli, ids, seen)
        time.sleep(0.5)


def check_running(cli: CliBackend, ids: set[str], seen: Observed) -> None:
    """A running job still tagged held, or with another GPU count than it was submitted with,
    lapsed mid-placement."""
    for job in cli.jobs(only=ids):
        tag = Tag.parse(job.admin_comment)
        if job.running and tag is not None and tag.head.startswith("pal:held"):
            seen.lapsed[job.job_id] = "started while still tagged held"
        if job.running:
            want = parse_tres(seen.submitted[job.job_id]).gpu_items
            have = parse_tres(job.tres_per_node).gpu_items
            if sum(i.count for i in have) != sum(i.count for i in want):
                seen.lapsed[job.job_id] = f"started with {job.tres_per_node!r}, submitted {seen.submitted[job.job_id]}"


def drained(p: Any, cli: CliBackend, ids: set[str], db: Database) -> None:
    """The database back, cycles until no job is pending (at most 60 s)."""
    deadline = time.monotonic() + 60
    db.black_holed(False)
    while time.monotonic() < deadline:
        p.cycle()
        left = [j for j in cli.jobs(only=ids) if j.pending]
        if not left:
            break
        time.sleep(0.5)


def report(p: Any, args: argparse.Namespace, seen: Observed) -> int:
    """The figures and the targets: median cycle during the outage, no hold lapsed, every job placed."""
    for jobid, text in seen.comments.items():
        if "hold ended" in text:
            seen.lapsed[jobid] = text
    unplaced = sorted(j for j, text in seen.comments.items() if not text.startswith("pal: placed"))
    med = statistics.median(seen.cycles_out) if seen.cycles_out else float("nan")
    print(f"placer_db_outage: {len(seen.submitted)} jobs submitted, hold {args.hold_s} s; database black-holed after "
          f"{args.outage_after:g} s of {args.seconds:g} s")
    print(f"  cycles with the database up:  {len(seen.cycles_in)}, median {statistics.median(seen.cycles_in or [0]):.3f} s")
    print(f"  cycles with it black-holed:   {len(seen.cycles_out)}, median {med:.3f} s, "
          f"max {max(seen.cycles_out or [0]):.3f} s")
    print(f"  heartbeat age: max {max(seen.ages or [0]):.1f} s; database thread errors: "
          f"{p.runner.__self__.errors}")
    print(f"  holds lapsed mid-placement: {len(seen.lapsed)}; jobs not placed: {len(unplaced)}")
    missed = []
    if not seen.cycles_out or med >= args.target_s:
        missed.append(f"median cycle {med:.3f} s >= {args.target_s:g} s")
    if seen.lapsed:
        missed.append(f"{len(seen.lapsed)} hold(s) lapsed: {dict(list(seen.lapsed.items())[:3])}")
    if unplaced:
        missed.append(f"{len(unplaced)} job(s) not placed: {unplaced[:5]}")
    for m in missed:
        print(f"TARGET MISSED: {m}")
    return 1 if missed else 0
