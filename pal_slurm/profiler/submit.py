"""`pal profile submit`: one exclusive, low-priority profiling job per GPU node, through sbatch.

Profiling never runs on top of users: each job asks for its node exclusively and for
all of the node's GPUs, at the lowest priority a user can give (`--nice`), so Slurm
starts it only when the node is free and no other job wants it; inside,
`pal profile run` refuses any GPU another process still uses.

No shell anywhere: the job script (`profile_job.sh`) only runs its arguments verbatim
(`exec "$@"`), and sbatch gets an argument list through `run_command`. Building the
argv is pure (`sbatch_argv`); the GPU count per node comes from `sinfo`'s GRES column.
"""

from __future__ import annotations

import logging
import re
import shlex
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from subprocess import CompletedProcess

from pal_slurm.errors import InputError, SlurmError
from pal_slurm.slurm.command import run_command

__all__ = ["JOB_SCRIPT", "SLOT_JOB_NAME", "SubmitOptions", "SubmitResult", "gpu_count", "parse_sinfo_gres",
           "sbatch_argv", "slot_sbatch_argv", "submit_jobs"]

log = logging.getLogger(__name__)

JOB_SCRIPT = Path(__file__).resolve().with_name("profile_job.sh")
#: the submitter's variables a profiling job gets (`sbatch --export`): where the node's pal
#: configuration is and what a process needs to start; nothing else, so a database URL or a
#: token in the submitter's environment (PAL_DB_URL) never reaches a job on a GPU node, which
#: reads its own database credentials from its own configuration file
JOB_EXPORT = ("PAL_CONFIG", "PATH", "HOME", "LANG", "TZ")
DEFAULT_NICE = 10000
#: the job name of a profiling job inside a quarantined GPU's slot (`slot_sbatch_argv`)
SLOT_JOB_NAME = "pal-quarantine-profile"
_NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")

Runner = Callable[..., CompletedProcess[str]]


@dataclass(frozen=True)
class SubmitOptions:
    partition: str | None = None
    reservation: str | None = None
    account: str | None = None
    qos: str | None = None
    nice: int = DEFAULT_NICE
    time_limit: str = "60"  # minutes, or any sbatch --time format
    job_name: str = "pal-profile"
    output: str = "pal-profile-%N-%j.out"  # sbatch filename pattern, relative to --chdir
    chdir: str | None = None
    pal_command: tuple[str, ...] = (sys.executable, "-m", "pal_slurm")
    run_args: tuple[str, ...] = ("--backend", "auto")  # what `pal profile run` gets
    extra_run_args: tuple[str, ...] = field(default=())  # appended: later options win
    #: one node at a time (re-profiling flagged GPUs while users run): the jobs share one name and
    #: Slurm's `--dependency=singleton` starts each only after the one before it ended
    one_at_a_time: bool = False

    def __post_init__(self) -> None:
        if not 0 <= self.nice <= 2147483645:
            raise InputError(f"--nice must be within 0..2147483645, got {self.nice}")


def gpu_count(gres: str) -> int:
    """GPUs in a node's GRES string: 'gpu:4', 'gpu:v100:2(S:0-1),gpu:a100:2', 'gpu:h100_g0:1,...'."""
    total = 0
    depth, item = 0, []
    items: list[str] = []
    for ch in gres + ",":  # split on commas outside parentheses ("(S:0,1)")
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            items.append("".join(item))
            item = []
        else:
            item.append(ch)
    for it in items:
        it = re.sub(r"\(.*?\)", "", it).strip()
        parts = it.split(":")
        if parts[0] != "gpu":
            continue
        last = parts[-1]
        total += int(last) if len(parts) > 1 and last.isdigit() else 1  # a bare "gpu" or "gpu:type" is one
    return total


def parse_sinfo_gres(text: str) -> dict[str, int]:
    """`sinfo --noheader --Node --format=%N|%G` output -> node -> GPU count (nodes without GPUs left out)."""
    nodes: dict[str, int] = {}
    for line in text.splitlines():
        if "|" not in line:
            continue
        name, gres = (p.strip() for p in line.split("|", 1))
        count = gpu_count(gres) if gres and gres != "(null)" else 0
        if name and count:
            nodes[name] = max(nodes.get(name, 0), count)  # a node in two partitions is listed twice
    return nodes


def sbatch_argv(node: str, gpus: int, opts: SubmitOptions, job_script: Path = JOB_SCRIPT) -> list[str]:
    """The sbatch argument list for the profiling job of `node` (pure)."""
    if not _NODE_NAME.fullmatch(node):
        raise InputError(f"{node!r} is not a node name")
    if gpus < 1:
        raise InputError(f"node {node} has no GPU to profile")
    argv = ["sbatch", "--parsable", f"--job-name={opts.job_name}", f"--nodelist={node}", "--nodes=1",
            "--ntasks=1", "--exclusive", f"--gres=gpu:{gpus}", f"--nice={opts.nice}", f"--time={opts.time_limit}",
            f"--output={opts.output}", f"--export={','.join(JOB_EXPORT)}"]
    if opts.one_at_a_time:
        argv.append("--dependency=singleton")
    for flag, value in (("--partition", opts.partition), ("--reservation", opts.reservation),
                        ("--account", opts.account), ("--qos", opts.qos), ("--chdir", opts.chdir)):
        if value:
            argv.append(f"{flag}={value}")
    argv += [str(job_script), *opts.pal_command, "profile", "run", *opts.run_args, *opts.extra_run_args]
    return argv


