"""Repetitions of a replay: one result file per trace x repetition x arm, and their means.

Why: a scheduler is chaotic (pal_slurm.simulate.shake), so one real run per arm is one draw
from a wide band. Each repetition replays the trace shaken from its own recorded seed
(repetition r uses seed r: arrivals moved by up to a few trace minutes), and the report
claims the mean over the repetitions with its range. A real arm takes many minutes, so each
arm x repetition writes its result the moment it finishes and a rerun with the same settings
skips what is done: an evaluation can be completed over several sittings. A repetition whose
arm did not complete (a job died or overran, the run was interrupted) is reported and left
out of the mean, never averaged in.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pal_slurm.atomic_write import write_atomically

__all__ = ["Aggregate", "aggregate", "earlier_runs", "export_path", "fingerprint", "finite", "load_done", "ratio_range",
           "result_path", "save_result", "save_export"]

#: the figures averaged over repetitions (real and predicted, per arm)
FIGURES = ("avg_jct_s", "median_jct_s", "p99_jct_s", "makespan_s", "utilization", "tax_share")


def fingerprint(settings: Mapping[str, Any]) -> str:
    """A short hash of everything that makes two results comparable (trace, cluster,
    compression, fleet, policy, shaking...): a stored result with another one is not reused."""
    text = json.dumps(settings, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def result_path(out: Path, trace: str, rep: int, seed: int, arm: str) -> Path:
    """Where one trace x repetition x arm result lives."""
    return out / trace / f"rep{rep}-seed{seed}" / f"{arm}.json"


def export_path(result: Path) -> Path:
    """Where the `sacct -P` stand-in of one arm x repetition's finished jobs lives (beside its result)."""
    return result.with_suffix(".sacct")


def save_export(result_file: Path, result: Mapping[str, Any], user: str) -> Path | None:
    """Write the arm's finished jobs as an sacct export beside its result (pal_eval.replay.history);
    None, and nothing written, when the arm did not complete (its runtimes are not a run's) or
    it cannot be exported (a result without a start time and no file time to infer it from)."""
    from pal_slurm.errors import PalError
    from pal_eval.replay.history import arm_export

    if not result.get("complete"):
        return None
    run = result.get("run") or {}
    try:  # a result from before t0 was stored: the run began its wall time before the file was written
        fallback = result_file.stat().st_mtime - float(run.get("wall_s") or 0.0)
    except OSError:
        fallback = None
    try:
        text = arm_export(result, user=user, t0_fallback=fallback)
    except PalError:
        return None
    path = export_path(result_file)
    write_atomically(path, text)
    return path


def earlier_runs(results: Mapping[str, Sequence[Mapping[str, Any]]], rep: int,
                 learner: str = "pal+history") -> list[tuple[int, str]]:
    """(repetition, arm) of the stored complete results the `learner` arm of repetition `rep`
    learns from: every other arm's of repetitions up to `rep` that exist when it starts (the
    arms run before it in this repetition, and all of earlier ones: other shake seeds). Never
    the learner's own results, so no run learns from itself or from another learning run."""
    return sorted((int(r["rep"]), arm) for arm, rs in results.items() if arm != learner
                  for r in rs if r.get("complete") and int(r.get("rep", 0)) <= rep)


def save_result(path: Path, result: Mapping[str, Any]) -> None:
    """Write atomically (temporary file + rename), so an interrupted write leaves no half result."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, json.dumps(finite(result), indent=1, default=str, allow_nan=False))


def load_done(path: Path, fp: str) -> dict[str, Any] | None:
    """The stored result at `path` when it was made with the same settings and its arm
    completed; None otherwise (missing, unreadable, other settings, or a failed run: those
    are run again)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("fingerprint") != fp or not doc.get("complete"):
        return None
    return doc


@dataclass(frozen=True)
class Aggregate:
    """One arm's figures over its repetitions: mean, min and max of each, from the complete ones."""

    arm: str
    reps: tuple[int, ...]          # repetitions averaged
    failed: tuple[int, ...]        # repetitions left out (incomplete)
    real: Mapping[str, tuple[float, float, float]] = field(default_factory=dict)       # figure -> mean, lo, hi
    predicted: Mapping[str, tuple[float, float, float]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        def spread(d: Mapping[str, tuple[float, float, float]]) -> dict[str, dict[str, float]]:
            return {k: {"mean": m, "min": lo, "max": hi} for k, (m, lo, hi) in d.items()}

        return {"arm": self.arm, "repetitions": list(self.reps), "failed": list(self.failed),
                "real": spread(self.real), "predicted": spread(self.predicted)}


def _stats(values: Sequence[float]) -> tuple[float, float, float]:
    vals = [v for v in values if v is not None and math.isfinite(v)]
    if not vals:
        return (math.nan, math.nan, math.nan)
    return (sum(vals) / len(vals), min(vals), max(vals))


def aggregate(arm: str, results: Sequence[Mapping[str, Any]]) -> Aggregate:
    """Mean and range of each figure over `results` (one arm's stored results, any order);
    an incomplete one is counted in `failed` and nowhere else."""
    good = [r for r in results if r.get("complete") and r.get("real")]
    failed = tuple(sorted(int(r.get("rep", 0)) for r in results if not (r.get("complete") and r.get("real"))))
    real = {f: _stats([r["real"].get(f) for r in good]) for f in FIGURES}
    pred = {f: _stats([(r.get("predicted") or {}).get(f) for r in good]) for f in FIGURES}
    return Aggregate(arm=arm, reps=tuple(sorted(int(r.get("rep", 0)) for r in good)), failed=failed,
                     real=real, predicted=pred)


def ratio_range(pal: Sequence[Mapping[str, Any]], slurm: Sequence[Mapping[str, Any]], figure: str,
                kind: str = "real") -> tuple[float, float, float, int]:
    """pal / slurm for `figure`: the ratio of the means, and the min and max of the per-repetition
    ratios, over the repetitions both arms completed; (nan, nan, nan, 0) when there are none."""
    by_rep = {int(r["rep"]): r for r in slurm if r.get("complete") and r.get(kind)}
    pairs = [(float(p[kind][figure]), float(by_rep[int(p["rep"])][kind][figure])) for p in pal
             if p.get("complete") and p.get(kind) and int(p["rep"]) in by_rep]
    pairs = [(a, b) for a, b in pairs if math.isfinite(a) and math.isfinite(b) and b > 0]
    if not pairs:
        return (math.nan, math.nan, math.nan, 0)
    ratios = [a / b for a, b in pairs]
    mean_ratio = (sum(a for a, _ in pairs) / len(pairs)) / (sum(b for _, b in pairs) / len(pairs))
    return (mean_ratio, min(ratios), max(ratios), len(pairs))


def finite(o: Any) -> Any:
    """`o` with every non-finite float as None (valid JSON; a missing figure reads as null)."""
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    if isinstance(o, Mapping):
        return {str(k): finite(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [finite(v) for v in o]
    return o
