#!/usr/bin/env python3
"""The start lead of replay results recorded before job records carried Slurm's StartTime,
measured from slurmctld's logs (pal_slurm/replay/start_lead.py says what the lead is).

For every stored arm result under OUT (`<trace>/rep<r>-seed<r>/<arm>.json`, as bench/replay.py
writes them), it matches the arm's calibration jobs (`<arm>/calibration/records`) and the
run's own jobs (`<arm>/records`) to the allocation messages of the given slurmctld logs (the
job id, allocated at most 10 s before the script started), and prints the median lead of
each: the calibrated one is what a run recorded today would have measured before the arm;
the run's own is shown beside it. With --write, each result whose calibration was matched
gets the calibrated lead as `latencies_s.start_lead_s` (and `start_lead_from` naming the
logs), so that `bench/replay.py --repredict` predicts it with the lead; a result that
already has a lead of its own is left as it is.

Arms run side by side on two clusters reuse job ids at the same moments: give each arm's
cluster its own invocation (`--arm slurm --log <cluster a's log>`, then `--arm pal ...`).

Usage: bench/start_lead.py OUT --log SLURMCTLD_LOG [--log ...] [--arm ARM] [--write] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def _records(directory: Path) -> list[dict]:
    out = []
    for f in sorted(directory.glob("*.json")):
        try:
            doc = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict) and "error" not in doc:
            out.append(doc)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="a replay's --out directory (or a directory holding several)")
    ap.add_argument("--log", action="append", type=Path, required=True,
                    help="a slurmctld log of the cluster(s) the results ran on (repeatable)")
    ap.add_argument("--arm", default=None, help="only the results of this arm (its cluster's logs given)")
    ap.add_argument("--write", action="store_true", help="store the calibrated lead in each result (see above)")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args()

    from pal_eval.replay.repeat import finite, save_result
    from pal_eval.replay.start_lead import allocation_times, lead_from_log

    if not args.out.is_dir():
        print(f"bench/start_lead.py: error: {args.out}: no such directory", file=sys.stderr)
        return 2
    allocs: dict[str, list[float]] = {}
    for log in args.log:
        try:
            with log.open(encoding="utf-8", errors="replace") as f:
                for job, times in allocation_times(f).items():
                    allocs.setdefault(job, []).extend(times)
        except OSError as exc:
            print(f"bench/start_lead.py: error: {log}: {exc.strerror or exc}", file=sys.stderr)
            return 2
    rows = []
    for path in sorted(args.out.glob("**/rep*-seed*/*.json")):
        try:
            result = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not isinstance(result, dict) or "arm" not in result or args.arm not in (None, result["arm"]):
            continue
        work = path.with_suffix("")
        cal, n_cal = lead_from_log(_records(work / "calibration" / "records"), allocs)
        own, n_own = lead_from_log(_records(work / "records"), allocs)
        lat = result.get("latencies_s") or {}
        row = {"result": str(path), "arm": result["arm"], "calibrated_lead_s": cal, "calibration_jobs": n_cal,
               "run_lead_s": own, "run_jobs": n_own, "stored_lead_s": lat.get("start_lead_s")}
        if args.write and cal is not None and lat and lat.get("start_lead_s") is None:
            result["latencies_s"] = {**lat, "start_lead_s": cal}
            result["start_lead_from"] = "slurmctld logs " + ", ".join(p.name for p in args.log)
            if own is not None:
                result["run_start_lead_s"] = own
            save_result(path, result)
            row["written"] = True
        rows.append(row)
    if args.json:
        print(json.dumps(finite(rows), indent=1))
        return 0
    if not rows:
        print(f"no replay results under {args.out}")
        return 1
    for r in rows:
        fmt = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
        print(f"{r['result']}: calibrated {fmt(r['calibrated_lead_s'])} s ({r['calibration_jobs']} jobs), "
              f"run {fmt(r['run_lead_s'])} s ({r['run_jobs']} jobs)"
              + (f", stored {fmt(r['stored_lead_s'])} s" if r["stored_lead_s"] is not None else "")
              + (" - written" if r.get("written") else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
