"""Slurm's JSON output -> SlurmJob / SlurmNode (pure), for Slurm 22.05, 24.11 and 26.05 alike.

Why tolerant: 22.05 (openapi v0.0.38) writes plain integers and strings; 24.11 and 26.05
(data_parser v0.0.40 to v0.0.45) write numbers as `{"set": .., "infinite": .., "number": ..}`,
states as lists (`["PENDING"]`, `["IDLE", "DRAIN"]`), features as lists, and groups
`sinfo --json` differently (so on 24.11 nodes come from `scontrol show node --json`).
Each field is read through a small coercion helper so a missing or re-shaped field
degrades to a default instead of breaking a placement cycle.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from pal_slurm.errors import SlurmError, SlurmUnavailable
from pal_slurm.slurm.model import SlurmJob, SlurmNode

try:  # squeue --json of a busy cluster is megabytes, read every cycle: orjson parses it ~3x faster
    import orjson

    def _loads(text: str) -> Any:
        return orjson.loads(text)
except ImportError:  # pragma: no cover - orjson is a dependency; the stdlib parser gives the same objects
    _loads = json.loads


def load(text: str, what: str) -> dict[str, Any]:
    """Decode one JSON document; SlurmError naming the command when it is not JSON or has errors."""
    try:
        doc = _loads(text)
    except json.JSONDecodeError as exc:
        raise SlurmError(f"{what}: output is not JSON ({exc.msg} at line {exc.lineno})") from exc
    except ValueError as exc:  # orjson.JSONDecodeError is a ValueError
        raise SlurmError(f"{what}: output is not JSON ({str(exc).splitlines()[0][:120]})") from exc
    if not isinstance(doc, dict):
        raise SlurmError(f"{what}: expected a JSON object")
    errors = doc.get("errors") or []
    # 22.05 squeue says error_number, 22.05 sinfo says errno, later versions error_code
    real = [e for e in errors if isinstance(e, Mapping)
            and (e.get("error_number") or e.get("error_code") or e.get("errno"))]
    if real:
        e = real[0]
        message = f"{what}: {e.get('description') or e.get('error') or e}"
        # 22.05 answers "controller down" with exit 0 and an error document without data
        # ("Failed while looking for jobs"): a read that saw nothing is a transient failure
        if not (doc.get("jobs") or doc.get("nodes") or doc.get("sinfo")):
            raise SlurmUnavailable(message)
        raise SlurmError(message)
    return doc


def number(value: Any, default: int | None = None) -> int | None:
    """Plain int, numeric string, or 24.11's {set, infinite, number}; None/default when unset."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value)
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return default
    if isinstance(value, Mapping):
        if value.get("infinite"):
            return default
        if value.get("set") is False:
            return default
        return number(value.get("number"), default)
    return default


