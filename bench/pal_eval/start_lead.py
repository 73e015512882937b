"""The start lead of stored replay results, measured from slurmctld's logs (bench/start_lead.py;
what the lead is: pal_eval/replay/start_lead.py)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from pal_eval.replay.repeat import finite, save_result
from pal_eval.replay.start_lead import allocation_times, lead_from_log


def _json_docs(paths: Iterable[Path]) -> Iterator[tuple[Path, dict[str, Any]]]:
    """Each file that holds a JSON object, with it; the others passed over."""
    for path in paths:
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict):
            yield path, doc


def _records(directory: Path) -> list[dict]:
    """The job records of a run's record directory, those of jobs that failed left out."""
    return [doc for _path, doc in _json_docs(sorted(directory.glob("*.json"))) if "error" not in doc]


def run(out: Path, logs: list[Path], arm: str | None, write: bool, as_json: bool) -> int:
    """Each stored arm result under `out` (of `arm`, or every arm): its calibration's and its
    run's lead from the allocations `logs` name; `write` stores the calibrated one."""
    if not out.is_dir():
        print(f"bench/start_lead.py: error: {out}: no such directory", file=sys.stderr)
        return 2
    allocs = allocations(logs)
    if isinstance(allocs, str):
        print(f"bench/start_lead.py: error: {allocs}", file=sys.stderr)
        return 2
    rows = []
    for path, result in _json_docs(sorted(out.glob("**/rep*-seed*/*.json"))):
        if "arm" not in result or arm not in (None, result["arm"]):
            continue
        rows.append(result_lead(path, result, allocs, logs if write else None))
    if as_json:
        print(json.dumps(finite(rows), indent=1))
        return 0
    if not rows:
        print(f"no replay results under {out}")
        return 1
    for r in rows:
        fmt = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
        print(f"{r['result']}: calibrated {fmt(r['calibrated_lead_s'])} s ({r['calibration_jobs']} jobs), "
              f"run {fmt(r['run_lead_s'])} s ({r['run_jobs']} jobs)"
              + (f", stored {fmt(r['stored_lead_s'])} s" if r["stored_lead_s"] is not None else "")
              + (" - written" if r.get("written") else ""))
    return 0


def allocations(logs: list[Path]) -> dict[str, list[float]] | str:
    """Slurm job id -> every allocation time the logs name, or which log could not be read."""
    allocs: dict[str, list[float]] = {}
    for log in logs:
        try:
            with log.open(encoding="utf-8", errors="replace") as f:
                for job, times in allocation_times(f).items():
                    allocs.setdefault(job, []).extend(times)
        except OSError as exc:
            return f"{log}: {exc.strerror or exc}"
    return allocs


def result_lead(path: Path, result: dict[str, Any], allocs: dict[str, list[float]],
                write_from: list[Path] | None) -> dict[str, Any]:
    """One stored result's row; with `write_from` (the logs), the calibrated lead stored in a
    result that has none of its own."""
    work = path.with_suffix("")
    cal, n_cal = lead_from_log(_records(work / "calibration" / "records"), allocs)
    own, n_own = lead_from_log(_records(work / "records"), allocs)
    lat = result.get("latencies_s") or {}
    row = {"result": str(path), "arm": result["arm"], "calibrated_lead_s": cal, "calibration_jobs": n_cal,
           "run_lead_s": own, "run_jobs": n_own, "stored_lead_s": lat.get("start_lead_s")}
    if write_from is not None and cal is not None and lat and lat.get("start_lead_s") is None:
        result["latencies_s"] = {**lat, "start_lead_s": cal}
        result["start_lead_from"] = "slurmctld logs " + ", ".join(p.name for p in write_from)
        if own is not None:
            result["run_start_lead_s"] = own
        save_result(path, result)
        row["written"] = True
    return row