def slot_sbatch_argv(node: str, minor: int, gres_type: str, partition: str, opts: SubmitOptions,
                     job_script: Path = JOB_SCRIPT) -> list[str]:
    """The profiling job of one GPU out of service (`pal gpus quarantine`), run in its slot (pure).

    A whole-node, exclusive job could never start on a node where a holder job keeps a slot, so
    this one asks for that slot alone: its per-slot GRES type on its node, in the holder's
    partition, at the holder's priority (`--priority=TOP`), so that when the holder hands the slot
    over (pal_slurm/placer/writer.py, `profile_in_slot`) this job takes it before any other;
    `pal profile run --minors MINOR` benchmarks that GPU only. It runs beside the jobs on the
    node's other GPUs: its figures tell a failing or far too slow GPU from a healthy one, and a
    whole-node profile after the release ranks it finely."""
    if not _NODE_NAME.fullmatch(node):
        raise InputError(f"{node!r} is not a node name")
    argv = ["sbatch", "--parsable", f"--job-name={SLOT_JOB_NAME}", f"--partition={partition}", f"--nodelist={node}",
            "--nodes=1", "--ntasks=1", f"--gres=gpu:{gres_type}:1", "--priority=TOP", f"--time={opts.time_limit}",
            f"--output={opts.output}", f"--export={','.join(JOB_EXPORT)}",
            f"--comment=pal: quarantine-profile slot={node}:{minor} type={gres_type}"]
    for flag, value in (("--account", opts.account), ("--qos", opts.qos), ("--chdir", opts.chdir)):
        if value:
            argv.append(f"{flag}={value}")
    return argv + [str(job_script), *opts.pal_command, "profile", "run", *opts.run_args, "--minors", str(minor),
                   *opts.extra_run_args]


@dataclass(frozen=True)
class SubmitResult:
    node: str
    gpus: int
    argv: list[str]
    job_id: str | None = None
    error: str | None = None
    #: NODE:MINOR of a GPU out of service profiled in its slot (`slot_sbatch_argv`); None: a whole node
    slot: str | None = None

    def as_dict(self) -> dict[str, object]:
        return {"node": self.node, "gpus": self.gpus, "job_id": self.job_id, "error": self.error,
                "slot": self.slot, "argv": self.argv, "command": shlex.join(self.argv)}

    def summary(self) -> str:
        """One line: the job submitted, or why not."""
        if self.job_id is None:
            return f"{self.node}: not submitted: {self.error}"
        if self.error:
            return f"{self.node}: job {self.job_id}: {self.error}"
        where = f", in slot {self.slot} out of service" if self.slot else ""
        return f"{self.node}: job {self.job_id} ({self.gpus} GPU{'s' if self.gpus != 1 else ''}{where})"


def gpu_nodes(partition: str | None, nodes: Sequence[str] | None, *, run: Runner = run_command) -> dict[str, int]:
    """Node -> GPU count from sinfo, for `nodes` (all GPU nodes when None) in `partition`."""
    argv = ["sinfo", "--noheader", "--Node", "--format=%N|%G"]
    if partition:
        argv.append(f"--partition={partition}")
    if nodes:
        argv.append(f"--nodes={','.join(nodes)}")
    found = parse_sinfo_gres(run(argv, timeout=30).stdout)
    if nodes:
        missing = [n for n in nodes if n not in found]
        for n in missing:
            log.warning("node %s: no GPUs in Slurm's GRES (or not in the partition): not submitted", n)
    return found


def submit_jobs(opts: SubmitOptions, *, nodes: Sequence[str] | None = None, gpus_per_node: int | None = None,
                dry_run: bool = False, run: Runner = run_command) -> list[SubmitResult]:
    """Submit (or with dry_run only build) one profiling job per GPU node; one failure does not stop the rest."""
    if nodes and gpus_per_node:
        counts = dict.fromkeys(nodes, gpus_per_node)
    else:
        counts = gpu_nodes(opts.partition, nodes, run=run)
        if gpus_per_node:
            counts = dict.fromkeys(counts, gpus_per_node)
    if not counts:
        raise SlurmError("no GPU nodes to profile (sinfo lists no node with gpu GRES"
                         + (f" in partition {opts.partition}" if opts.partition else "") + ")")
    results = []
    for node, count in counts.items():
        argv = sbatch_argv(node, count, opts)
        if dry_run:
            results.append(SubmitResult(node, count, argv))
            continue
        try:
            proc = run(argv, timeout=60)
        except SlurmError as exc:
            log.warning("node %s: sbatch failed: %s", node, exc)
            results.append(SubmitResult(node, count, argv, error=str(exc)))
            continue
        job_id = proc.stdout.strip().split(";")[0]
        results.append(SubmitResult(node, count, argv, job_id=job_id or None,
                                    error=None if job_id else "sbatch printed no job id"))
    return results
