"""`pal profile submit` on the real test cluster: the job is exclusive and low-priority, runs
`pal profile run` on its node (the simulated backend: the cluster's GPUs are device files only)
and the results arrive in the database."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from sqlalchemy import func, select

from pal_slurm.db import migrate
from pal_slurm.db.engine import make_engine, session_scope
from pal_slurm.db.models import ProfileRun
from pal_slurm.profiler.submit import SubmitOptions, submit_jobs

REPO = Path(__file__).resolve().parents[2]


def test_submit_runs_the_profiler_on_the_node(slurm_cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    node = slurm_cluster.nodes[0]
    db = f"sqlite:///{tmp_path / 'pal.db'}"
    engine = make_engine(db)
    migrate.upgrade(engine)
    # the job reads the database URL from the configuration file it is pointed at; a URL in the
    # submitter's environment (it would win over the file) must not reach it
    conf = tmp_path / "node.toml"
    conf.write_text(f"[database]\nurl = \"{db}\"\n")
    monkeypatch.setenv("PAL_DB_URL", f"sqlite:///{tmp_path / 'not-for-the-job.db'}")
    monkeypatch.setenv("PAL_CONFIG", str(conf))
    monkeypatch.setenv("HOME", str(tmp_path))
    out = tmp_path / "profile.jsonl"
    opts = SubmitOptions(
        time_limit="5", output=str(slurm_cluster.out_dir / "%j.out"), chdir=str(REPO),
        pal_command=(sys.executable, "-m", "pal_slurm"),
        extra_run_args=("--backend", "sim", "--sim-nodes", "1", "--sim-gpus-per-node", "4", "--benchmarks", "stream",
                        "--passes", "1", "--output", str(out)),
    )
    results = submit_jobs(opts, nodes=[node])  # GPU count from the real sinfo
    assert len(results) == 1 and results[0].error is None, results
    r = results[0]
    assert r.gpus == 4 and "--exclusive" in r.argv and "--nice=10000" in r.argv
    assert "--export=PAL_CONFIG,PATH,HOME,LANG,TZ" in r.argv
    slurm_cluster.submitted.append(r.job_id)
    job = slurm_cluster.job(r.job_id)
    assert job.get("Nice") == "10000" and job.get("OverSubscribe") == "NO", job
    state = slurm_cluster.wait_state(r.job_id, "COMPLETED", timeout=120)
    assert state == "COMPLETED"
    log = slurm_cluster.job_output(r.job_id)
    assert f"on {node}" in log and "4 results ->" in log, log
    assert out.exists()
    with session_scope(engine) as s:
        assert s.scalar(select(func.count()).select_from(ProfileRun)) == 4
    engine.dispose()
    assert not (tmp_path / "not-for-the-job.db").exists(), "the submitter's PAL_DB_URL reached the job"
