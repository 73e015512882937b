"""A score no GPU could measure is left out at import, or stored quarantined where classification
ignores it: the rule (pure), the options that set it, and what `pal profile import` says of it.
(That a planted value moves no other GPU's factor: test_import_identity.py.)"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import ARTIFACT_CONFIG
from tests.support.artifact_styles import T0, resnet_csv
from pal_slurm.cli.main import cli
from pal_slurm.ingest.records import GpuInfo, ProfileRecord
from pal_slurm.ingest.validate import MIN_REFERENCE, find_suspects


def _rec(score: float, line: int, model: str = "V100", bench: str = "b") -> ProfileRecord:
    from datetime import UTC, datetime

    return ProfileRecord(run_key=str(line), gpu=GpuInfo(uuid=f"GPU-{line}", model=model), benchmark=bench,
                         started_at=datetime(2024, 1, 1, tzinfo=UTC), score=score, unit="ms", lower_is_better=True,
                         source="t", source_file="f", line=line)


def test_running_median_judges_the_first_rows_by_their_neighbours() -> None:
    # the planted value comes first: the look-ahead of MIN_REFERENCE values still outvotes it
    scores = [1e300, 100, 101, 99, 102, 98, 1e-300, 100.5, 1500, 10.5]
    bad = find_suspects([_rec(s, i) for i, s in enumerate(scores)], max_factor=10)
    assert [b.index for b in bad] == [0, 6, 8]
    assert bad[0].reason.startswith("score 1e+300 ms is 9.9e+297x the median 101 of V100 b")
    assert "is 1/1e+302 the median 100" in bad[1].reason
    # a subnormal or an overflowing score is named too (its ratio is 0 or inf), never a crash
    tiny = find_suspects([_rec(s, i) for i, s in enumerate([400, 401, 402, 403, 404, 5e-324, 1.7e308])])
    assert [b.index for b in tiny] == [5, 6]
    assert "a vanishing fraction of the median 402" in tiny[0].reason and "4.23e+305x" in tiny[1].reason
    assert find_suspects([_rec(s, i) for i, s in enumerate(scores)], max_factor=20)[-1].index == 6


def test_small_groups_get_only_the_absolute_checks_and_stored_scores_count() -> None:
    assert find_suspects([_rec(100, 1), _rec(1e6, 2)]) == []  # two values: nobody can tell which is off
    bad = find_suspects([_rec(v, i) for i, v in enumerate([100, -1, math.nan, math.inf])])
    assert [(b.index, b.storable) for b in bad] == [(1, True), (2, False), (3, False)]
    stored = {("V100", "b"): [100.0] * MIN_REFERENCE}
    assert [b.index for b in find_suspects([_rec(1e6, 1), _rec(2e6, 2)], stored)] == [0, 1]
    assert find_suspects([_rec(1e6, 1)], {("H100", "b"): [100.0] * 9}) == []  # another group


def test_max_factor_nan_is_refused_and_inf_turns_the_relative_check_off() -> None:
    scores = [100, 101, 99, 102, 98, 1e-300, 1e300, -1]
    for bad in (math.nan, 1.0, 0.5):
        with pytest.raises(ValueError, match="max_factor must be greater than 1"):
            find_suspects([_rec(s, i) for i, s in enumerate(scores)], max_factor=bad)
    # inf: only the absolute checks (finite, positive) are left
    assert [b.index for b in find_suspects([_rec(s, i) for i, s in enumerate(scores)], max_factor=math.inf)] == [7]


@pytest.mark.parametrize("value", ["nan", "NaN", "1", "0.5"])
def test_max_factor_option_refuses_nan_and_numbers_not_above_1(runner: CliRunner, fresh, tmp_path: Path,
                                                                value: str) -> None:
    path = resnet_csv(tmp_path / "r.csv")
    result = runner.invoke(cli, ["--db", fresh(), "profile", "import", "--input-format", "pal-artifact", "--model", "V100",
                                 "--benchmark", "resnet50", "--max-factor", value, str(path)], env={"PAL_CONFIG": ARTIFACT_CONFIG})
    assert result.exit_code == 2, result.output
    assert "Invalid value for '--max-factor'" in result.stderr and "Traceback" not in result.output


def test_max_factor_option_inf_keeps_only_the_absolute_checks(runner: CliRunner, fresh, tmp_path: Path) -> None:
    path = resnet_csv(tmp_path / "r.csv", extra=[f"resnet,{T0 + 5},c001,1,c001-1,c001-1-0,0,{v}" for v in ("1e-300",
                                                                                                          "-5")])
    result = runner.invoke(cli, ["--db", fresh(), "profile", "import", "--input-format", "pal-artifact", "--model", "V100",
                                 "--benchmark", "resnet50", "--max-factor", "inf", "--json", str(path)],
                           env={"PAL_CONFIG": ARTIFACT_CONFIG})
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)[0]
    assert (out["added"], out["rejected"]) == (25, 1)  # 1e-300 is stored; -5 is not positive


def test_keep_suspect_stores_quarantined_runs_that_classification_ignores(runner: CliRunner, fresh,
                                                                          tmp_path: Path) -> None:
    sqlite_url = fresh()
    extra = [f"resnet,{T0 + i},c001,3,c001-3,c001-3-0,0,{v}" for i, v in enumerate(["1e-300", "-5", "nan"])]
    path = resnet_csv(tmp_path / "planted.csv", extra=extra)

    def pal(*args: str, code: int = 0):
        result = runner.invoke(cli, ["--db", sqlite_url, *args], env={"PAL_CONFIG": ARTIFACT_CONFIG})
        assert result.exit_code == code, result.output
        return result

    result = pal("profile", "import", "--input-format", "pal-artifact", "--model", "V100", "--benchmark", "resnet50",
                 "--keep-suspect", "--json", str(path))
    out = json.loads(result.stdout)[0]
    assert (out["added"], out["quarantined"], out["rejected"]) == (26, 2, 1)  # NaN: no database holds it
    assert f"{path}:28: score nan is not a finite number: rejected" in result.stderr
    assert f"{path}:26: score 1e-300 ms is 1/" in result.stderr and "stored quarantined" in result.stderr
    assert out["database"] == {"gpus": 9, "nodes": 3, "at_slot": 9, "slot_named": 9, "node_only": 0,
                               "unlocated": 0, "physical_min": 9}
    again = pal("profile", "import", "--input-format", "pal-artifact", "--model", "V100", "--benchmark", "resnet50",
                "--max-factor", "1.01", "--json", str(resnet_csv(tmp_path / "again.csv", ts=T0 + 999))).stdout
    # --max-factor is used: the fleet's slowdowns reach 1.08, so 1 % off the median is already suspect
    assert 0 < json.loads(again)[0]["rejected"] < 24
    pal("classify", "--allow-partial")
    report = json.loads(pal("report", "--format", "json").stdout)
    assert report["benchmarks"][0]["gpus"] == 8  # the quarantined GPU's runs count for nothing


def test_an_implausible_jsonl_score_is_left_out_and_the_import_goes_on(runner: CliRunner, fresh,
                                                                       tmp_path: Path) -> None:
    def line(i: int, score: object) -> str:
        return json.dumps({"format": "pal-profile/1", "run_id": f"r{i}",
                           "gpu": {"uuid": f"GPU-{i % 3}", "model": "A100"}, "benchmark": "gemm", "started_at": "2026-01-02T03:04:05Z", "score": score,
                           "unit": "TFLOP/s", "lower_is_better": False})
    path = tmp_path / "p.jsonl"
    path.write_text("\n".join([line(i, 250 + i) for i in range(6)] + [line(6, -3), line(7, 10**400)]) + "\n")
    result = runner.invoke(cli, ["--db", fresh(), "profile", "import", "--json", str(path)], env={"PAL_CONFIG": ARTIFACT_CONFIG})
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)[0]
    assert (out["added"], out["rejected"]) == (6, 2)
    assert f"{path}:7: score -3 is not positive: rejected" in result.stderr
    assert f"{path}:8: score inf is not a finite number: rejected" in result.stderr
