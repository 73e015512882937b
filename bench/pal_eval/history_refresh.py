"""The placer's refresh of learned runtimes from an imported sacct history, timed (bench/history_refresh.py)."""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pal_eval.targets import Targets
from pal_slurm.db.engine import make_engine, session_scope
from pal_slurm.db.migrate import upgrade
from pal_slurm.db.models import JobHistory
from pal_slurm.db.history_store import HistoryReader, learned_from_history
from pal_slurm.jobs.runtimes import RuntimeRule

TARGET_S = 0.1


def rows(n: int, keys: int, now: datetime, rnd: random.Random, source: str, *, days: float) -> list[dict]:
    return [dict(source=source, slurm_job_id=str(i), user=f"u{i % 300}", name=f"job{i % (keys // 3 or 1)}",
                 started_at=now - timedelta(hours=rnd.uniform(1, days * 24)), elapsed_s=rnd.uniform(60, 36000),
                 state="COMPLETED", gpus=4, nodes=1, imported_at=now) for i in range(n)]


def run(args: argparse.Namespace) -> int:
    """args: bench/history_refresh.py's options."""
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
