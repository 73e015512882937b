#!/usr/bin/env python3
"""Time the placer's refresh of learned runtimes from an imported sacct history.

The placer re-reads its runtime history every `[placer] classes_refresh_s`, inside a cycle.
A busy site's 90 days are hundreds of thousands of finished jobs (`pal jobs import-history`),
so a full read and re-learning (`history_store.learned_from_history`) holds that cycle for as
long as it takes; the placer keeps a `HistoryReader` instead, which reads only the rows
imported since its last read. This prints both, on a real SQLite database (--db for another),
with --rows synthetic COMPLETED jobs over --keys (user, name) pairs spread over 80 days, then
after --more rows imported since; and checks that the reader's answer equals the full read's.

Targets: the placer's refresh without new imports (its reader's second read) under 0.1 s at
100,000 rows, and the reader's answer equal to the full read's at every refresh. Exit status 1,
with a "TARGET MISSED" line, when either is missed.

Usage: bench/history_refresh.py [--rows 100000] [--keys 6000] [--more 1000] [--db URL] [--target-s 0.1]
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
from pal_slurm.db.history_store import HistoryReader, learned_from_history  # noqa: E402
from pal_slurm.jobs.runtimes import RuntimeRule  # noqa: E402
from targets import Targets  # noqa: E402

TARGET_S = 0.1


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
    ap.add_argument("--target-s", type=float, default=TARGET_S,
                    help=f"the target: a refresh without new imports, seconds [{TARGET_S:g}]")
    args = ap.parse_args()
    tmp = tempfile.TemporaryDirectory()
    url = args.db or f"sqlite:///{Path(tmp.name) / 'pal.db'}"
    engine = make_engine(url)
    upgrade(engine)
    now, rnd, rule = datetime.now(UTC), random.Random(1), RuntimeRule()
    with session_scope(engine) as s:
        s.execute(JobHistory.__table__.insert(), rows(args.rows, args.keys, now, rnd, "bench", days=80))
    reader = HistoryReader(rule)

    def timed(label: str) -> tuple[float, bool]:
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
        return t_reader, mine == full

    print(f"{args.rows} rows, {url.split(':', 1)[0]}")
    _t, same_first = timed("first refresh (reader reads all)")
    t_nothing_new, same_next = timed("next refresh, nothing new")
    with session_scope(engine) as s:
        s.execute(JobHistory.__table__.insert(), rows(args.more, args.keys, now, rnd, "bench-2", days=1))
    _t, same_more = timed(f"after {args.more} more rows")
    engine.dispose()
    targets = Targets()
    targets.check(f"the placer's refresh without new imports at {args.rows} rows", t_nothing_new, "<", args.target_s,
                  "s")
    wrong = [n for n, same in (("first", same_first), ("nothing new", same_next), ("more rows", same_more)) if not same]
    targets.state(not wrong, "the reader's answer equals the full read's at every refresh"
                  + (f" (differs: {', '.join(wrong)})" if wrong else ""))
    return targets.exit_status()


if __name__ == "__main__":
    raise SystemExit(main())
