"""Plausibility checks of imported scores: one bad measurement must not move a fleet's factors.

A score is suspect when it is not finite, not positive, or more than `max_factor` times
off (either way) the running median of its group (GPU model x benchmark). Pure: records
and the group's already stored scores in, a verdict per record out; the store decides
whether a suspect is dropped (the default) or stored quarantined (`--keep-suspect`).

The running median, at the start of a file: a record is judged against the median of
every accepted score of its group that is stored or comes earlier in the file. While that
reference holds fewer than `MIN_REFERENCE` scores, the group's first `MIN_REFERENCE`
scores of the file are added to it (a look-ahead: the first rows are judged by their
neighbours too, and a planted value among them is one of five, so it cannot move the
median). A group with fewer than 3 scores in all is checked only for finite and positive:
with two values nobody can tell which one is off.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pal_slurm.ingest.records import ProfileRecord

__all__ = ["DEFAULT_MAX_FACTOR", "MIN_REFERENCE", "Suspect", "find_suspects"]

DEFAULT_MAX_FACTOR = 10.0
MIN_REFERENCE = 5  # scores a reference median is built from before it judges alone
_MIN_JUDGE = 3  # below this many scores in a group, only the absolute checks apply

Group = tuple[str, str]  # (GPU model, benchmark)


@dataclass(frozen=True, slots=True)
class Suspect:
    """A record that failed a check; `storable` is False for values no database can hold."""

    index: int  # position in the records given to find_suspects
    reason: str
    storable: bool


def _median(sorted_values: Sequence[float]) -> float:
    n = len(sorted_values)
    mid = n // 2
    return sorted_values[mid] if n % 2 else (sorted_values[mid - 1] + sorted_values[mid]) / 2


def _absolute(score: float) -> Suspect | None:
    if not math.isfinite(score):
        return Suspect(-1, f"score {score!r} is not a finite number", storable=False)
    if score <= 0:
        return Suspect(-1, f"score {score:g} is not positive", storable=True)
    return None


def find_suspects(
    records: Sequence[ProfileRecord],
    stored: Mapping[Group, Sequence[float]] | None = None,
    *,
    max_factor: float = DEFAULT_MAX_FACTOR,
    model_of: Mapping[int, str] | None = None,
) -> list[Suspect]:
    """The suspect records, in file order (see the module docstring for the rule).

    `stored`: scores already in the database per (model, benchmark) (quarantined ones left
    out); `model_of`: record index -> the model its GPU is stored as, where it differs from
    the record's. Runs in O(n log n) plus list inserts: the import stays fast.
    """
    if math.isnan(max_factor) or max_factor <= 1:
        raise ValueError(f"max_factor must be greater than 1, got {max_factor}")
    model_of = model_of or {}
    reference: dict[Group, list[float]] = {}  # stored + accepted so far, sorted
    start: dict[Group, list[float]] = {}  # stored + the file's first MIN_REFERENCE plausible scores
    taken: dict[Group, int] = {}  # how many of the file's scores `start` holds
    groups: list[Group] = []
    for i, rec in enumerate(records):
        g = (model_of.get(i) or rec.gpu.model or "", rec.benchmark)
        groups.append(g)
        if g not in reference:
            reference[g] = sorted(v for v in (stored or {}).get(g, ()) if math.isfinite(v) and v > 0)
            start[g], taken[g] = list(reference[g]), 0
        if _absolute(rec.score) is None and taken[g] < MIN_REFERENCE:
            start[g].append(rec.score)
            taken[g] += 1
    starts = {g: sorted(w) for g, w in start.items()}
    suspects: list[Suspect] = []
    for i, rec in enumerate(records):
        bad = _absolute(rec.score)
        if bad is not None:
            suspects.append(Suspect(i, bad.reason, bad.storable))
            continue
        g = groups[i]
        ref = reference[g]
        judge = ref if len(ref) >= MIN_REFERENCE else starts[g]
        if len(judge) >= _MIN_JUDGE:
            median = _median(judge)
            ratio = rec.score / median
            if ratio > max_factor or ratio < 1 / max_factor:
                # from whichever side is large: a subnormal score's ratio underflows to 0
                inv = median / rec.score
                if ratio > 1:
                    how = f"{ratio:.3g}x" if math.isfinite(ratio) else "beyond any multiple of"
                else:
                    how = f"1/{inv:.3g}" if math.isfinite(inv) else "a vanishing fraction of"
                suspects.append(Suspect(
                    i, f"score {rec.score:g} {rec.unit} is {how} the median {median:g} of {g[0]} {g[1]} "
                       f"(limit {max_factor:g}x either way)", storable=True))
                continue
        bisect.insort(ref, rec.score)
    return suspects
