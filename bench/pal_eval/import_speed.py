"""`pal profile import` of the four Longhorn CSVs, timed in-process and as a user runs it (bench/import_speed.py)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

from pal_eval.paths import REPO, longhorn
from pal_eval.targets import Targets

TARGET_S = 10.0

FILES = {"resnet50": "resnet", "bert": "bert", "pagerank": "pagerank", "sgemm": "sgemm"}


def run(args: argparse.Namespace) -> int:
    """args: bench/import_speed.py's options."""
    profiles = longhorn(args.artifact)
    if not profiles.is_dir():
        print(f"import_speed: no artifact data at {profiles} (use --artifact DIR)", file=sys.stderr)
        return 2

    from pal_slurm.db import migrate
    from pal_slurm.db.engine import make_engine, session_scope
    from pal_slurm.db.measurement_store import import_records
    from pal_slurm.ingest.artifact_csv import parse_file as parse_artifact_file

    with tempfile.TemporaryDirectory() as tmp:
        url = args.db or f"sqlite:///{tmp}/bench.db"
        engine = make_engine(url)
        migrate.upgrade(engine)
        total_rows, t_parse, t_db = 0, 0.0, 0.0
        for bench, stem in FILES.items():
            path = profiles / f"{stem}-longhorn-agg.csv"
            t0 = time.perf_counter()
            recs = parse_artifact_file(path, benchmark=bench, model="V100")
            t1 = time.perf_counter()
            with session_scope(engine) as s:
                res = import_records(s, recs)
            t2 = time.perf_counter()
            total_rows += len(recs)
            t_parse += t1 - t0
            t_db += t2 - t1
            print(f"{path.name:28s} {len(recs):6d} runs  parse {t1 - t0:6.2f} s  db {t2 - t1:6.2f} s  added {res.added}")
        print(f"in-process total: {total_rows} runs in {t_parse + t_db:.2f} s "
              f"(parse {t_parse:.2f} s, db {t_db:.2f} s) -> {total_rows / (t_parse + t_db):,.0f} runs/s")
        engine.dispose()

        url2 = args.db or f"sqlite:///{tmp}/bench-cli.db"
        pal = [sys.executable, "-m", "pal_slurm", "--db", url2]
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        subprocess.run([*pal, "db", "upgrade"], check=True, capture_output=True, env=env)
        t0 = time.perf_counter()
        for bench, stem in FILES.items():
            subprocess.run([*pal, "profile", "import", "--input-format", "pal-artifact", "--benchmark", bench + "-cli",
                            "--model", "V100", str(profiles / f"{stem}-longhorn-agg.csv")],
                           check=True, capture_output=True, env=env)
        t_cli = time.perf_counter() - t0
        print(f"CLI (4 x `pal profile import`, interpreter start-up included): {t_cli:.2f} s")
    targets = Targets()
    targets.check("4 x `pal profile import` (CLI)", t_cli, "<", args.target_s, "s", digits=2)
    return targets.exit_status()
