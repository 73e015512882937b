"""The test cluster (tests/services/slurm-cluster.sh: munge, slurmctld, slurmd as root, fake
GPUs) as the real-cluster benchmarks start it: in the state directory and on the ports their
environment names (PAL_TEST_SLURM_DIR, PAL_TEST_SLURM_CTLD_PORT, ...)."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping

from pal_eval.paths import REPO

SCRIPT = REPO / "tests" / "services" / "slurm-cluster.sh"
_EXPORT = re.compile(r"^export ([A-Z_]+)=(.*)$", flags=re.MULTILINE)


def start(env: Mapping[str, str], timeout: float | None = 300) -> subprocess.CompletedProcess[str]:
    """`slurm-cluster.sh start` (idempotent: a running cluster is left running); its output and
    exit status, for the caller to say what failed."""
    return subprocess.run([str(SCRIPT), "start"], capture_output=True, text=True, env=dict(env), timeout=timeout,
                          check=False, stdin=subprocess.DEVNULL)


def stop(env: Mapping[str, str]) -> None:
    subprocess.run([str(SCRIPT), "stop"], env=dict(env), capture_output=True, check=False)


def exports(env: Mapping[str, str]) -> dict[str, str]:
    """What reaches the cluster of `env` (`slurm-cluster.sh env`: SLURM_CONF, PAL_TEST_SLURM_DIR,
    the REST endpoint when it runs)."""
    out = subprocess.run([str(SCRIPT), "env"], capture_output=True, text=True, env=dict(env), check=True).stdout
    return {k: v.strip("'\"") for k, v in _EXPORT.findall(out)}
