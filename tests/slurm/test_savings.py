"""The variability tax measured in observe mode on the real test cluster.

One slot is made slow (class A's PerfVar 2.0 on the first node's minor 0, the slot Slurm's
first fit takes first; every other GPU 1.0, stored as the database's classification). A
placer runs in observe mode. Four 1-GPU class-A jobs start together; each finds its GPUs in
Slurm's own view and sleeps `work x their PerfVar` (the replay's job program), so the one
Slurm put on the slow slot takes twice as long. The placer's accounting of each job must
match what the jobs' own clocks show: the tax within 5 % of `measured run time - work`, and
the saving is what the placer would have chosen (its observe record: pal-guard keeps first
fit where no fragmentation-neutral set is faster, so that may be the slow slot too).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pal_eval.replay.experiment import configure_database
from pal_eval.replay.fleet import name_fleet
from pal_eval.replay.harness import job_script
from pal_slurm.placement.variability import GpuVariability
from pal_slurm.placer.process import PlacerProcess, write_config
from tests.slurm.conftest import SlurmCluster

pytestmark = pytest.mark.slurm

SLOW = 2.0
WORK_S = 30.0
JOBS = 4


def fleet(nodes: list[str]) -> list[GpuVariability]:
    var = [GpuVariability(perfvar={c: (SLOW if c == "A" and i == 0 else 1.0) for c in "ABCD"},
                          slowdown={c: (SLOW if c == "A" and i == 0 else 1.0) for c in "ABCD"})
           for i in range(4 * len(nodes))]
    return name_fleet(var, nodes, 4)


def _the_jobs_program(tmp_path: Path, factors: dict) -> tuple[Path, Path, Path]:
    """The replay's job program, the factors it sleeps by and the folder it writes its record in
    (the program, the factors file, the records folder)."""
    factors_file = tmp_path / "factors.json"
    factors_file.write_text(json.dumps(factors), encoding="utf-8")
    records = tmp_path / "records"
    records.mkdir()
    script = tmp_path / "job.py"
    script.write_text(job_script(sys.executable), encoding="utf-8")
    script.chmod(0o755)
    return script, factors_file, records


def _run_the_jobs_observed(slurm_cluster: SlurmCluster, tmp_path: Path, url: str, config: Path, state: Path,
                           script: Path, factors_file: Path, records: Path) -> tuple[list[str], list[dict]]:
    """The four jobs run to the end under an observing placer, which then has accounted every one
    (the jobs' ids, the placer's accounting rows)."""
    slurm_cluster.wait_quiet()  # an earlier test's job ending now would be in this placer's accounts
    placer = PlacerProcess(config, slurm_cluster.env, tmp_path / "placer.log")
    ids: list[str] = []
    try:
        deadline = time.monotonic() + 30
        while not state.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert state.exists(), placer.output()
        for i in range(JOBS):  # pending for a few seconds (the placer observes them), then all start together
            ids.append(slurm_cluster.submit([
                "--job-name=pal-savings", "--gres=gpu:1", "--ntasks=1", "--time=5", "--begin=now+6",
                f"--output={tmp_path}/job-%j.out", str(script), str(factors_file), str(records), f"t{i}", "A",
                str(WORK_S), "1.0"]))
        for jid in ids:
            slurm_cluster.wait_state(jid, "COMPLETED", timeout=120)
        deadline = time.monotonic() + 20
        rows: list[dict] = []
        while time.monotonic() < deadline:
            rows = _accounting(url, ids)
            if len(rows) == JOBS:
                break
            time.sleep(0.5)
        assert len(rows) == JOBS, (rows, placer.output()[-2000:])
    finally:
        slurm_cluster.cancel(ids)
        placer.stop()
    return ids, rows


def _measured_by_the_jobs(records: Path) -> dict[str, dict]:
    """Each job's own record (its GPUs, its clock), by Slurm job id."""
    want = {f"t{i}" for i in range(JOBS)}
    measured = {}
    for name in want:
        r = json.loads((records / f"{name}.json").read_text(encoding="utf-8"))
        assert "error" not in r, r
        measured[r["job"]] = r
    return measured


