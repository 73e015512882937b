"""The placer and its fail-safe as they run in production: as SlurmUser, not root, on a slurmctld
that runs as SlurmUser too (the test cluster's default where Debian's packages made `slurm`).

What this proves on a real controller: everything the placer does to a job (hold, retype,
AdminComment, release) and everything the fail-safe does are allowed to SlurmUser; the filter,
inside slurmctld as that user, reads the state file the placer wrote in its own 0750 directory
(the production layout, docs/admin-guide.md "Security model") and pokes the wake-up file there;
and a user with no Slurm admin rights cannot set AdminComment, which is why the units run as
SlurmUser and not as a user of their own with AdminLevel=Operator.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from .conftest import SlurmCluster
from .placer_support import make_db, write_config

pytestmark = pytest.mark.slurm

SHOW = "echo NODE=$SLURMD_NODENAME; echo SLURM_JOB_GPUS=$SLURM_JOB_GPUS"
FILTER_CACHE_S = 2.3  # job_submit.lua re-reads the state file at most every 2 s
REPO = Path(__file__).resolve().parents[2]
NOT_ADMIN = ("nobody", "nogroup")  # a user with no Slurm admin rights


def slurm_user(cluster: SlurmCluster) -> str:
    out = cluster.scontrol("show", "config").stdout
    return next(line.split("=", 1)[1].strip().split("(")[0] for line in out.splitlines()
                if line.startswith("SlurmUser"))


class AsUser:
    """`pal` as SlurmUser: setpriv to its uid, gid and groups (no capabilities left), with only
    the environment a unit would give it."""

    def __init__(self, user: str, cluster: SlurmCluster, config: Path) -> None:
        self.user, self.config = user, config
        self.env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(config.parent),
                    "PYTHONPATH": os.environ.get("PYTHONPATH", str(REPO)),
                    "PAL_CONFIG": str(config), **cluster.env}

    def argv(self, *args: str) -> list[str]:
        return ["setpriv", f"--reuid={self.user}", f"--regid={self.user}", "--init-groups",
                sys.executable, "-m", "pal_slurm", "--config", str(self.config), *args]

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.argv(*args), env=self.env, cwd="/", capture_output=True, text=True,
                              timeout=60, check=False)


@pytest.fixture
def production_layout(slurm_filter: SlurmCluster) -> Iterator[tuple[SlurmCluster, str, Path]]:
    """The filter state directory as on a controller (SlurmUser's, 0750) for the test, and a
    private directory of SlurmUser's for its configuration, database and lock file; both put back."""
    cluster = slurm_filter
    user = slurm_user(cluster)
    if user == "root" or shutil.which("setpriv") is None:
        msg = f"the test cluster's SlurmUser is {user} (no `slurm` user here), or setpriv is missing"
        if os.environ.get("PAL_REQUIRE_SLURM") == "1":
            pytest.fail(msg, pytrace=False)
        pytest.skip(msg)
    probe = subprocess.run(["setpriv", f"--reuid={user}", f"--regid={user}", "--init-groups", sys.executable, "-c",
                            "import pal_slurm, sqlalchemy"], cwd="/", capture_output=True, text=True, timeout=60,
                           check=False, env={"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(REPO)})
    if probe.returncode != 0:  # a checkout or venv under a private directory (/root): not a product question
        pytest.skip(f"{user} cannot run this checkout's Python ({sys.executable}, {REPO}): "
                    f"{(probe.stderr.strip().splitlines() or ['?'])[-1]}")
    pw = pwd.getpwnam(user)
    state_dir = cluster.filter_state.parent
    before = os.stat(state_dir)
    home = Path(tempfile.mkdtemp(prefix="pal-slurmuser-"))
    try:
        os.chmod(home, 0o700)
        os.chown(home, pw.pw_uid, pw.pw_gid)
        os.chown(state_dir, pw.pw_uid, pw.pw_gid)
        os.chmod(state_dir, 0o750)
        cluster.filter_state.unlink(missing_ok=True)  # the root placers' file: this one writes its own
        yield cluster, user, home
    finally:
        os.chown(state_dir, before.st_uid, before.st_gid)
        os.chmod(state_dir, before.st_mode & 0o7777)
        shutil.rmtree(home, ignore_errors=True)


def _own(path: Path, user: str) -> None:
    pw = pwd.getpwnam(user)
    for p in [path, *path.rglob("*")]:
        os.chown(p, pw.pw_uid, pw.pw_gid)


def _wait(what: str, check: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.25)
    raise AssertionError(f"not within {timeout:g} s: {what}")


def test_placer_and_fail_safe_run_as_slurm_user(production_layout: tuple[SlurmCluster, str, Path]) -> None:
    cluster, user, home = production_layout
    db_url = make_db(home)
    cfg = write_config(home, db_url, cluster.filter_state, mode="enforce", interval=0.5,
                       lock_file=str(home / "placer.lock"), hold_s=300)
    _own(home, user)
    pal = AsUser(user, cluster, cfg)
    log = home / "placer.log"
    with open(log, "ab") as fh:
        placer = subprocess.Popen(pal.argv("-v", "placer"), env=pal.env, cwd="/", stdout=fh,
                                  stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        # its state file: SlurmUser's, 0640, in its own directory, telling the filter to poke
        _wait("the placer's first enforce heartbeat",
              lambda: cluster.filter_state.exists() and "\nmode enforce\n" in cluster.filter_state.read_text())
        st = os.stat(cluster.filter_state)
        assert (pwd.getpwuid(st.st_uid).pw_name, oct(st.st_mode & 0o777)) == (user, "0o640")
        assert "\nwake 1\n" in cluster.filter_state.read_text(), log.read_text()
        wake = cluster.filter_state.with_name("placer-wake")
        cluster.kill_switch.unlink(missing_ok=True)
        time.sleep(FILTER_CACHE_S)

        # a GPU job: held by the filter (inside slurmctld, as SlurmUser), placed and released by
        # the placer as SlurmUser, on the fleet's best GPU for class A
        size_before = wake.stat().st_size
        jid = cluster.submit(["--gres=gpu:1", "--pal-class=A", "--wrap", SHOW])
        cluster.wait_state(jid, {"COMPLETED"}, timeout=60)
        info, env = cluster.job(jid), cluster.job_env(jid)
        assert info["AdminComment"].startswith("pal: placed class=A"), (info, log.read_text())
        assert wake.stat().st_size > size_before, "the filter poked the placer"
        from pal_slurm.db.engine import make_engine
        from pal_slurm.placer.factors import load_factors

        slow = {k: v.slowdown["A"] for k, v in load_factors(make_engine(db_url), ("A",)).by_slot.items()}
        gpu = (env["NODE"], int(env["SLURM_JOB_GPUS"]))
        assert slow[gpu] == min(slow.values()), (gpu, info["AdminComment"])

        # the placer dies without releasing; a job held meanwhile is the fail-safe's, as SlurmUser
        placer.send_signal(signal.SIGSTOP)  # alive but silent: the filter still holds new jobs
        held = cluster.submit(["--gres=gpu:2", "--wrap", SHOW])
        _wait("the filter's hold", lambda: cluster.job(held).get("AdminComment", "").startswith("pal:held"))
        placer.kill()
        placer.wait(timeout=30)
        out = pal.run("placer", "release-stale", "--max-age", "0")
        assert out.returncode == 0 and "released 1 held job(s)" in out.stdout, (out.stdout, out.stderr)
        cluster.wait_state(held, {"COMPLETED"}, timeout=60)
        assert len([g for g in cluster.job_env(held)["SLURM_JOB_GPUS"].split(",") if g]) == 2
    finally:
        if placer.poll() is None:
            placer.kill()
            placer.wait(timeout=30)
        cluster.kill_switch.touch()


def test_a_user_without_slurm_admin_rights_cannot_set_admin_comment(slurm_filter: SlurmCluster) -> None:
    """Why the placer runs as SlurmUser: Slurm lets only root, SlurmUser and AdminLevel=Administrator
    set AdminComment (an Operator may hold and release, not this), and the placer's tag lives there.
    The user owns the job and may change its Comment; AdminComment, even on its own job, it may not."""
    cluster = slurm_filter
    user, group = NOT_ADMIN
    as_user = ["setpriv", f"--reuid={user}", f"--regid={group}", "--clear-groups"]
    env = {**os.environ, **cluster.env}

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*as_user, *argv], env=env, cwd="/", capture_output=True, text=True, timeout=30,
                              check=False)

    sub = run("sbatch", "--parsable", "--hold", "--output=/dev/null", "--wrap", "true")
    assert sub.returncode == 0, sub.stderr
    jid = sub.stdout.strip().split(";")[0]
    cluster.submitted.append(jid)
    assert run("scontrol", "update", f"JobId={jid}", "Comment=mine").returncode == 0
    proc = run("scontrol", "update", f"JobId={jid}", "AdminComment=pal:placed forged")
    assert proc.returncode != 0 and "permission denied" in proc.stderr.lower(), (proc.stdout, proc.stderr)
    info = cluster.job(jid)
    assert info.get("Comment") == "mine" and "pal:placed" not in info.get("AdminComment", ""), info