def text(value: Any) -> str:
    """A string field; lists (24.11) joined with commas; None -> ''."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)):
        return ",".join(text(v) for v in value)
    if isinstance(value, Mapping) and "number" in value:
        n = number(value)
        return "" if n is None else str(n)
    return str(value)


def states(value: Any) -> list[str]:
    """`"PENDING"`, `["PENDING"]`, `"idle"`, `["IDLE", "DRAIN"]` -> upper-case list."""
    if value is None:
        return []
    if isinstance(value, str):
        return [p for p in value.upper().replace("+", ",").split(",") if p]
    return [str(v).upper() for v in value]


def feature_set(value: Any) -> frozenset[str]:
    if isinstance(value, (list, tuple)):
        return frozenset(str(v) for v in value if v)
    return frozenset(f for f in text(value).split(",") if f)


def _flag_true(value: Any) -> bool:
    return bool(value) and value not in ("0", "NO", "no")


def job_from_json(raw: Mapping[str, Any]) -> SlurmJob:
    st = states(raw.get("job_state"))
    array_job = number(raw.get("array_job_id"), 0) or 0
    task_string = text(raw.get("array_task_string"))
    task_id = number(raw.get("array_task_id"))
    het = number(raw.get("het_job_id"), 0) or 0
    # `shared` up to data_parser v0.0.44 (26.05 still serves it); v0.0.45 (26.05) has no such
    # field in a job record (`shared` is an empty list): there the job reads as not exclusive
    shared = text(raw.get("shared"))
    exclusive = shared.lower() in ("none", "exclusive", "user", "mcs", "topo") or _flag_true(raw.get("exclusive"))
    prio = raw.get("priority")
    return SlurmJob(
        job_id=str(number(raw.get("job_id"), 0)),
        name=text(raw.get("name")),
        user=text(raw.get("user_name")) or str(number(raw.get("user_id"), "")),
        state=st[0] if st else "UNKNOWN",
        state_reason=text(raw.get("state_reason")),
        priority=number(prio),
        partition=text(raw.get("partition")),
        submit_time=float(number(raw.get("submit_time"), 0) or 0),
        tres_per_node=text(raw.get("tres_per_node")),
        tres_per_job=text(raw.get("tres_per_job")),
        tres_per_task=text(raw.get("tres_per_task")),
        tres_per_socket=text(raw.get("tres_per_socket")),
        required_nodes=text(raw.get("required_nodes")),
        excluded_nodes=text(raw.get("excluded_nodes")),
        features=text(raw.get("features")),
        comment=text(raw.get("comment")),
        admin_comment=text(raw.get("admin_comment")),
        command=text(raw.get("command")),
        account=text(raw.get("account")),
        nodes=text(raw.get("nodes")),
        node_count=number(raw.get("node_count"), 1) or 1,
        cpus=number(raw.get("cpus"), 1) or 1,
        min_cpus_per_node=number(raw.get("minimum_cpus_per_node"), 1) or 1,
        memory_per_node_mb=number(raw.get("memory_per_node")),
        memory_per_cpu_mb=number(raw.get("memory_per_cpu")),
        gres_detail=tuple(text(g) for g in (raw.get("gres_detail") or []) if g),
        array_job_id=str(array_job) if array_job else "",
        array_task=task_string or ("" if task_id is None else str(task_id)),
        het_job_id=str(het) if het else "",
        exclusive=exclusive,
        start_time=float(number(raw.get("start_time"), 0) or 0) or None,
        begin_time=float(number(raw.get("eligible_time"), 0) or 0) or None,
        max_nodes=number(raw.get("max_nodes"), 0) or None,
        time_limit_s=_minutes(raw.get("time_limit")),
        end_time=float(number(raw.get("end_time"), 0) or 0) or None,
    )


#: 22.05 writes an unlimited time limit as INFINITE (0xffffffff) or NO_VAL; 24.11 as infinite
_UNSET32 = 0xFFFFFFFE


def _minutes(value: Any) -> float | None:
    """A time limit in minutes (plain or {set, infinite, number}) as seconds; None if unlimited."""
    n = number(value)
    return None if n is None or n <= 0 or n >= _UNSET32 else n * 60.0


#: job states after which nothing of a job matters to placement (squeue keeps them MinJobAge s)
FINISHED_STATES = frozenset({"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL",
                             "DEADLINE", "OUT_OF_MEMORY", "REVOKED", "SPECIAL_EXIT"})


def jobs_from_doc(doc: Mapping[str, Any], *, active_only: bool = False,
                  only: Collection[str] | None = None, placer_only: bool = False) -> list[SlurmJob]:
    """`squeue --json` (22.05, 24.11) or `scontrol show job --json` (24.11).

    active_only skips finished jobs before converting them: on a busy cluster squeue lists
    thousands of them (22.05 ignores --states with --json) and the placer needs none.
    placer_only keeps only the jobs the placer acts on (`placer_needs_raw`: GPU jobs and
    pal-tagged ones), looked at in the raw document, so a queue's CPU jobs are never
    converted (a SlurmJob of a 24.11 job is ~2 KB more to keep)."""
    raw = (j for j in doc.get("jobs") or [] if isinstance(j, Mapping))
    if only is not None:  # e.g. re-reading just the jobs a cycle changed: convert nothing else
        raw = (j for j in raw if str(number(j.get("job_id"), 0)) in only)
    if placer_only:
        raw = (j for j in raw if placer_needs_raw(j))
    if active_only:
        raw = (j for j in raw if not (set(states(j.get("job_state"))[:1]) & FINISHED_STATES))
    return [job_from_json(j) for j in raw]


_GPU_FIELDS = ("tres_per_node", "tres_per_job", "tres_per_task", "tres_per_socket")


def placer_needs_raw(raw: Mapping[str, Any]) -> bool:
    """A raw JSON job the placer acts on: any GPU in a request field, or a pal-slurm tag (the
    same rule as parse_squeue.placer_needs, on the unconverted document)."""
    return (text(raw.get("admin_comment")).startswith("pal")
            or any("gpu" in text(raw.get(k)) for k in _GPU_FIELDS))


def node_from_json(raw: Mapping[str, Any]) -> SlurmNode:
    st = states(raw.get("state"))
    flags = set(st[1:]) | {s for s in states(raw.get("state_flags"))}
    base = st[0] if st else "UNKNOWN"
    if base in ("DRAIN", "DRAINED"):  # some outputs put a flag first
        flags.add(base)
        base = next((s for s in st[1:] if s not in flags), "IDLE")
    alloc_mem = number(raw.get("alloc_memory"), 0) or 0
    partitions = raw.get("partitions") or []
    if isinstance(partitions, str):
        partitions = [p for p in partitions.split(",") if p]
    return SlurmNode(
        name=text(raw.get("name")),
        state=base,
        flags=frozenset(flags),
        cpus=number(raw.get("cpus"), 0) or 0,
        alloc_cpus=number(raw.get("alloc_cpus"), 0) or 0,
        real_memory_mb=number(raw.get("real_memory"), 0) or 0,
        alloc_memory_mb=alloc_mem,
        features=feature_set(raw.get("features")),
        active_features=feature_set(raw.get("active_features")),
        partitions=tuple(str(p) for p in partitions),
        gres=text(raw.get("gres")),
        gres_used=text(raw.get("gres_used")),
    )


def nodes_from_doc(doc: Mapping[str, Any]) -> list[SlurmNode]:
    """`sinfo --json` of 22.05 (`.nodes[]`) or `scontrol show node --json` of 24.11 (`.nodes[]`).

    24.11's `sinfo --json` groups nodes under `.sinfo[]` without per-node GRES use; it is
    refused with a message pointing at the right command rather than misread.
    """
    nodes = doc.get("nodes")
    if nodes is None and "sinfo" in doc:
        raise SlurmError("sinfo --json of Slurm >= 23.02 has no per-node GPU use; read `scontrol show node --json`")
    return [node_from_json(n) for n in nodes or [] if isinstance(n, Mapping)]


def iter_unique(jobs: Iterable[SlurmJob]) -> list[SlurmJob]:
    """squeue may list a job twice (array/het expansions); keep the first of each id."""
    seen: set[str] = set()
    out = []
    for j in jobs:
        if j.job_id not in seen:
            seen.add(j.job_id)
            out.append(j)
    return out
