"""The agent's Prolog/Epilog on the real test cluster: slurmd runs spank_hooks/pal-prolog.sh before
a GPU job and pal-epilog.sh after it, and the agent turns the files into a job profile.

The cluster wires them in slurm.conf (`Prolog=$DIR/etc/prolog.sh`, `Epilog=$DIR/etc/epilog.sh`,
wrappers that set PAL_JOBMAP_DIR=$DIR/jobmap/<node> and exec our scripts) whenever the scripts
exist. The agent reads a copy of the node's directory, so the shared cluster state is not touched.
"""

from __future__ import annotations

import shutil
import time
import uuid
from pathlib import Path

import pytest
from sqlalchemy import select

from pal_slurm.agent.jobmap import JobMapDir, parse_jobmap

pytestmark = pytest.mark.slurm


def _wait_file(path: Path, predicate, timeout: float = 30) -> str:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        if path.exists():
            text = path.read_text()
            if predicate(text):
                return text
        time.sleep(0.2)
    raise AssertionError(f"{path}: not as expected after {timeout:g}s: {text!r}")


def _wait_running(cluster, jobid: str, timeout: float = 60) -> None:  # type: ignore[no-untyped-def]
    """RUNNING; a job held by the submit filter (another test session may have it in enforce mode on
    this shared cluster) is released, as the placement daemon would."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = cluster.job(jobid)
        if info.get("JobState") == "RUNNING":
            return
        if info.get("AdminComment", "").startswith("pal:held") and info.get("Priority") == "0":
            cluster.scontrol("release", jobid, check=False)
        time.sleep(0.25)
    cluster.wait_state(jobid, "RUNNING", timeout=1)


def test_prolog_and_epilog_map_a_job_to_its_gpus(slurm_cluster, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    conf = (slurm_cluster.conf_dir / "slurm.conf").read_text()
    assert f"Prolog={slurm_cluster.conf_dir}/prolog.sh" in conf and f"Epilog={slurm_cluster.conf_dir}/epilog.sh" in conf
    name = f"palp-{uuid.uuid4().hex[:8]}"
    jobid = slurm_cluster.submit(["-J", name, "--gres=gpu:2", "--wrap",
                                  "echo SLURM_JOB_GPUS=$SLURM_JOB_GPUS; echo HOST=$SLURMD_NODENAME; sleep 4"])
    _wait_running(slurm_cluster, jobid)
    node = slurm_cluster.job(jobid)["NodeList"]
    mapfile = slurm_cluster.dir / "jobmap" / node / f"{jobid}.job"
    running = parse_jobmap(_wait_file(mapfile, lambda t: "job_id=" in t), str(mapfile))
    copy = tmp_path / "jobs"
    copy.mkdir()
    shutil.copy2(mapfile, copy)  # the agent's view while the job runs

    slurm_cluster.wait_state(jobid, "COMPLETED", timeout=60)
    env = slurm_cluster.job_env(jobid)
    assert env["HOST"] == node
    ended_text = _wait_file(mapfile, lambda t: "\nend=" in t)
    ended = parse_jobmap(ended_text, str(mapfile))
    assert (running.job_id, running.user, running.end) == (jobid, "root", None)
    job_gpus = tuple(sorted(int(g) for g in env["SLURM_JOB_GPUS"].split(",")))
    assert len(job_gpus) == 2
    # Slurm 22.05 gives the Prolog only the GPU of the job's last GRES type, and with per-slot
    # types (v100_g0..g3) each GPU is its own type: the file lists one of the two. The agent adds
    # the other from the job's processes (pal_slurm/agent/procmap.py); here we check what is sure.
    assert running.gpus and set(running.gpus) <= set(job_gpus)
    assert running.partition == "gpu" and abs(running.start - time.time()) < 120
    assert ended.key == running.key and ended.end is not None and ended.end >= ended.start
    assert not [p.name for p in mapfile.parent.iterdir() if p.name.endswith(".tmp")]

    scan = JobMapDir(copy).scan()
    assert scan.corrupt == 0 and scan.entries[f"{jobid}.job"].gpus == running.gpus


def test_agent_profiles_a_real_slurm_job(slurm_cluster, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Real prolog -> agent (simulated GPUs with the cluster's minor numbers) -> real epilog -> job_profiles."""
    from pal_slurm.agent.service import AgentService
    from pal_slurm.agent.simload import SimLoad
    from pal_slurm.config import AgentConfig
    from pal_slurm.db import migrate
    from pal_slurm.db.engine import make_engine, session_scope
    from pal_slurm.db.models import JobProfile
    from pal_slurm.gpu.simulated import SimBackend
    from pal_slurm.gpu.simulated_fleet import make_fleet

    url = f"sqlite:///{tmp_path / 'pal.db'}"
    engine = make_engine(url)
    migrate.upgrade(engine)
    jobid = slurm_cluster.submit(["-J", "resnet-palp", "--gres=gpu:1", "--wrap",
                                  "echo SLURM_JOB_GPUS=$SLURM_JOB_GPUS; sleep 6"])
    _wait_running(slurm_cluster, jobid)
    node = slurm_cluster.job(jobid)["NodeList"]
    mapfile = slurm_cluster.dir / "jobmap" / node / f"{jobid}.job"
    mapped = parse_jobmap(_wait_file(mapfile, lambda t: "job_id=" in t))
    copy = tmp_path / "jobmap" / node
    copy.mkdir(parents=True)
    shutil.copy2(mapfile, copy)
    fleet = make_fleet(nodes=1, gpus_per_node=4, seed=1)  # minors 0-3, like the cluster's fake GPUs
    load = SimLoad()
    service = AgentService(AgentConfig(jobmap_dir=str(tmp_path / "jobmap" / "%n"), metrics_port=0),
                           SimBackend(fleet, load=load), node=node, db_url=url, state_file=None, on_jobs=load.assign)
    for _ in range(3):
        service.agent.cycle()
        time.sleep(0.5)
    assert service.health.active_jobs == 1
    slurm_cluster.wait_state(jobid, "COMPLETED", timeout=60)
    assert mapped.gpus == (int(slurm_cluster.job_env(jobid)["SLURM_JOB_GPUS"]),)  # one type: exact
    _wait_file(mapfile, lambda t: "\nend=" in t)
    shutil.copy2(mapfile, copy)
    service.agent.cycle()
    assert service.worker.drain(10)
    assert not (copy / f"{jobid}.job").exists()
    with session_scope(engine) as s:
        row = s.scalars(select(JobProfile).where(JobProfile.slurm_job_id == jobid)).one()
        assert (row.node, row.user, row.gpus, row.samples) == (node, "root", 1, 3)
        assert row.ended_at >= row.started_at
    service.worker.close()
    engine.dispose()
