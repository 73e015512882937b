"""A running job's GPU slots, per node, from `scontrol -d show job ID` (pure).

Why a second command: a running GPU job's per-node slots (`gres_detail`) are not a field of
`squeue -O` (slurm/parse_squeue.py); the CLI backend reads them once per job (they do not
change while it runs) and once more when it is seen COMPLETING.
"""

from __future__ import annotations

import re

_DETAIL = re.compile(r"^\s*Nodes=(\S+) CPU_IDs=\S* Mem=\d+ GRES=(.*)$")


def gres_detail_of(text: str, job_id: str) -> dict[str, str] | None:
    """Node (a hostlist) -> GRES detail string of one job, from `scontrol -d show job ID`;
    None when the output is not that job's record.

    Only the lines scontrol writes between the job's `NumNodes=` line and its `MinCPUsNode=`
    line are read: the user's own text (the job name comes before, comments and the command
    after) may hold newlines and lines that look like these, and never lands in between.
    A record of an array job's task starts with its own JobId too."""
    lines = text.splitlines()
    if not lines or not lines[0].startswith(f"JobId={job_id} "):
        return None
    out: dict[str, str] = {}
    inside = False
    for line in lines[1:]:
        s = line.lstrip()
        if s.startswith("NumNodes="):
            out, inside = {}, True
        elif s.startswith("MinCPUsNode="):
            if inside:
                return out
        elif inside:
            m = _DETAIL.match(line)
            if m:
                out[m.group(1)] = m.group(2).strip()
    return out if inside else None
