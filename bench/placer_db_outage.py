#!/usr/bin/env python3
"""The placer with its database black-holed, on the real test cluster: cycles stay short, the
heartbeat fresh, and no hold runs out mid-placement.

What runs: the daemon's Placer as `pal placer` builds it (`build_placer(background_db=True)`:
every database read and write on its own thread) with the CLI backend against the test
cluster's slurmctld (tests/services/slurm-cluster.sh). Its database is a copy of the classified
test database until `--outage-after` seconds, then a TCP port that accepts connections into its
backlog and never answers (a database host behind a firewall that drops packets): every
connection attempt costs the configured connect timeout (10 s). Jobs are submitted as the submit
filter holds them (`--begin=now+HOLD`, `AdminComment=pal:held class=A`), one every `--every`
seconds, with a short hold (`--hold-s`, 20) so that the begin times really run out unless the
placer moves them. Each cycle's wall time and the heartbeat's age are measured in this process.

Targets (one run): median cycle under 2 s during the outage; no hold lapsed mid-placement (a job
whose begin time passed while it was still tagged `pal:held`, or that started with another GPU
request than its user's or the placement's whole one); every job placed. Exit 1 when one is
missed, 2 when the cluster cannot be used.

Usage: bench/placer_db_outage.py [--seconds 60] [--outage-after 10] [--every 2] [--hold-s 20]
       (with the test cluster's environment: eval "$(tests/services/slurm-cluster.sh env)")
"""

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
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pal_slurm.config import DatabaseConfig, PalConfig, PlacerConfig  # noqa: E402
from pal_slurm.db.engine import make_engine  # noqa: E402
from pal_slurm.demo.on_slurm import make_db  # noqa: E402
from pal_slurm.placer.service import build_placer  # noqa: E402
from pal_slurm.placer.tag import Tag  # noqa: E402
from pal_slurm.slurm.backend import CliBackend  # noqa: E402
from pal_slurm.slurm.filter_state import heartbeat_age  # noqa: E402
from pal_slurm.slurm.tres import parse_tres  # noqa: E402


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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="how long the run lasts")
    ap.add_argument("--outage-after", type=float, default=10.0, help="seconds before the database is black-holed")
    ap.add_argument("--every", type=float, default=2.0, help="seconds between submissions")
    ap.add_argument("--hold-s", type=int, default=20, help="the filter's hold (begin time ahead), seconds")
    ap.add_argument("--target-s", type=float, default=2.0, help="median cycle target during the outage")
    args = ap.parse_args()
    if not os.environ.get("SLURM_CONF") or shutil.which("sbatch") is None:
        print("placer_db_outage: needs the test cluster: eval \"$(tests/services/slurm-cluster.sh env)\"",
              file=sys.stderr)
        return 2

    tmp = Path(tempfile.mkdtemp(prefix="pal-db-outage-"))
    url = make_db(tmp)
    hole = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    hole.bind(("127.0.0.1", 0))
    hole.listen(1)
    engines = {"good": make_engine(url, create=False),
               "hole": make_engine(f"postgresql+psycopg://pal:x@127.0.0.1:{hole.getsockname()[1]}/pal",
                                   connect_timeout_s=10)}
    current = {"engine": engines["good"]}
    cfg = PalConfig(database=DatabaseConfig(url=url), data_dir=tmp,
                    placer=PlacerConfig(mode="enforce", state_file=str(tmp / "filter-state"), hold_s=args.hold_s,
                                        classes_refresh_s=5.0, noise=0.0))
    p = build_placer(cfg, lambda: current["engine"], background_db=True)
    ids: set[str] = set()
    cli = CliBackend()
    p.backend = Only(cli, ids)  # type: ignore[assignment]
    p.prime(10)
    submitted: dict[str, str] = {}
    cycles_out: list[float] = []
    cycles_in: list[float] = []
    ages: list[float] = []
    lapsed: dict[str, str] = {}
    t0 = time.monotonic()
    next_submit = t0
    n = 0
    try:
        while time.monotonic() - t0 < args.seconds:
            now = time.monotonic()
            outage = now - t0 >= args.outage_after
            current["engine"] = engines["hole" if outage else "good"]
            if now >= next_submit:
                gres = ("gpu:1", "gpu:2")[n % 2]
                jobid = sbatch([f"--gres={gres}", f"--begin=now+{args.hold_s}", "--wrap", "sleep 2"])
                subprocess.run(["scontrol", "update", f"jobid={jobid}", "AdminComment=pal:held class=A src=default"],
                               check=True, capture_output=True, timeout=30)
                ids.add(jobid)
                submitted[jobid] = f"gres:{gres}"
                n += 1
                next_submit = now + args.every
            report = p.cycle()
            (cycles_out if outage else cycles_in).append(report.seconds)
            ages.append(heartbeat_age(p.cfg.state_file) or 0.0)
            for job in cli.jobs(only=ids):
                tag = Tag.parse(job.admin_comment)
                if job.running and tag is not None and tag.head.startswith("pal:held"):
                    lapsed[job.job_id] = "started while still tagged held"
                if job.running:
                    want = parse_tres(submitted[job.job_id]).gpu_items
                    have = parse_tres(job.tres_per_node).gpu_items
                    if sum(i.count for i in have) != sum(i.count for i in want):
                        lapsed[job.job_id] = f"started with {job.tres_per_node!r}, submitted {submitted[job.job_id]}"
            time.sleep(0.5)
        deadline = time.monotonic() + 60
        current["engine"] = engines["good"]
        while time.monotonic() < deadline:
            report = p.cycle()
            left = [j for j in cli.jobs(only=ids) if j.pending]
            if not left:
                break
            time.sleep(0.5)
        comments = {j.job_id: j.admin_comment for j in cli.jobs(only=ids)}
    finally:
        subprocess.run(["scancel", *sorted(ids)], capture_output=True, check=False)
        hole.close()
        shutil.rmtree(tmp, ignore_errors=True)
    for jobid, text in comments.items():
        if "hold ended" in text:
            lapsed[jobid] = text
    unplaced = sorted(j for j, text in comments.items() if not text.startswith("pal: placed"))
    med = statistics.median(cycles_out) if cycles_out else float("nan")
    print(f"placer_db_outage: {n} jobs submitted, hold {args.hold_s} s; database black-holed after "
          f"{args.outage_after:g} s of {args.seconds:g} s")
    print(f"  cycles with the database up:  {len(cycles_in)}, median {statistics.median(cycles_in or [0]):.3f} s")
    print(f"  cycles with it black-holed:   {len(cycles_out)}, median {med:.3f} s, max {max(cycles_out or [0]):.3f} s")
    print(f"  heartbeat age: max {max(ages or [0]):.1f} s; database thread errors: "
          f"{p.runner.__self__.errors}")  # type: ignore[union-attr]
    print(f"  holds lapsed mid-placement: {len(lapsed)}; jobs not placed: {len(unplaced)}")
    missed = []
    if not cycles_out or med >= args.target_s:
        missed.append(f"median cycle {med:.3f} s >= {args.target_s:g} s")
    if lapsed:
        missed.append(f"{len(lapsed)} hold(s) lapsed: {dict(list(lapsed.items())[:3])}")
    if unplaced:
        missed.append(f"{len(unplaced)} job(s) not placed: {unplaced[:5]}")
    for m in missed:
        print(f"TARGET MISSED: {m}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