def _assert_each_job_accounted_as_it_measured(measured: dict[str, dict], by_job: dict[str, dict],
                                              observed: dict[str, list[dict]], factors: dict,
                                              on_slow: list[str]) -> None:
    """The accounting of each job: the GPUs it found, its pace, the saving of what the placer would
    have chosen, and a tax only on the slow slot, within 5 % of what the job's own clock shows."""
    for jid, r in measured.items():
        row = by_job[jid]
        got = [(g["node"], g["minor"]) for g in row["gpus"]]
        assert got == [tuple(g) for g in r["gpus"]], (row, r)  # the GPUs the job itself found
        run_s = r["end"] - r["start"]
        assert row["slowdown"] == r["pace"] and row["mode"] == "observe" and row["job_class"] == "A"
        # the saving is what the placer would have chosen when it saw the job pending (its observe record)
        chose = max(factors[g["node"]][str(g["minor"])]["A"] for g in observed[jid])
        assert row["alternative"] == "placer" and row["alternative_slowdown"] == chose, (row, observed[jid])
        assert row["saved_gpu_h"] == pytest.approx(row["runtime_s"] / 3600 * (1 - chose / row["slowdown"]))
        if jid in on_slow:
            tax_measured = run_s - WORK_S  # GPU-seconds beyond a typical GPU, by the job's own clock
            assert tax_measured > 0.9 * WORK_S
            assert row["tax_gpu_h"] * 3600 == pytest.approx(tax_measured, rel=0.05), (row, r)
            print(f"job {jid} on the slow slot: ran {run_s:.2f} s for {WORK_S:.0f} s of work; tax by its own "
                  f"clock {tax_measured:.2f} GPU-s, accounted {row['tax_gpu_h'] * 3600:.2f} GPU-s "
                  f"({100 * (row['tax_gpu_h'] * 3600 / tax_measured - 1):+.1f} %)")
        else:
            assert row["tax_gpu_h"] == 0.0  # a typical GPU: no tax (its saving is negative where the
            # placer would have put it on the slow slot: that counts against the placer)


def _assert_the_savings_report(config: Path, slurm_cluster: SlurmCluster, url: str, ids: list[str],
                               rows: list[dict], by_job: dict[str, dict], on_slow: list[str],
                               slow_slot: tuple[str, int]) -> None:
    """`pal report savings` sums this test's ledger: the tax lost on the slow slot, what observe
    mode would have saved, the slow slot first."""
    report = subprocess.run([sys.executable, "-m", "pal_slurm", "--config", str(config), "report", "savings",
                             "--since", "1h", "--format", "json"], capture_output=True, text=True, timeout=60,
                            check=True, env={**os.environ, **slurm_cluster.env})
    data = json.loads(report.stdout)
    slow_row = by_job[on_slow[0]]
    ledger = _accounting(url, None)  # the report sums the whole ledger, which only this test's jobs should be in
    assert sorted(r["slurm_job_id"] for r in ledger) == sorted(ids), ledger
    assert data["accounted_jobs"] == JOBS and data["unaccounted_jobs"] == 0
    assert data["lost_gpu_hours"] == pytest.approx(slow_row["tax_gpu_h"])
    assert data["observe_saved_gpu_hours"] == pytest.approx(sum(row["saved_gpu_h"] for row in rows))
    assert (data["gpus"][0]["node"], data["gpus"][0]["minor"]) == slow_slot
    assert "pal-slurm would have saved" in data["headline"]


def test_observe_mode_accounts_the_tax_the_jobs_measured(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'pal.db'}"
    _cluster, factors, _version = configure_database(url, fleet(slurm_cluster.nodes), note="one slow slot")
    slow_slot = (slurm_cluster.nodes[0], 0)
    assert factors[slow_slot[0]]["0"]["A"] == SLOW
    script, factors_file, records = _the_jobs_program(tmp_path, factors)
    state = tmp_path / "filter-state"  # not the cluster's: an observing placer steers nothing
    config = write_config(tmp_path, url, state, mode="observe", interval=0.5)
    ids, rows = _run_the_jobs_observed(slurm_cluster, tmp_path, url, config, state, script, factors_file, records)
    measured = _measured_by_the_jobs(records)
    on_slow = [jid for jid, r in measured.items() if [tuple(g) for g in r["gpus"]] == [slow_slot]]
    assert len(on_slow) == 1, measured  # Slurm's first fit put one of them on the slow slot
    by_job = {row["slurm_job_id"]: row for row in rows}
    observed = _observed(url, ids)
    assert set(observed) == set(ids)  # the placer saw every job pending and recorded its choice
    _assert_each_job_accounted_as_it_measured(measured, by_job, observed, factors, on_slow)
    _assert_the_savings_report(config, slurm_cluster, url, ids, rows, by_job, on_slow, slow_slot)


def _observed(url: str, ids: list[str]) -> dict[str, list[dict]]:
    """Each job's GPUs in the placer's observe record (what it would have chosen)."""
    from sqlalchemy import select

    from pal_slurm.db.engine import make_engine
    from pal_slurm.db.models import Placement

    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            got = conn.execute(select(Placement.slurm_job_id, Placement.gpus)
                               .where(Placement.slurm_job_id.in_(ids), Placement.outcome == "observe")).all()
        return {jid: gpus for jid, gpus in got}
    finally:
        engine.dispose()


def _accounting(url: str, ids: list[str] | None) -> list[dict]:
    """The placer's accounting rows for IDS (every row when None)."""
    from sqlalchemy import select

    from pal_slurm.db.engine import make_engine
    from pal_slurm.db.models import JobAccounting

    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            query = select(JobAccounting)
            if ids is not None:
                query = query.where(JobAccounting.slurm_job_id.in_(ids))
            rows = conn.execute(query).mappings().all()
        return [dict(r) for r in rows]
    finally:
        engine.dispose()
