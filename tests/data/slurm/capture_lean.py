#!/usr/bin/env python3
"""Capture the lean job read's test data (tests/slurm_adapter/test_slurm_lean_read.py) from a test cluster.

Submits one job of each kind the placer must read right, writes what `squeue -O` (the
placer's layout, fixed tokens), `squeue -o %x`, `squeue --json` and `scontrol -d show job`
print for them at one moment into tests/data/slurm/<version>/, with roles.json naming each
job's id, and cancels the jobs. Run it against a cluster of your own (root):
  eval "$(tests/services/slurm-cluster.sh env)"; python tests/data/slurm/capture_lean.py
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))

from pal_slurm.slurm import parse_squeue  # noqa: E402

EXCLUDED = parse_squeue.Layout((("job_id", "%A"), ("excluded_nodes", "%x")), "fedcba9876543210", strict=True)


def layouts(version: tuple[int, int]) -> tuple[parse_squeue.Layout, parse_squeue.Layout]:
    """The plain and the strict layout the backend uses on this version, with fixed tokens."""
    fields = parse_squeue.fields_for(version)
    return (parse_squeue.Layout(fields, "0123456789abcdef"),
            parse_squeue.Layout(fields, "1111222233334444", strict=True))
LATER = "--begin=now+3600"


def run(*argv: str, env: dict[str, str] | None = None) -> str:
    return subprocess.run(list(argv), capture_output=True, text=True, check=True, timeout=60,
                          env={**{k: v for k, v in os.environ.items() if not k.startswith("SQUEUE_")}, **(env or {})}
                          ).stdout


def sbatch(*args: str) -> str:
    return run("sbatch", "--parsable", "--output=/dev/null", *args).strip().split(";")[0]


def main() -> None:
    version = re.search(r"(\d+\.\d+)", run("sinfo", "--version")).group(1)  # type: ignore[union-attr]
    roles = {
        "run": sbatch("--gres=gpu:1", "-t", "60", "-J", "run1", "--wrap", "sleep 600"),
        "run2": sbatch("-N2", "--gres=gpu:v100_g1:1", "-J", "multi node", "--wrap", "sleep 600"),
        "held": sbatch(LATER, "--gres=gpu:2", "--mem-per-cpu=500", "-c", "2", "-J", "held, one|two",
                       "--comment=a\x1fb c", "--wrap", "true"),
        "gpus": sbatch(LATER, "--gpus=3", "--exclusive", "-x", "pal-n1", "-C", "v100", "--mem=2000", "-N", "1-2",
                       "-t", "1-00:00:00", "-A", "acct1", "--wrap", "true"),
        "per_task": sbatch(LATER, "--gpus-per-task=1", "-n", "2", "-w", "pal-n2", "--wrap", "true"),
        "array": sbatch(LATER, "--array=1-5", "--gres=gpu:1", "--wrap", "true"),
        "cpu": sbatch(LATER, "-J", "cpu", "--wrap", "true"),
        "user_held": sbatch("--hold", "--gres=gpu:1", "--wrap", "true"),
        "two_nodes": sbatch(LATER, "-N2", "--gpus-per-node=1", "--mem=1500", "--exclusive=user", "-t", "30",
                            "-J", "two\nnodes", "--wrap", "true"),
        "per_socket": sbatch(LATER, "--gpus=2", "-N1", "--gpus-per-socket=1", "--sockets-per-node=1", "--wrap", "true"),
    }
    try:
        run("scontrol", "update", f"jobid={roles['held']}", "AdminComment=pal:held class=A src=default | site note")
        run("scontrol", "update", f"jobid={roles['array']}_2", "Comment=split-task")
        roles["split"] = re.search(r"JobId=(\d+)", run("scontrol", "show", "job", f"{roles['array']}_2")).group(1)  # type: ignore[union-attr]
        time.sleep(3)  # the running ones start
        out = Path(__file__).parent / version
        out.mkdir(exist_ok=True)
        lean = {"SLURM_TIME_FORMAT": "%s", "TZ": "UTC"}
        plain, strict = layouts(tuple(int(x) for x in version.split(".")))  # type: ignore[arg-type]
        (out / "squeue-lean.txt").write_text(run("squeue", "--all", "--array", "--noheader",
                                                 env={**lean, "SQUEUE_FORMAT2": plain.format()}))
        (out / "squeue-lean-strict.txt").write_text(run("squeue", "--all", "--array", "--noheader",
                                                        f"--jobs={roles['held']}",
                                                        env={**lean, "SQUEUE_FORMAT2": strict.format()}))
        (out / "squeue-lean-excluded.txt").write_text(run("squeue", "--all", "--array", "--noheader", env={
            "SQUEUE_FORMAT": parse_squeue.exclusions_format(EXCLUDED)}))
        doc = json.loads(run("squeue", "--all", "--json", "--states=all"))
        doc = {"jobs": [j for j in doc["jobs"] if str(j.get("job_id")) in set(roles.values())]}
        (out / "squeue-lean.json").write_text(json.dumps(doc, indent=1) + "\n")
        (out / "show-job-detail.txt").write_text(run("scontrol", "-d", "show", "job", roles["run2"]))
        (out / "roles.json").write_text(json.dumps(roles, indent=1) + "\n")
        print(f"written to {out}: {roles}")
    finally:
        run("scancel", *roles.values())


if __name__ == "__main__":
    main()
