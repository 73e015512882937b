"""Fast outliers and classification methods through the database, on every backend:
stored, told apart from slow outliers when read back, and never chased by the placer.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.support.fleetgen import records
from pal_slurm.services.classification import run_classification
from pal_slurm.cli.main import cli
from pal_slurm.config import load_config
from pal_slurm.db import classification_store as cstore
from pal_slurm.db.engine import make_engine, session_scope
from pal_slurm.db.variability_store import load_variability
from pal_slurm.services.ingest import import_records_now
from pal_slurm.report.service import load_report
from conftest import ARTIFACT_CONFIG


FLEET = {**{f"GPU-ok-{i:02d}": 1.0 + 0.002 * i for i in range(16)}, "GPU-liar-00": 0.3, "GPU-slow-00": 1.6}
# the liar is 3.3x "fast": inside the import's plausibility bound (10x), so classification must catch it


def test_fast_outlier_is_stored_told_apart_and_not_chased(engine, tmp_path: Path) -> None:
    import_records_now(engine, records(FLEET, benchmark="resnet50", runs=4))
    cfg = load_config(None, env={"PAL_CONFIG": ARTIFACT_CONFIG, "HOME": str(tmp_path)})
    summary = run_classification(engine, cfg, allow_partial=True)
    grp = next(g for g in summary.groups if g["benchmark"] == "resnet50")
    assert grp["outliers"] == 2 and grp["fast_outliers"] == 1
    with session_scope(engine) as s:
        stored = cstore.load_classification(s, cstore.latest_run(s))
        var = {g.uuid: g for g in load_variability(s, ["A"]).gpus}
    assert stored.params["method"] == "shrink"
    rows = {r.uuid: r for r in stored.results}
    liar, slow = rows["GPU-liar-00"], rows["GPU-slow-00"]
    assert liar.outlier and liar.fast and liar.slowdown == 1.0 and liar.perfvar < 0.31
    assert slow.outlier and not slow.fast and slow.slowdown > 1.5
    assert not any(r.fast for u, r in rows.items() if u != "GPU-liar-00")
    fast_bins = [b for b in stored.bins if b.fast]
    assert len(fast_bins) == 1 and fast_bins[0].gpus == 1 and fast_bins[0].index == 0
    # the placer and the simulator take the suspect GPU as a typical one, not as 20x fast
    assert var["GPU-liar-00"].slowdown["A"] == 1.0 and var["GPU-liar-00"].perfvar["A"] == 1.0
    assert var["GPU-slow-00"].perfvar["A"] == pytest.approx(rows["GPU-slow-00"].perfvar)
    # the report's JSON labels it, and does not tell anyone to drain a node for it
    item = next(i for i in load_report(engine, cfg)["benchmarks"] if i["benchmark"] == "resnet50")
    details = {d["uuid"]: d for d in item["outlier_details"]}
    assert details["GPU-liar-00"]["fast"] and details["GPU-liar-00"]["action"] == "re-profile"
    assert "check the measurement" in details["GPU-liar-00"]["reason"]
    # the slow one is graded as slow (drain, or re-profile when its runs are stale), never as a measurement to check
    assert not details["GPU-slow-00"]["fast"] and "check the measurement" not in details["GPU-slow-00"]["reason"]
    assert [b["fast"] for b in item["bins"]][:2] == [True, False]


def test_is_fast_outlier() -> None:
    assert cstore.is_fast_outlier(True, 1.0) and cstore.is_fast_outlier(True, 0.7)
    assert not cstore.is_fast_outlier(True, 1.2)  # slow outliers are slower than every regular GPU
    assert not cstore.is_fast_outlier(False, 0.9) and not cstore.is_fast_outlier(True, None)


def test_classify_method_option_and_config(tmp_path: Path) -> None:
    """CLI and config plumbing only, so SQLite is enough."""
    db_url = f"sqlite:///{tmp_path / 'pal.db'}"
    runner = CliRunner()
    env = {"PAL_CONFIG": ARTIFACT_CONFIG, "HOME": str(tmp_path)}

    def pal(*args: str, code: int = 0):
        res = runner.invoke(cli, ["--db", db_url, *args], env=env)
        assert res.exit_code == code, res.output
        return res

    pal("db", "upgrade")
    eng = make_engine(db_url)
    try:
        import_records_now(eng, records(FLEET, benchmark="resnet50", runs=4))
    finally:
        eng.dispose()
    out = json.loads(pal("classify", "--allow-partial", "--method", "bic", "--format", "json").stdout)
    assert out["version"] == 1
    assert "kmeans" in pal("classify", "--method", "kmeans", code=2).output
    bad = tmp_path / "pal.toml"
    bad.write_text('[classification]\nmethod = "kmeans"\n')
    res = runner.invoke(cli, ["--config", str(bad), "--db", db_url, "classify"], env=env)
    assert res.exit_code != 0 and "method" in res.output and "Traceback" not in res.output
    assert len(res.output.strip().splitlines()) == 1
