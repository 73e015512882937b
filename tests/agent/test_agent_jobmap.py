"""Which job uses which GPU: the mapping-file parser, the directory reader, and the real
prolog/epilog scripts run with /bin/sh (and dash) in a temporary directory."""

from __future__ import annotations

import logging
import os
import shutil
import stat
import subprocess
import time
from pathlib import Path

import pytest
from conftest import REPO

from pal_slurm.agent.jobmap import JobMapDir, expand_dir, parse_jobmap
from pal_slurm.errors import InputError

PROLOG = REPO / "spank_hooks" / "pal-prolog.sh"
EPILOG = REPO / "spank_hooks" / "pal-epilog.sh"
GOOD = "format=pal-jobmap/1\njob_id=4711\nuser=alice\ngpus=0,2-3\nstart=1764495000\npartition=gpu\nname=train\n"


def test_parse_a_good_file() -> None:
    e = parse_jobmap(GOOD, "4711.job")
    assert (e.job_id, e.user, e.gpus, e.start, e.end, e.partition, e.name, e.account) == (
        "4711", "alice", (0, 2, 3), 1764495000.0, None, "gpu", "train", None)
    ended = parse_jobmap(GOOD + "end=1764498600\n")
    assert ended.end == 1764498600.0 and ended.key == e.key
    assert parse_jobmap(GOOD + "end=\n", fallback_start=1764499999.0).end == 1764499999.0  # epilog without clock
    assert parse_jobmap(GOOD.replace("start=1764495000\n", ""), fallback_start=1764400000.0).start == 1764400000.0
    assert parse_jobmap("# comment\n\n" + GOOD.replace("gpus=0,2-3", "gpus=")).gpus == ()


@pytest.mark.parametrize("text, message", [
    ("", "format '' is not"),
    (GOOD.replace("pal-jobmap/1", "pal-jobmap/2"), "format 'pal-jobmap/2'"),
    (GOOD.replace("job_id=4711", "job_id=47; rm -rf /"), "not a Slurm job id"),
    (GOOD.replace("job_id=4711\n", ""), "job_id '' is missing"),
    (GOOD.replace("gpus=0,2-3", "gpus=GPU-1234"), "is not a GPU id"),
    (GOOD.replace("gpus=0,2-3", "gpus=3-1"), "bad range"),
    (GOOD.replace("start=1764495000", "start=yesterday"), "not a number of seconds"),
    (GOOD.replace("start=1764495000", "start=0"), "not a Unix time"),
    (GOOD.replace("start=1764495000\n", ""), "start is missing"),
    (GOOD + "garbage without equals\n", "not a key=value line"),
    ("\x00\x01binary=\xff", "not a key=value line"),
])
def test_corrupt_files_are_one_clear_error(text: str, message: str) -> None:
    with pytest.raises(InputError, match=message) as info:
        parse_jobmap(text, "/run/pal/jobs/4711.job")
    assert str(info.value).startswith("/run/pal/jobs/4711.job")


def test_directory_reader_skips_corrupt_files_with_one_warning(tmp_path: Path,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "1.job").write_text(GOOD.replace("4711", "1"))
    (tmp_path / "2.job").write_text("format=pal-jobmap/1\njob_id=2\ngpus=x\nstart=1764495000\n")
    (tmp_path / "3.job").write_bytes(b"x" * 20000)
    (tmp_path / ".4.123.tmp").write_text(GOOD)  # a prolog still writing: not ours to read
    (tmp_path / "notes.txt").write_text("hello")
    reader = JobMapDir(tmp_path)
    with caplog.at_level(logging.WARNING, logger="pal_slurm.agent.jobmap"):
        first = reader.scan()
        again = reader.scan()
        again2 = reader.scan()
    assert set(first.entries) == {"1.job"} and first.corrupt == 2 and first.changed
    assert again.corrupt == 2 and not again.changed and not again2.changed
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 2 and any("2.job" in w and "gpus" in w for w in warnings)
    assert any("too big" in w for w in warnings)
    # fixing the file makes it count, deleting a file is a change, and nothing is warned twice
    (tmp_path / "2.job").write_text(GOOD.replace("4711", "2"))
    os.utime(tmp_path / "2.job", ns=(time.time_ns(), time.time_ns() + 1_000_000))
    (tmp_path / "3.job").unlink()
    fixed = reader.scan()
    assert set(fixed.entries) == {"1.job", "2.job"} and fixed.corrupt == 0 and fixed.changed
    assert reader.corrupt_total == 2
    reader.remove("1.job")
    reader.remove("1.job")  # already gone: fine
    assert set(reader.scan().entries) == {"2.job"}


def test_missing_directory_is_no_jobs(tmp_path: Path) -> None:
    scan = JobMapDir(tmp_path / "absent").scan()
    assert scan.entries == {} and scan.corrupt == 0
    assert expand_dir("/run/pal/%n/jobs", "gpu007") == Path("/run/pal/gpu007/jobs")


# --------------------------------------------------------------------------- the scripts themselves

def _shells() -> list[str]:
    found = ["/bin/sh"]
    dash = shutil.which("dash")
    if dash and os.path.realpath(dash) != os.path.realpath("/bin/sh"):
        found.append(dash)
    return found


