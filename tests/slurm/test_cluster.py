"""What the rest of pal-slurm relies on, proven on the real test cluster: per-slot GRES types give
exactly the chosen device, untyped and multi-node requests still run, clear-then-set retyping of a
held job works, slurmctld restarts without losing jobs, and `pal slurm gres-conf --check` agrees
with the running Slurm."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from pal_slurm.cli.main import cli

SCRIPT = Path(__file__).resolve().parents[1] / "services" / "slurm-cluster.sh"
FILTER = Path(__file__).resolve().parents[2] / "spank_hooks" / "job_submit.lua"


def gpus_of(cluster, jobid: str) -> list[int]:  # type: ignore[no-untyped-def]
    env = cluster.job_env(jobid)
    return sorted(int(x) for x in env["SLURM_JOB_GPUS"].split(","))


def test_cluster_shape(slurm_cluster) -> None:  # type: ignore[no-untyped-def]
    assert slurm_cluster.nodes == ["pal-n1", "pal-n2", "pal-n3", "pal-n4"]
    nodes = slurm_cluster.run(["scontrol", "show", "node", "-o"]).stdout
    for node in slurm_cluster.nodes:
        line = next(ln for ln in nodes.splitlines() if ln.startswith(f"NodeName={node} "))
        assert "Gres=gpu:v100_g0:1,gpu:v100_g1:1,gpu:v100_g2:1,gpu:v100_g3:1" in line
        assert "AvailableFeatures=v100" in line
        for minor in range(4):
            dev = slurm_cluster.dir / "dev" / node / f"nvidia{minor}"
            st = dev.stat()
            assert stat.S_ISCHR(st.st_mode) and os.major(st.st_rdev) == 195 and os.minor(st.st_rdev) == minor
    gres = (slurm_cluster.conf_dir / "gres.conf").read_text()
    assert "AutoDetect=off" in gres
    assert (slurm_cluster.conf_dir / "job_submit.lua").is_file()


@pytest.mark.parametrize(("gres", "expected"), [("gpu:v100_g2:1", [2]), ("gpu:v100_g0:1,gpu:v100_g3:1", [0, 3])])
def test_slot_type_gets_exactly_that_device(slurm_cluster, gres: str, expected: list[int]) -> None:  # type: ignore[no-untyped-def]
    jobid = slurm_cluster.submit([f"--gres={gres}", "--wrap", "env"])
    slurm_cluster.wait_state(jobid, "COMPLETED")
    assert gpus_of(slurm_cluster, jobid) == expected
    cuda = slurm_cluster.job_env(jobid)["CUDA_VISIBLE_DEVICES"]
    assert sorted(int(x) for x in cuda.split(",")) == expected


def test_untyped_request_runs(slurm_cluster) -> None:  # type: ignore[no-untyped-def]
    jobid = slurm_cluster.submit(["--gres=gpu:2", "--wrap", "env"])
    slurm_cluster.wait_state(jobid, "COMPLETED")
    gpus = gpus_of(slurm_cluster, jobid)
    assert len(gpus) == 2 and set(gpus) <= {0, 1, 2, 3}


def test_bare_model_type_is_refused_without_the_filter_rewrite(slurm_cluster) -> None:  # type: ignore[no-untyped-def]
    """Why the submit filter must rewrite `gpu:v100:N`: no GRES carries the bare model type.
    With the pass-through filter (or the kill switch on) Slurm rejects it at submit."""
    if "pass-through job_submit.lua" not in (slurm_cluster.conf_dir / "job_submit.lua").read_text() \
            and not slurm_cluster.kill_switch.exists():
        pytest.skip("the real submit filter is active and rewrites bare model types")
    proc = slurm_cluster.run(["sbatch", "--parsable", "--gres=gpu:v100:1", "-o", "/dev/null", "--wrap", "true"],
                             check=False)
    assert proc.returncode != 0 and "Batch job submission failed" in proc.stderr, proc.stderr


def test_multi_node_job_runs_a_step_on_each_node(slurm_cluster) -> None:  # type: ignore[no-untyped-def]
    jobid = slurm_cluster.submit(["-N", "2", "--ntasks-per-node=1", "--gres=gpu:v100_g1:1",
                                  "--wrap", "srun -l printenv SLURMD_NODENAME SLURM_STEP_GPUS"])
    slurm_cluster.wait_state(jobid, "COMPLETED")
    output = slurm_cluster.job_output(jobid)
    nodelist = slurm_cluster.job(jobid)["NodeList"]
    allocated = slurm_cluster.run(["scontrol", "show", "hostnames", nodelist]).stdout.split()
    assert len(allocated) == 2
    # `srun -l` prefixes each task's lines with "<task>: "; each task printed its node, then GPU 1.
    by_task: dict[str, list[str]] = {}
    for line in output.splitlines():
        task, _, value = line.partition(": ")
        by_task.setdefault(task.strip(), []).append(value.strip())
    assert sorted(v[0] for v in by_task.values()) == sorted(allocated), output
    assert all(v[1:] == ["1"] for v in by_task.values()), output


@pytest.mark.parametrize("initial", ["--gres=gpu:1", "--gres=gpu:v100_g3:1"])
def test_clear_then_set_retypes_a_held_job(slurm_cluster, initial: str) -> None:  # type: ignore[no-untyped-def]
    """The placer's apply step: clear TresPerNode in its own call, then set the slot type and
    NodeList, then release; the job runs where and on what it was told."""
    jobid = slurm_cluster.submit(["--hold", initial, "--wrap", "env"])
    slurm_cluster.wait_state(jobid, "PENDING")
    prefix = "gres/gpu" if slurm_cluster.job(jobid)["TresPerNode"].startswith("gres/") else "gres:gpu"
    slurm_cluster.scontrol("update", f"jobid={jobid}", "TresPerNode=")
    slurm_cluster.scontrol("update", f"jobid={jobid}", f"TresPerNode={prefix}:v100_g1:1", "NodeList=pal-n3")
    assert slurm_cluster.job(jobid)["TresPerNode"] == f"{prefix}:v100_g1:1"
    slurm_cluster.scontrol("release", jobid)
    slurm_cluster.wait_state(jobid, "COMPLETED")
    assert slurm_cluster.job(jobid)["NodeList"] == "pal-n3"
    assert gpus_of(slurm_cluster, jobid) == [1]


def test_slurmctld_restart_keeps_running_jobs(slurm_cluster) -> None:  # type: ignore[no-untyped-def]
    jobid = slurm_cluster.submit(["--gres=gpu:1", "--wrap", "sleep 3"])
    slurm_cluster.wait_state(jobid, "RUNNING")
    subprocess.run([str(SCRIPT), "restart-ctld"], check=True, capture_output=True, timeout=120,
                   env={**os.environ, **slurm_cluster.env})
    slurm_cluster.wait_state(jobid, "COMPLETED", timeout=60)


def test_set_filter_writes_a_state_the_filter_reads(slurm_filter) -> None:  # type: ignore[no-untyped-def]
    lua = shutil.which("lua5.1")
    if not lua:
        pytest.skip("lua5.1 not installed")
    slurm_filter.set_filter("enforce", heartbeat_age_s=100,
                            rules=[{"user": 'al"ice\\', "name": "tr\nain ü", "class": "A", "id": "r1"}])
    assert not slurm_filter.kill_switch.exists()
    script = ('slurm = { SUCCESS = 0 }; PAL_FILTER_TEST = true; local pal = dofile(arg[2]); '
              'local t = assert(pal.load_state(arg[1])); print(t.mode, os.time() - t.heartbeat >= 100, t.models.v100, '
              't.rules[1].user, t.rules[1].name, t.rules[1].class)')
    args = f"arg={{[1]={json.dumps(str(slurm_filter.filter_state))}, [2]={json.dumps(str(FILTER))}}}"
    out = subprocess.run([lua, "-e", args, "-e", script], capture_output=True, text=True, check=True).stdout
    assert out == 'enforce\ttrue\ttrue\tal"ice\\\ttr\nain ü\tA\n'
    slurm_filter.set_filter("off")
    assert slurm_filter.kill_switch.exists()


# ---------------------------------------------------------------- pal slurm gres-conf --check

def test_gres_conf_check_matches_the_test_cluster(slurm_cluster) -> None:  # type: ignore[no-untyped-def]
    inv = slurm_cluster.conf_dir / "inventory.json"
    result = CliRunner().invoke(cli, ["slurm", "gres-conf", "--inventory", str(inv), "--check"])
    assert result.exit_code == 0, result.output
    assert "Slurm matches the inventory (4 nodes, 16 GPUs)" in result.output


def test_gres_conf_check_reports_an_altered_inventory(slurm_cluster, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    data = json.loads((slurm_cluster.conf_dir / "inventory.json").read_text())
    nodes = {n["name"]: n for n in data["nodes"]}
    nodes["pal-n2"]["gpus"] = 3  # GPU 3 gone from the inventory
    nodes["pal-n3"]["model"] = "NVIDIA A100-SXM4-80GB"
    del nodes["pal-n4"]
    data["nodes"] = [*nodes.values(), {"name": "pal-n9", "model": "Tesla V100", "gpus": 1}]
    inv = tmp_path / "inv.json"
    inv.write_text(json.dumps(data))
    result = CliRunner().invoke(cli, ["slurm", "gres-conf", "--inventory", str(inv), "--check", "--format", "json"])
    assert result.exit_code == 1, result.output
    diffs = {(d["node"], d["kind"], d["detail"]) for d in json.loads(result.output)["differences"]}
    assert ("pal-n2", "extra-type", "gpu:v100_g3:1 is not in the inventory") in diffs
    assert ("pal-n3", "missing-type", "gpu:a100_g0 not configured") in diffs
    assert ("pal-n3", "missing-feature", "feature a100 not set") in diffs
    assert ("pal-n9", "missing-node", "not in Slurm") in diffs
    assert ("pal-n4", "unknown-node", "has 4 GPU(s) in Slurm but is not in the inventory") in diffs
    assert not any(node == "pal-n1" for node, _, _ in diffs)
