"""The placement daemon on the real test cluster: plain sbatch in, the right GPUs out."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import SlurmCluster
from .placer_support import A_PERFVAR, PlacerProcess, make_db, write_config

pytestmark = pytest.mark.slurm

SHOW = "echo NODE=$SLURMD_NODENAME; echo SLURM_JOB_GPUS=$SLURM_JOB_GPUS; sleep 0.5"
FILTER_CACHE_S = 2.3  # job_submit.lua re-reads the state file at most every 2 s


class Live:
    def __init__(self, cluster: SlurmCluster, db_url: str, tmp: Path, placer: PlacerProcess) -> None:
        self.cluster, self.db_url, self.tmp, self.placer = cluster, db_url, tmp, placer
        self.sf = _slowdowns(db_url)

    def run_job(self, args: list[str], timeout: float = 60) -> tuple[str, dict[str, str], dict[str, str]]:
        jid = self.cluster.submit([*args, "--wrap", SHOW])
        self.cluster.wait_state(jid, {"COMPLETED"}, timeout=timeout)
        return jid, self.cluster.job_env(jid), self.cluster.job(jid)

    def pal(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "pal_slurm", "--db", self.db_url, *args], capture_output=True,
                              text=True, timeout=60, check=False)


def _slowdowns(db_url: str) -> dict[str, dict[tuple[str, int], float]]:
    """Per class: (node, minor) -> slowdown, as the database holds them (what the placer ranks by)."""
    from pal_slurm.db.engine import make_engine
    from pal_slurm.placer.factors import load_factors

    f = load_factors(make_engine(db_url), ("A", "B", "C", "D"))
    return {c: {k: v.slowdown[c] for k, v in f.by_slot.items()} for c in ("A", "D")}


def _start(cluster: SlurmCluster, tmp: Path, db_url: str, mode: str) -> PlacerProcess:
    cfg = write_config(tmp, db_url, cluster.filter_state, mode=mode, interval=0.5)
    placer = PlacerProcess(cfg, cluster.env, tmp / f"placer-{mode}.log")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and f"\nmode {mode}\n" not in _read(cluster.filter_state):
        time.sleep(0.2)
    assert f"\nmode {mode}\n" in _read(cluster.filter_state), placer.output()
    cluster.kill_switch.unlink(missing_ok=True)
    time.sleep(FILTER_CACHE_S)
    return placer


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="ascii", errors="replace")
    except OSError:
        return ""


@pytest.fixture(scope="module")
def live(slurm_cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    tmp = tmp_path_factory.mktemp("placer")
    db_url = make_db(tmp)
    first = len(slurm_cluster.submitted)
    live = Live(slurm_cluster, db_url, tmp, _start(slurm_cluster, tmp, db_url, "enforce"))
    try:
        yield live
    finally:
        slurm_cluster.kill_switch.touch()
        live.placer.stop()  # the one running now: test_observe_mode_changes_no_job starts a new one
        slurm_cluster.cancel(slurm_cluster.submitted[first:])


def _gpus(env: dict[str, str]) -> list[tuple[str, int]]:
    return [(env["NODE"], int(g)) for g in env["SLURM_JOB_GPUS"].split(",") if g]


def test_class_a_job_gets_the_best_gpu(live: Live) -> None:
    _jid, env, info = live.run_job(["--gres=gpu:1", "--pal-class=A"])
    [(node, minor)] = _gpus(env)
    sf = live.sf["A"]
    assert sf[(node, minor)] == min(sf.values()), (node, minor, info.get("AdminComment"))
    assert info["AdminComment"].startswith("pal: placed class=A")
    assert A_PERFVAR[(node, minor)] < 0.9  # the fast group of the test fleet


def test_class_d_job_gets_the_worst_gpu_for_a(live: Live) -> None:
    _jid, env, info = live.run_job(["--gres=gpu:1", "--pal-class=D"])
    [(node, minor)] = _gpus(env)
    assert live.sf["A"][(node, minor)] == max(live.sf["A"].values()), info.get("AdminComment")


def test_two_gpu_job_gets_the_best_pair_of_one_node(live: Live) -> None:
    _jid, env, _info = live.run_job(["--gres=gpu:2", "--pal-class=A"])
    got = _gpus(env)
    assert len(got) == 2 and len({n for n, _ in got}) == 1
    sf = live.sf["A"]
    best_pair = min(sorted(sf[(n, m)] for m in range(4))[1] for n in {k[0] for k in sf})
    assert max(sf[g] for g in got) == best_pair


def test_multi_node_job_runs_on_the_same_slots(live: Live) -> None:
    jid = live.cluster.submit(["-N2", "--gres=gpu:1", "--pal-class=B", "--wrap",
                               "srun bash -c 'echo STEP=$SLURMD_NODENAME:$SLURM_JOB_GPUS'"])
    live.cluster.wait_state(jid, {"COMPLETED"}, timeout=60)
    steps = [ln.split("=", 1)[1] for ln in live.cluster.job_output(jid).splitlines() if ln.startswith("STEP=")]
    assert len(steps) == 2 and len({s.split(":")[0] for s in steps}) == 2
    assert len({s.split(":")[1] for s in steps}) == 1
    assert live.cluster.job(jid)["AdminComment"].startswith("pal: placed class=B")


@pytest.mark.parametrize("request_args", [["--gpus=1"], ["--gpus-per-node=1"], ["--gres=gpu:v100:1"],
                                          ["--gres=gpu:1"], ["--gpus=2", "-N1"]])
def test_request_forms_are_placed_and_run(live: Live, request_args: list[str]) -> None:
    _jid, env, info = live.run_job(request_args)
    assert info["AdminComment"].startswith("pal: placed"), info
    assert "v100_g" in info.get("TresPerNode", ""), info
    assert _gpus(env)


def test_the_hold_is_a_begin_time_released_at_once_after_retyping(live: Live) -> None:
    """The filter holds through the begin time (hold_s from the placer's state file); the placer
    retypes the job and releases it with StartTime=now in the same cycle: it runs within
    seconds, long before the 90 s hold would have ended by itself."""
    assert "\nhold_s 90\n" in _read(live.cluster.filter_state)
    t0 = time.monotonic()
    _jid, env, info = live.run_job(["--gres=gpu:1"], timeout=30)
    assert time.monotonic() - t0 < 30 and info["AdminComment"].startswith("pal: placed"), info
    assert "v100_g" in info.get("TresPerNode", "") and _gpus(env)


def test_a_job_held_the_old_way_is_still_placed(live: Live) -> None:
    """Upgrade safety: a job held with priority 0 and the tag (what earlier filters did) is
    recognised, placed and released with scontrol release."""
    jid = live.cluster.submit(["--hold", "--gres=gpu:1", "--wrap", SHOW])
    live.cluster.scontrol("update", f"jobid={jid}", "AdminComment=pal:held class=A src=default")
    live.cluster.wait_state(jid, {"COMPLETED"}, timeout=30)
    info = live.cluster.job(jid)
    assert info["AdminComment"].startswith("pal: placed class=A"), info
    assert "v100_g" in info.get("TresPerNode", ""), info


def test_job_that_names_a_node_is_not_moved(live: Live) -> None:
    _jid, env, info = live.run_job(["--gres=gpu:1", "-w", "pal-n4"])
    assert env["NODE"] == "pal-n4" and not info.get("AdminComment", "").startswith("pal")


def test_pal_class_off_is_not_touched(live: Live) -> None:
    _jid, env, info = live.run_job(["--gres=gpu:1", "--pal-class=off"])
    assert info.get("TresPerNode") in ("gres:gpu:1", "gres/gpu:1") and not info.get("AdminComment", "").startswith("pal")
    assert _gpus(env)


def test_explain_and_placements_show_the_decision(live: Live) -> None:
    jid, env, _info = live.run_job(["--gres=gpu:1", "--pal-class=A"])
    [(node, minor)] = _gpus(env)
    out = live.pal("explain", jid)
    assert out.returncode == 0 and "applied" in out.stdout and f"{node}:{minor}" in out.stdout, out.stdout + out.stderr
    rows = json.loads(live.pal("placements", "--job", jid, "--format", "json").stdout)
    assert rows and rows[0]["outcome"] == "applied" and rows[0]["gpus"][0]["minor"] == minor


def test_a_held_jobs_estimate_comes_from_imported_sacct_history(live: Live) -> None:
    """An export of earlier runs of the same user + job name, imported with `pal jobs
    import-history`: the placer's estimate for the held job is their learned runtime (the
    placement's reason and the placer's log say so), not its 10-minute limit."""
    import os
    import pwd

    from pal_slurm.jobs.sacct_history import ExportJob, write_export

    user, name = pwd.getpwuid(os.getuid()).pw_name, f"hist-{os.getpid()}"
    now = time.time()
    export = live.tmp / f"{name}.sacct"
    export.write_text(write_export([ExportJob(str(900_000 + i), name, user, now - 3600 * (i + 1), now - 3600 * (i + 1),
                                              now - 3600 * (i + 1) + 40 + i, "COMPLETED", 1, ["pal-n1"])
                                    for i in range(3)]))
    out = live.pal("jobs", "import-history", str(export), "--cluster", "earlier")
    assert out.returncode == 0 and "imported 3 jobs" in out.stdout, out.stdout + out.stderr
    time.sleep(5.5)  # the placer re-reads learned runtimes every classes_refresh_s (5 s in write_config)
    jid, _env, _info = live.run_job(["--gres=gpu:1", "--pal-class=A", f"--job-name={name}", "--time=10"])
    rows = json.loads(live.pal("placements", "--job", jid, "--format", "json").stdout)
    applied = [r for r in rows if r["outcome"] == "applied"]
    assert applied and "runtime estimate 42 s learned from sacct history" in applied[0]["reason"], rows
    assert "runtime estimate 42 s learned from sacct history" in live.pal("explain", jid).stdout
    log = live.placer.output()
    assert f"job {jid} ({user!r}, {name!r}): runtime estimate 42 s learned from sacct history (time limit 600 s)" in log


def test_observe_mode_changes_no_job(slurm_cluster: SlurmCluster, tmp_path: Path, live: Live) -> None:
    live.placer.stop()
    placer = _start(slurm_cluster, tmp_path, live.db_url, "observe")
    try:
        jid = slurm_cluster.submit(["--gres=gpu:1", "--pal-class=A", "--wrap", SHOW])
        slurm_cluster.wait_state(jid, {"COMPLETED"}, timeout=60)
        info = slurm_cluster.job(jid)
        assert info.get("TresPerNode") in ("gres:gpu:1", "gres/gpu:1") and not info.get("AdminComment", "").startswith("pal")
        deadline = time.monotonic() + 10
        rows: list[dict[str, object]] = []
        while time.monotonic() < deadline and not rows:
            rows = json.loads(live.pal("placements", "--job", jid, "--format", "json").stdout or "[]")
            time.sleep(0.5)
        # observe decisions are recorded when the job was still pending during a cycle
        assert all(r["outcome"] == "observe" for r in rows)
    finally:
        placer.stop()
        live.placer = _start(slurm_cluster, live.tmp, live.db_url, "enforce")
