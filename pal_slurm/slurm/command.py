"""The one way pal-slurm runs a Slurm command.

Why one helper: user-controlled strings (job names, comments) reach us through Slurm's
output and must never reach a shell, every call needs a timeout (a hung slurmctld must not
hang the placer), and failures must come back as typed errors the callers can act on
(SlurmUnavailable -> retry later, SlurmError -> this one request failed).
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
from collections.abc import Mapping, Sequence

from pal_slurm.errors import SlurmError, SlurmUnavailable

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 30.0

#: Every job slurmctld still holds, ended ones (kept MinJobAge s) included: 24.11's
#: `squeue --json` leaves finished jobs out unless asked for all states; 22.05 lists them anyway.
SQUEUE_ALL_JOBS_JSON = ("squeue", "--all", "--json", "--states=all")

# Phrases Slurm clients print when slurmctld is down or busy; these are retried, not reported as bad requests.
_UNAVAILABLE_MARKERS = (
    "unable to contact slurm controller",
    "slurm_load_jobs error: unable to contact",
    "socket timed out",
    "connection refused",
    "slurmctld is not responding",
    "slurm backup controller in standby mode",
    "zero bytes were transmitted or received",
    "communication connection failure",
    "slurm_persist_conn_open",
)


def run_command(argv: Sequence[str], *, timeout: float = DEFAULT_TIMEOUT_S,
                env: Mapping[str, str] | None = None, check: bool = True,
                inherit_env: bool = True) -> subprocess.CompletedProcess[str]:
    """Run `argv` (a list, never a shell string) and return the finished process.

    `env` is added to this process's environment, or with inherit_env=False is the whole
    environment (so a variable such as SQUEUE_STATES cannot change what a read returns).

    With check=True a non-zero exit raises SlurmUnavailable when the output says slurmctld is
    unreachable, and SlurmError otherwise; the message carries the command name and Slurm's own
    first error line, never the whole argument list (arguments may hold user data or tokens).
    """
    if isinstance(argv, (str, bytes)):
        raise TypeError("run_command takes an argument list, never a shell string")
    args = [str(a) for a in argv]
    if not args:
        raise ValueError("empty command")
    exe = args[0]
    if os.sep not in exe and shutil.which(exe, path=(env or os.environ).get("PATH")) is None:
        raise SlurmUnavailable(f"{exe}: command not found (is slurm-client installed and on PATH?)")
    full_env = None if env is None else {**os.environ, **env} if inherit_env else dict(env)
    try:
        child = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                 text=True, errors="replace", env=full_env, start_new_session=True)
    except OSError as exc:
        raise SlurmUnavailable(f"{exe}: {exc.strerror or exc}") from exc
    try:
        out, err = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        _kill_group(child)
        raise SlurmUnavailable(f"{exe} {args[1] if len(args) > 1 else ''}".rstrip()
                               + f": no answer within {timeout:g} s") from exc
    proc = subprocess.CompletedProcess(args, child.returncode, out, err)
    if check and proc.returncode != 0:
        raise classify_failure(args, proc)
    return proc


def classify_failure(args: Sequence[str], proc: subprocess.CompletedProcess[str]) -> SlurmError:
    """Turn a failed command into SlurmUnavailable or SlurmError with Slurm's own first message line."""
    text = (proc.stderr or "") + "\n" + (proc.stdout or "")
    first = next((line.strip() for line in text.splitlines() if line.strip()), f"exit status {proc.returncode}")
    what = " ".join(args[:2]) if len(args) > 1 and not args[1].startswith("-") else args[0]
    lowered = text.lower()
    if any(marker in lowered for marker in _UNAVAILABLE_MARKERS):
        return SlurmUnavailable(f"{what}: {first}")
    return SlurmError(f"{what}: {first}")


def _kill_group(child: subprocess.Popen[str]) -> None:
    """A hung client (and anything it started) is killed as a process group, then reaped."""
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        child.kill()
    child.communicate()
