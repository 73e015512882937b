#!/usr/bin/env python3
"""Time the placer's refresh of learned runtimes from an imported sacct history.

The placer re-reads its runtime history every `[placer] classes_refresh_s`, inside a cycle.
A busy site's 90 days are hundreds of thousands of finished jobs (`pal jobs import-history`),
so a full read and re-learning (`history_store.learned_from_history`) holds that cycle for as
long as it takes; the placer keeps a `HistoryReader` instead, which reads only the rows
imported since its last read. This prints both, on a real SQLite database (--db for another),
with --rows synthetic COMPLETED jobs over --keys (user, name) pairs spread over 80 days, then
after --more rows imported since; and checks that the reader's answer equals the full read's.

Target: a refresh without new imports under 0.1 s at 100,000 rows.

Usage: bench/history_refresh.py [--rows 100000] [--keys 6000] [--more 1000] [--db URL]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pal_slurm.db.engine import make_engine, session_scope  # noqa: E402
from pal_slurm.db.migrate import upgrade  # noqa: E402
from pal_slurm.db.models import JobHistory  # noqa: E402
from pal_slurm.jobs.history_store import HistoryReader, learned_from_history  # noqa: E402
from pal_slurm.jobs.runtimes import RuntimeRule  # noqa: E402


def rows(n: int, keys: int, now: datetime, rnd: random.Random, source: str, *, days: float) -> list[dict]:
    return [dict(source=source, slurm_job_id=str(i), user=f"u{i % 300}", name=f"job{i % (keys // 3 or 1)}",
                 started_at=now - timedelta(hours=rnd.uniform(1, days * 24)), elapsed_s=rnd.uniform(60, 36000),
                 state="COMPLETED", gpus=4, nodes=1, imported_at=now) for i in range(n)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--keys", type=int, default=6000, help="about this many (user, job name) pairs")
    ap.add_argument("--more", type=int, default=1000, help="rows imported between the second and third refresh")
    ap.add_argument("--db", default=None, help="database URL (default: a new SQLite file)")
    args = ap.parse_args()
    tmp = tempfile.TemporaryDirectory()
    url = args.db or f"sqlite:///{Path(tmp.name) / 'pal.db'}"
    engine = make_engine(url)
    upgrade(engine)
    now, rnd, rule = datetime.now(UTC), random.Random(1), RuntimeRule()
    with session_scope(engine) as s:
        s.execute(JobHistory.__table__.insert(), rows(args.rows, args.keys, now, rnd, "bench", days=80))
    reader = HistoryReader(rule)

    def timed(label: str) -> None:
        with session_scope(engine) as s:
            t = time.perf_counter()
            full = learned_from_history(s, rule, now)
            t_full = time.perf_counter() - t
            t = time.perf_counter()
            mine = dict(reader.read(s, now))
            t_reader = time.perf_counter() - t
        same = "same answer" if mine == full else "DIFFERENT ANSWER"
        print(f"{label:34s} full read {t_full:7.3f} s   placer's reader {t_reader:7.3f} s   "
              f"({len(mine)} keys learned, {same})")

    print(f"{args.rows} rows, {url.split(':', 1)[0]}")
    timed("first refresh (reader reads all)")
    timed("next refresh, nothing new")
    with session_scope(engine) as s:
        s.execute(JobHistory.__table__.insert(), rows(args.more, args.keys, now, rnd, "bench-2", days=1))
    timed(f"after {args.more} more rows")
    engine.dispose()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
