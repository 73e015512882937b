"""`pal demo --slurm`: refused for non-root users with one line; the whole demo on the real cluster."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from pal_slurm.cli.main import cli
from pal_slurm.demo.slurm_cluster import find_cluster_script
from pal_slurm.demo.slurm_jobs import pace_range
from pal_slurm.errors import PalError

REPO = Path(__file__).resolve().parents[2]
ROOT_ERROR = "pal: error: pal demo --slurm must run as root"


def test_non_root_gets_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    result = CliRunner().invoke(cli, ["demo", "--slurm", "--dir", str(tmp_path)])
    assert result.exit_code == 1
    assert result.output.startswith(ROOT_ERROR) and result.output.count("\n") == 1, result.output
    assert not (tmp_path / "slurm").exists()  # refused before touching anything


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv")
def test_non_root_process_gets_one_line(tmp_path: Path) -> None:
    """A real unprivileged process (setpriv to nobody), not a patched euid."""
    tmp_path.chmod(0o777)
    as_nobody = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", sys.executable]
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), "PYTHONPATH": str(REPO)}
    probe = subprocess.run([*as_nobody, "-c", "import click, pal_slurm"], cwd=REPO, env=env, capture_output=True,
                           text=True, timeout=60, check=False)
    if probe.returncode != 0:
        pytest.skip(f"this Python's packages are not readable by nobody: {probe.stderr.strip().splitlines()[-1]}")
    proc = subprocess.run([*as_nobody, "-m", "pal_slurm", "demo", "--slurm", "--dir", str(tmp_path / "d")],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.startswith(ROOT_ERROR) and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stdout == ""


def test_without_a_source_checkout_says_so(tmp_path: Path) -> None:
    pkg = tmp_path / "site-packages" / "pal_slurm"
    pkg.mkdir(parents=True)
    with pytest.raises(PalError, match="needs a source checkout"):
        find_cluster_script(pkg)
    assert find_cluster_script() == REPO / "tests" / "services" / "slurm-cluster.sh"


def test_pace_range_is_the_slowest_gpu_of_the_best_and_worst_set() -> None:
    free = {("a", 0): {"A": 0.9}, ("a", 1): {"A": 1.2}, ("b", 0): {"A": 1.0}, ("b", 1): {"A": 1.05},
            ("c", 3): {"A": 0.8}}
    assert pace_range(free, "A", 1) == (0.8, 1.2)
    assert pace_range(free, "A", 2) == (1.05, 1.2)  # c has one GPU: no pair there
    assert pace_range(free, "A", 3) == (None, None)
    assert pace_range(free, "D", 1) == (None, None)


def test_demo_on_the_cluster(slurm_cluster, tmp_path: Path) -> None:
    """The whole demo: each job placed as the default policy would, the filter off and the placer gone afterwards."""
    slurm_cluster.wait_quiet()  # an earlier test's job ending now would be in the demo's savings report
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pal_slurm", "demo", "--slurm", "--json", "--dir", str(tmp_path)],
                          cwd=REPO, env={**os.environ, **slurm_cluster.env}, capture_output=True, text=True,
                          timeout=240, check=False)
    took = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    jobs = {j["label"].split(",")[0]: j for j in out["jobs"]}
    assert set(jobs) == {"class-A job", "class-D job", "2-GPU job"}
    for j in out["jobs"]:
        assert j["state"] == "COMPLETED", j
        assert j["admin_comment"].startswith("pal: placed"), j
        assert j["node"] and len(j["gpus"]) == (2 if j["label"].startswith("2-GPU") else 1), j
        placed = j["admin_comment"].split("gpus=")[1].split()[0]
        assert placed == f"{j['node']}:{','.join(map(str, j['gpus']))}", j  # what ran is what was placed
    free = {(g["node"], g["minor"]): g["slowdown"] for g in out["free_at_submission"]}
    assert len(free) >= 4, "the cluster was busy: too few free GPUs for a meaningful check"
    a, d, two = jobs["class-A job"], jobs["class-D job"], jobs["2-GPU job"]
    assert a["job_class"] == "A" and d["job_class"] == "D"
    # the default policy, pal-guard, in submit order: each job on Slurm's own first fit (the
    # first node in configuration order with enough free GPUs, its lowest minors) or on GPUs
    # that are no slower for its class; never slower than first fit
    left = dict(free)
    for j in (a, d, two):
        n = len(j["gpus"])
        node = min((v for v, _m in left if sum(1 for w, _ in left if w == v) >= n), key=_node_order)
        ff = sorted(m for v, m in left if v == node)[:n]
        ff_pace = max(left[(node, m)][j["job_class"]] for m in ff)
        assert max(j["slowdown"]) <= ff_pace + 1e-9, (j, node, ff)
        for m in j["gpus"]:
            del left[(j["node"], m)]
    assert f"job {a['job_id']}" in out["explain"] and "applied" in out["explain"]
    # the report after the jobs: every demo job accounted, against Slurm's first fit (enforce mode)
    headline = out["savings"].splitlines()[0]
    assert headline.startswith("last 1 day: ") and "lost to slow GPUs" in headline, out["savings"]
    assert "against Slurm's first fit" in headline and "unaccounted" not in headline, out["savings"]
    assert slurm_cluster.kill_switch.exists()  # the filter is off again
    assert "\nheartbeat 0\n" in slurm_cluster.filter_state.read_text(encoding="utf-8")  # the placer said goodbye
    print(f"pal demo --slurm took {took:.1f} s")


def _node_order(name: str) -> tuple[str, int]:
    """Slurm's configuration order of the test cluster's nodes (pal-n1, pal-n2, ...)."""
    stem = name.rstrip("0123456789")
    return stem, int(name[len(stem):] or 0)
