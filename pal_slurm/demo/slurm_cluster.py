"""The source checkout's Slurm test cluster (tests/services/slurm-cluster.sh: munge, slurmctld,
four slurmd with four fake V100s each) as `pal demo --slurm` uses it: found next to the
package, installed and started through its script, and the environment that reaches it.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pal_slurm.errors import PalError, SlurmUnavailable
from pal_slurm.slurm.command import run_command

__all__ = ["CLUSTER_SCRIPT", "DEFAULT_CLUSTER_DIR", "DemoCluster", "find_cluster_script", "start_cluster"]

Say = Callable[[str], None]

CLUSTER_SCRIPT = Path("tests") / "services" / "slurm-cluster.sh"
DEFAULT_CLUSTER_DIR = "/var/tmp/pal-test-slurm"


def find_cluster_script(package_dir: Path | None = None) -> Path:
    """tests/services/slurm-cluster.sh of the source checkout this package runs from."""
    pkg = package_dir or Path(__file__).resolve().parents[1]  # the pal_slurm package (this is pal_slurm/demo/)
    script = pkg.parent / CLUSTER_SCRIPT
    if not script.is_file():
        raise PalError(f"pal demo --slurm needs a source checkout of pal-slurm ({CLUSTER_SCRIPT} not found "
                       f"next to the package in {pkg.parent}); run it from a git clone installed with pip install -e")
    return script


@dataclass(frozen=True)
class DemoCluster:
    """The running test cluster: its script, state directory and the environment that reaches it."""

    script: Path
    dir: Path
    env: dict[str, str]

    @property
    def state_file(self) -> Path:
        return self.dir / "pal" / "filter-state"

    @property
    def kill_switch(self) -> Path:
        return self.dir / "pal" / "filter-disabled"

    def stop_hint(self) -> str:
        """The command that stops this cluster (with the state dir when it is not the default)."""
        prefix = "" if str(self.dir) == DEFAULT_CLUSTER_DIR else f"PAL_TEST_SLURM_DIR={self.dir} "
        extra = " ".join(f"{k}={os.environ[k]}" for k in ("PAL_TEST_SLURM_CTLD_PORT", "PAL_TEST_SLURM_NODE_PORT")
                         if os.environ.get(k))
        return f"{prefix}{extra + ' ' if extra else ''}{self.script} stop"


def _script(script: Path, verb: str, timeout: float) -> str:
    """Run the cluster script; its last stderr line is the progress summary, or the error we report."""
    try:
        proc = run_command([str(script), verb], timeout=timeout, env={"PAL_PYTHON": sys.executable}, check=False)
    except SlurmUnavailable as exc:  # it did not finish in time, or could not be started
        raise PalError(f"{script.name} {verb}: no result within {timeout:g} s ({exc})") from exc
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    if proc.returncode != 0:
        why = next((ln for ln in reversed(lines) if "error:" in ln), lines[-1] if lines else f"exit {proc.returncode}")
        raise PalError(f"{script.name} {verb} failed: {why.strip()}")
    return proc.stdout if verb == "env" else (lines[-1].strip() if lines else "")


def start_cluster(script: Path, say: Say) -> DemoCluster:
    """Install what is missing (apt) and start the cluster (instant when it already runs)."""
    say(f"1/6 installing Slurm if needed: {_script(script, 'install', 1800)}")
    say(f"2/6 starting the test cluster: {_script(script, 'start', 300)}")
    exports = dict(re.findall(r"^export ([A-Z_]+)=(.*)$", _script(script, "env", 30), flags=re.MULTILINE))
    return DemoCluster(script=script, dir=Path(exports["PAL_TEST_SLURM_DIR"]), env=exports)