def run_hook(shell: str, script: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """As slurmd runs it: a bare environment (no PATH at all on 22.05) plus the job's variables."""
    return subprocess.run([shell, str(script)], env=env, capture_output=True, text=True, timeout=30, check=False)


@pytest.mark.parametrize("shell", _shells())
def test_prolog_epilog_lifecycle(shell: str, tmp_path: Path) -> None:
    jobmap = tmp_path / "jobmap" / "%n"
    env = {"SLURM_JOB_ID": "4242", "SLURM_JOB_USER": "alice", "SLURM_JOB_UID": "1000",
           "SLURM_JOB_GPUS": "1,3", "CUDA_VISIBLE_DEVICES": "1,3", "SLURM_JOB_PARTITION": "gpu",
           "SLURM_JOB_NAME": "train\nname=evil", "SLURMD_NODENAME": "pal-n2", "PAL_JOBMAP_DIR": str(jobmap)}
    before = time.time()
    proc = run_hook(shell, PROLOG, **env)
    assert proc.returncode == 0 and proc.stdout == "" and proc.stderr == ""
    node_dir = tmp_path / "jobmap" / "pal-n2"
    assert sorted(p.name for p in node_dir.iterdir()) == ["4242.job"]  # no temporary file left behind
    entry = parse_jobmap((node_dir / "4242.job").read_text())
    assert (entry.job_id, entry.user, entry.gpus, entry.partition) == ("4242", "alice", (1, 3), "gpu")
    assert entry.name == "train name=evil"  # one line: a job name cannot inject a key
    assert before - 1 <= entry.start <= time.time() + 1 and entry.end is None

    # who runs what on which GPUs is root's (Slurm's PrivateData=jobs hides it from other users)
    assert stat.S_IMODE((node_dir / "4242.job").stat().st_mode) & 0o077 == 0
    assert stat.S_IMODE(node_dir.stat().st_mode) & 0o077 == 0

    assert run_hook(shell, EPILOG, **env).returncode == 0
    assert stat.S_IMODE((node_dir / "4242.job").stat().st_mode) & 0o077 == 0
    ended = parse_jobmap((node_dir / "4242.job").read_text())
    assert ended.key == entry.key and ended.end is not None and ended.end >= entry.start
    text = (node_dir / "4242.job").read_text()
    assert run_hook(shell, EPILOG, **env).returncode == 0  # a second epilog run changes nothing
    assert (node_dir / "4242.job").read_text() == text
    assert sorted(p.name for p in node_dir.iterdir()) == ["4242.job"]


@pytest.mark.parametrize("shell", _shells())
def test_hooks_never_fail_a_job(shell: str, tmp_path: Path) -> None:
    jobmap = tmp_path / "jm"
    base = {"SLURM_JOB_USER": "bob", "PAL_JOBMAP_DIR": str(jobmap)}
    cases = [
        {"SLURM_JOB_ID": "7"},  # a job without GPUs on this node: no file
        {"SLURM_JOB_ID": "8", "SLURM_JOB_GPUS": "NoDevFiles"},
        {"SLURM_JOB_ID": "9;touch /tmp/x", "SLURM_JOB_GPUS": "0"},  # not a job id
        {"SLURM_JOB_GPUS": "0"},  # no job id at all
        {"SLURM_JOB_ID": "10", "SLURM_JOB_GPUS": "0$(touch pwned)"},  # not a GPU list
    ]
    for extra in cases:
        for hook in (PROLOG, EPILOG):
            assert run_hook(shell, hook, **base, **extra).returncode == 0
    assert not jobmap.exists() or list(jobmap.iterdir()) == []
    assert not (Path.cwd() / "pwned").exists()
    blocked = tmp_path / "file-not-dir"
    blocked.write_text("")
    for hook in (PROLOG, EPILOG):  # an unwritable directory: still exit 0, no output
        proc = run_hook(shell, hook, SLURM_JOB_ID="11", SLURM_JOB_GPUS="0", PAL_JOBMAP_DIR=str(blocked / "sub"))
        assert (proc.returncode, proc.stderr) == (0, "")


def test_prolog_falls_back_to_cuda_visible_devices_and_default_dir_variable(tmp_path: Path) -> None:
    proc = run_hook("/bin/sh", PROLOG, SLURM_JOB_ID="12", CUDA_VISIBLE_DEVICES="2", PAL_JOBMAP_DIR=str(tmp_path))
    assert proc.returncode == 0
    assert parse_jobmap((tmp_path / "12.job").read_text()).gpus == (2,)


def test_epilog_removes_files_no_agent_collected(tmp_path: Path) -> None:
    stale = tmp_path / "1.job"
    stale.write_text(GOOD.replace("4711", "1") + "end=1764498600\n")
    old = time.time() - 3 * 86400
    os.utime(stale, (old, old))
    fresh = tmp_path / "2.job"
    fresh.write_text(GOOD.replace("4711", "2"))
    assert run_hook("/bin/sh", EPILOG, SLURM_JOB_ID="2", PAL_JOBMAP_DIR=str(tmp_path)).returncode == 0
    assert not stale.exists() and parse_jobmap(fresh.read_text()).end is not None
