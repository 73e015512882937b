"""The test and demo cluster's directory (tests/services/slurm-cluster.sh): root's slurmctld
loads slurm.conf, plugins and the filter state from it, so a directory another user made first
(or may write) is refused before anything starts."""

from __future__ import annotations

import os
import pwd
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "tests" / "services" / "slurm-cluster.sh"


#: the test cluster's SlurmUser (the script's default where Debian's packages made the user)
SLURM_USER = "slurm" if any(u.pw_name == "slurm" for u in pwd.getpwall()) else "nobody"


def _start(tmp: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PAL_TEST_SLURM_DIR": str(tmp), "PAL_TEST_SLURM_CTLD_PORT": "29817",
           "PAL_TEST_SLURM_NODE_PORT": "29001"}
    return subprocess.run(["bash", str(SCRIPT), "start"], env=env, capture_output=True, text=True, timeout=60,
                          check=False)


@pytest.mark.skipif(os.geteuid() != 0, reason="the cluster starts only as root; the check guards root")
@pytest.mark.parametrize("how", ["owned by another user", "writable by others", "its etc writable by others",
                                 "its state another user's", "a file in its pal state another user's",
                                 "a file in its etc SlurmUser's"])
def test_a_cluster_directory_not_roots_alone_is_refused(tmp_path: Path, how: str) -> None:
    d = tmp_path / "cluster"
    d.mkdir(mode=0o755)
    if how == "owned by another user":
        os.chown(d, pwd.getpwnam("nobody").pw_uid, -1)
    elif how == "writable by others":
        d.chmod(0o777)
    elif how == "its etc writable by others":
        (d / "etc").mkdir()
        (d / "etc").chmod(0o777)
    elif how == "its state another user's":  # SlurmUser's is right (StateSaveLocation); nobody's is not
        (d / "state").mkdir()
        os.chown(d / "state", pwd.getpwnam("nobody").pw_uid, -1)
    elif how == "a file in its pal state another user's":
        (d / "pal").mkdir()
        (d / "pal" / "filter-state").touch()
        os.chown(d / "pal" / "filter-state", pwd.getpwnam("nobody").pw_uid, -1)
    else:  # SlurmUser may own the JWT key there, nothing else: root's slurmctld reads etc before it drops to it
        (d / "etc").mkdir()
        (d / "etc" / "slurm.conf").touch()
        os.chown(d / "etc" / "slurm.conf", pwd.getpwnam(SLURM_USER).pw_uid, -1)
    proc = _start(d)
    assert proc.returncode != 0
    assert "is not root's alone" in proc.stderr and str(d) in proc.stderr, proc.stderr
    assert not (d / "etc" / "slurm.conf").exists() or how == "a file in its etc SlurmUser's", "nothing written"
    assert not (d / "etc" / "nodes.conf").exists(), "nothing was written into it"
