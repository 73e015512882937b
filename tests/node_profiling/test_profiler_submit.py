"""`pal profile submit` as pure code: GRES parsing, the sbatch argv, one node's failure not stopping the rest.

The real submission to the test cluster is in tests/slurm/test_profiler_submit.py.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from pal_slurm.errors import InputError, SlurmError
from pal_slurm.profiler.submit import (
    JOB_SCRIPT,
    SubmitOptions,
    gpu_count,
    parse_sinfo_gres,
    sbatch_argv,
    submit_jobs,
)


@pytest.mark.parametrize(("gres", "count"), [
    ("gpu:4", 4),
    ("gpu:v100:2(S:0-1)", 2),
    ("gpu:v100:2(S:0,1),gpu:a100:2(S:1)", 4),
    ("gpu:v100_g0:1,gpu:v100_g1:1,gpu:v100_g2:1,gpu:v100_g3:1", 4),
    ("gpu:h100:8(S:0-1),nic:2", 8),
    ("nic:2", 0),
    ("(null)", 0),
    ("gpu", 1),
])
def test_gpu_count(gres: str, count: int) -> None:
    assert gpu_count(gres) == count


def test_parse_sinfo_gres() -> None:
    text = "n1|gpu:v100_g0:1,gpu:v100_g1:1\nn2|(null)\nn1|gpu:v100_g0:1,gpu:v100_g1:1\nn3|gpu:8(S:0-1)\ngarbage\n"
    assert parse_sinfo_gres(text) == {"n1": 2, "n3": 8}


def test_sbatch_argv_is_exclusive_low_priority_and_shell_free() -> None:
    opts = SubmitOptions(partition="gpu", reservation="maint", account="ops", nice=20000, time_limit="30",
                         pal_command=("/opt/pal/bin/pal",), extra_run_args=("--benchmarks", "gemm; rm -rf /"))
    argv = sbatch_argv("gpu-07", 8, opts)
    assert argv[:2] == ["sbatch", "--parsable"]
    for flag in ("--exclusive", "--nodelist=gpu-07", "--nodes=1", "--gres=gpu:8", "--nice=20000", "--time=30",
                 "--partition=gpu", "--reservation=maint", "--account=ops"):
        assert flag in argv
    [export] = [a for a in argv if a.startswith("--export=")]
    assert "PAL_DB_URL" not in export and export.split("=", 1)[1].split(",")[0] == "PAL_CONFIG", \
        "only where the node's configuration is: no database URL from the submitter's environment"
    script = argv.index(str(JOB_SCRIPT))
    assert argv[script + 1:] == ["/opt/pal/bin/pal", "profile", "run", "--backend", "auto", "--benchmarks",
                                 "gemm; rm -rf /"], "arguments passed verbatim, never through a shell"
    assert JOB_SCRIPT.read_text().splitlines()[0] == "#!/bin/sh" and 'exec "$@"' in JOB_SCRIPT.read_text()
    with pytest.raises(InputError, match="not a node name"):
        sbatch_argv("n1;reboot", 4, opts)
    with pytest.raises(InputError, match="no GPU"):
        sbatch_argv("n1", 0, opts)
    with pytest.raises(InputError, match="--nice"):
        SubmitOptions(nice=-5)


def test_job_script_runs_arguments_verbatim(tmp_path: Path) -> None:
    marker = tmp_path / "it ran; $(touch pwned)"
    proc = subprocess.run([str(JOB_SCRIPT), "touch", str(marker)], capture_output=True, text=True, cwd=tmp_path,
                          check=False)
    assert proc.returncode == 0 and marker.exists() and not (tmp_path / "pwned").exists()


class FakeSlurm:
    """Records the argv of each call and answers like sinfo/sbatch (for the pure submit logic)."""

    def __init__(self, fail_on: str | None = None) -> None:
        self.calls: list[list[str]] = []
        self.fail_on = fail_on

    def __call__(self, argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        self.calls.append(argv)
        if argv[0] == "sinfo":
            return subprocess.CompletedProcess(argv, 0, "n1|gpu:4\nn2|gpu:v100:2(S:0)\ncpu1|(null)\n", "")
        if self.fail_on and f"--nodelist={self.fail_on}" in argv:
            raise SlurmError("sbatch: error: Batch job submission failed: Requested node configuration is not "
                             "available")
        return subprocess.CompletedProcess(argv, 0, f"{100 + len(self.calls)};cluster\n", "")


def test_submit_jobs_one_per_gpu_node_failures_reported() -> None:
    slurm = FakeSlurm(fail_on="n2")
    results = submit_jobs(SubmitOptions(partition="gpu"), run=slurm)
    assert slurm.calls[0] == ["sinfo", "--noheader", "--Node", "--format=%N|%G", "--partition=gpu"]
    assert [(r.node, r.gpus) for r in results] == [("n1", 4), ("n2", 2)]
    assert results[0].job_id == "102" and results[0].error is None
    assert results[1].job_id is None and "not available" in results[1].error
    dry = FakeSlurm()
    assert all(r.job_id is None for r in submit_jobs(SubmitOptions(), nodes=["n1"], gpus_per_node=2, dry_run=True,
                                                     run=dry))
    assert dry.calls == [], "dry run with known GPU counts calls nothing"


def test_submit_jobs_without_gpu_nodes_is_clear() -> None:
    def empty(argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(argv, 0, "cpu1|(null)\n", "")

    with pytest.raises(SlurmError, match="no GPU nodes to profile"):
        submit_jobs(SubmitOptions(), run=empty)
