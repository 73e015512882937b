"""Repetitions of the real replay (pal_eval.replay.repeat) and its fleets (replay.fleet.draw_fleet):
results stored per trace x repetition x arm and reused only with the same settings, failed
repetitions left out of the mean, pal / slurm over the repetitions both arms completed."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from pal_eval.replay import repeat
from pal_eval.replay.fleet import FLEETS, draw_fleet
from pal_slurm.errors import InputError
from pal_slurm.simulate.artifact_draw import load_artifact_profiles

from conftest import ARTIFACT_DIR  # noqa: E402 - the PAL artifact data, shipped in tests/data

ARTIFACT = ARTIFACT_DIR / "variability" / "longhorn"


def result(rep: int, avg: float, makespan: float, *, complete: bool = True, fp: str = "f") -> dict:
    real = {f: 1.0 for f in repeat.FIGURES} | {"avg_jct_s": avg, "makespan_s": makespan}
    return {"rep": rep, "complete": complete, "fingerprint": fp, "real": real if complete else real,
            "predicted": real | {"avg_jct_s": avg * 1.1}}


def test_a_result_is_reused_only_with_the_same_settings_and_only_when_complete(tmp_path: Path) -> None:
    fp = repeat.fingerprint({"trace": "w1", "k": 10, "arm": "pal"})
    assert fp == repeat.fingerprint({"arm": "pal", "k": 10, "trace": "w1"})  # key order does not matter
    assert fp != repeat.fingerprint({"trace": "w1", "k": 60, "arm": "pal"})
    path = repeat.result_path(tmp_path, "w1", 2, 2, "pal")
    assert path == tmp_path / "w1" / "rep2-seed2" / "pal.json"
    assert repeat.load_done(path, fp) is None                      # nothing yet
    repeat.save_result(path, result(2, 5.0, 9.0, fp=fp) | {"diff": math.nan})
    assert json.loads(path.read_text())["diff"] is None            # valid JSON: NaN written as null
    assert repeat.load_done(path, fp)["rep"] == 2
    assert repeat.load_done(path, "other") is None                 # other settings: run again
    repeat.save_result(path, result(2, 5.0, 9.0, complete=False, fp=fp))
    assert repeat.load_done(path, fp) is None                      # a failed run is run again
    path.write_text("{not json")
    assert repeat.load_done(path, fp) is None
    assert not list(path.parent.glob(".*"))                         # no temporary files left


def test_a_failed_repetition_is_reported_and_left_out_of_the_mean() -> None:
    agg = repeat.aggregate("pal", [result(1, 4.0, 10.0), result(2, 99.0, 99.0, complete=False), result(3, 6.0, 12.0)])
    assert agg.reps == (1, 3) and agg.failed == (2,)
    assert agg.real["avg_jct_s"] == (5.0, 4.0, 6.0)
    assert agg.real["makespan_s"] == (11.0, 10.0, 12.0)
    assert agg.predicted["avg_jct_s"][0] == pytest.approx(5.5)
    doc = agg.as_dict()
    assert doc["failed"] == [2] and doc["real"]["avg_jct_s"] == {"mean": 5.0, "min": 4.0, "max": 6.0}
    none = repeat.aggregate("slurm", [result(1, 4.0, 1.0, complete=False)])
    assert none.reps == () and all(math.isnan(v) for v in none.real["avg_jct_s"])


def test_pal_over_slurm_pairs_repetitions_both_arms_completed() -> None:
    slurm = [result(1, 10.0, 20.0), result(2, 8.0, 20.0), result(3, 10.0, 20.0)]
    pal = [result(1, 9.0, 18.0), result(2, 8.0, 19.0), result(3, 1.0, 1.0, complete=False)]
    mean, lo, hi, n = repeat.ratio_range(pal, slurm, "avg_jct_s")
    assert n == 2
    assert mean == pytest.approx(8.5 / 9.0)
    assert (lo, hi) == (pytest.approx(0.9), pytest.approx(1.0))
    assert repeat.ratio_range(pal, [], "avg_jct_s")[3] == 0


@pytest.mark.artifact
def test_the_three_fleets_differ_as_their_names_say_and_are_reproducible() -> None:
    profiles = load_artifact_profiles(ARTIFACT)
    spread = {}
    for kind in FLEETS:
        gpus = draw_fleet(kind, profiles, 16, 4, 42)
        assert len(gpus) == 64
        assert [g.perfvar for g in gpus] == [g.perfvar for g in draw_fleet(kind, profiles, 16, 4, 42)]
        a = [g.perfvar["A"] for g in gpus]
        spread[kind] = max(a) / min(a)
    assert spread["artifact"] > 2.5            # Longhorn seed 42's 2.83x class-A run
    assert 1.4 < spread["wide"] < 2.0          # 25 % spread and 1.5x outliers
    assert spread["quiet"] < 1.25              # per-GPU medians
    with pytest.raises(InputError, match="unknown fleet"):
        draw_fleet("loud", profiles, 16, 4, 42)
