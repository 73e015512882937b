"""The placer's lean job read: `squeue -O` fields -> SlurmJob (pure); a running job's GPU slots
come from `scontrol -d show job` (slurm/gres_detail.py).

Why not `squeue --json`: a queue of 50,000 jobs is 150-450 MB of JSON (22.05 writes ~3 KB a
job, 24.11 ~9 KB), seconds for squeue to write and for us to parse, and ~13 KB of Python
objects a job: a 1 GB MemoryMax is reached at 30-40k jobs. 22.05's `squeue --json` ignores
every filter (-t, -j, -p: it dumps all jobs), so there is no smaller JSON to ask for there.
`squeue -O` writes just the fields named, is filtered by squeue on every version, and costs
~230 bytes a job; of those jobs the placer keeps only the ones it can act on
(`placer_needs`). A running GPU job's per-node slots (`gres_detail`) are not an `-O` field:
they come from `scontrol -d show job ID` once per job (they do not change while it runs)
and once more when it is seen COMPLETING (slurmctld frees them as the job ends).

Each record ends with a marker holding a token made afresh for every read (`Layout.new`): a
field value (a job name, a comment, a command: the user's text, newlines included) cannot
contain a string the user did not know when submitting, so no value can end a record early
or forge a record of another job. Fields are separated by one control character, cheap to
print and to split; a record whose own text holds it has more fields than asked for and is
read again alone with the token between fields too (`Layout.scan`, `strict`). The format
reaches squeue through SQUEUE_FORMAT2 (the environment, which other users cannot read), not
through the argument list.

What `-O` says differently from the JSON, and how it is read (checked on 22.05 and 24.11):
- times follow SLURM_TIME_FORMAT; the read sets `%s` (epoch seconds); unset is `N/A`,
  `NONE` or `Unknown`.
- `maxnodes` prints the node count when no maximum was asked for; the placer reads a
  maximum equal to the node count the same way as none (shapes.request_shape,
  slurm_updates.stranded).
- `minmemory` loses whether the memory is per CPU or per node; the job's TRES (`mem=`, the
  total Slurm reserves) tells: per CPU when it is the amount times the CPUs, else per node.
  Where both fit, the CPUs equal the nodes and both mean the same memory on each node.
- `numnodes` of a pending job counts its required nodes; the TRES `node=` is the node
  count Slurm holds (the JSON's node_count), read first.
- `ExcNodes` exists from 24.05 on; earlier, excluded nodes come from `squeue -o %x`
  (`exclusions_from`).
- a job that keeps its nodes to itself: `OverSubscribe` NO, USER, MCS or TOPO up to 25.11; 26.05
  split that field, and `Exclusive` (NO, NODE, USER, MCS, TOPO) says it (OverSubscribe: NO for all).
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from pal_slurm.slurm.model import SlurmJob

#: (SlurmJob field or a helper name, squeue -O field): fields squeue knows on 22.05 through 26.05
#: (`gres` is tres_per_node: 24.11 lists it as a hidden field, `tres-per-node` exists on 22.05
#: and 26.05 only)
FIELDS: tuple[tuple[str, str], ...] = (
    # first the fields that tell whether the placer needs a job (`LEAD`): none holds the user's
    # free text, so they are read right even in a record whose free text holds a separator
    ("job_id", "jobid"),
    ("tres_per_node", "gres"),
    ("tres_per_job", "tres-per-job"),
    ("tres_per_task", "tres-per-task"),
    ("tres_per_socket", "tres-per-socket"),
    ("admin_comment", "admin_comment"),
    ("array_job_id", "arrayjobid"),
    ("array_task", "arraytaskid"),
    ("het_job_id", "hetjobid"),
    ("state", "state"),
    ("state_reason", "reason"),
    ("priority", "prioritylong"),
    ("partition", "partition"),
    ("submit_time", "submittime"),
    ("tres", "tres-alloc"),
    ("required_nodes", "reqnodes"),
    ("features", "feature"),
    ("account", "account"),
    ("nodes", "nodelist"),
    ("num_nodes", "numnodes"),
    ("cpus", "numcpus"),
    ("min_cpus_per_node", "mincpus"),
    ("min_memory", "minmemory"),
    ("shared", "oversubscribe"),
    ("start_time", "starttime"),
    ("begin_time", "eligibletime"),
    ("max_nodes", "maxnodes"),
    ("time_limit", "timelimit"),
    ("end_time", "endtime"),
    ("user", "username"),
    ("comment", "comment"),
    ("name", "name"),
    ("command", "command"),
)
#: how many leading FIELDS decide whether a job is read whole (`needs_gpu_fields`)
LEAD = 6
#: squeue -O knows ExcNodes from Slurm 24.05 on
EXCLUDED: tuple[str, str] = ("excluded_nodes", "excnodes")
EXCNODES_SINCE = (24, 5)
#: and Exclusive from 26.05 on, where OverSubscribe stopped saying it (see the module)
EXCLUSIVE: tuple[str, str] = ("exclusive", "exclusive")
EXCLUSIVE_SINCE = (26, 5)


def fields_for(version: tuple[int, int]) -> tuple[tuple[str, str], ...]:
    """The fields the placer asks squeue -O for on Slurm `version`: FIELDS and what it added."""
    added = ((EXCLUDED,) if version >= EXCNODES_SINCE else ()) + ((EXCLUSIVE,) if version >= EXCLUSIVE_SINCE else ())
    return FIELDS + added


#: what squeue prints for a field that is not set
_UNSET = frozenset({"", "N/A", "(null)", "None", "NONE", "Unknown", "n/a"})
#: job states the placer reads a running job's GPU slots for (SlurmJob.running)
RUNNING_STATES = frozenset({"RUNNING", "COMPLETING", "CONFIGURING"})


@dataclass(frozen=True)
class Layout:
    """One read's field list and separators.

    Records end with `end`, which holds `token`, random per read: no value can end a record
    early or start one of another job (see the module). Fields are separated by `sep`: one
    control character (\\x1f), cheap for squeue to print and for us to split; a record whose
    free text holds that character splits into more fields than asked for, and is read again
    alone with a `strict` layout, whose separator holds the token too (`scan`)."""

    fields: tuple[tuple[str, str], ...]
    token: str
    strict: bool = False

    @classmethod
    def new(cls, version: tuple[int, int], *, strict: bool = False) -> Layout:
        """The fields of `version` (`fields_for`), a new token."""
        return cls(fields_for(version), secrets.token_hex(8), strict)

    def strictly(self) -> Layout:
        """The same fields, strictly, with a new token: a record read again alone."""
        return Layout(self.fields, secrets.token_hex(8), strict=True)

    def has(self, key: str) -> bool:
        return any(k == key for k, _n in self.fields)

    @property
    def sep(self) -> str:
        """After every field but the last."""
        return f"\x1f{self.token}\x1f" if self.strict else "\x1f"

    @property
    def end(self) -> str:
        """After the last field (squeue then writes a newline)."""
        return f"\x1e{self.token}\x1e"

    def format(self) -> str:
        """The value of SQUEUE_FORMAT2 (-O): `field:0<suffix>`, width 0 printing values whole."""
        names = [name for _key, name in self.fields]
        return ",".join(f"{n}:0{self.sep}" for n in names[:-1]) + f",{names[-1]}:0{self.end}"

    def records(self, text: str) -> Iterator[dict[str, str]]:
        """Each job's fields by SlurmJob name. A record without exactly the fields asked for
        raises SlurmFormatError (with `strict`, only a squeue that printed something else: a
        header, a warning; see `scan` for the plain layout)."""
        want = len(self.fields)
        keys = [k for k, _n in self.fields]
        for chunk in self._chunks(text):
            values = chunk.split(self.sep)
            if len(values) != want:
                raise SlurmFormatError(f"squeue -O: a record with {len(values)} fields, {want} asked for: "
                                       f"{chunk[:120]!r}")
            yield dict(zip(keys, values))

    def scan(self, text: str, keep: Callable[[Sequence[str]], bool]) -> tuple[list[dict[str, str]], list[str]]:
        """The records whose LEAD fields `keep` accepts, split whole; and the job ids of such
        records that split into more fields than asked for (a separator in the user's text: read
        those again alone, strictly). Records not kept are never split past their LEAD fields:
        on a queue of 50,000 CPU jobs that is most of the work saved."""
        want = len(self.fields)
        keys = [k for k, _n in self.fields]
        sep = self.sep
        out: list[dict[str, str]] = []
        unsure: list[str] = []
        for chunk in self._chunks(text):
            lead = chunk.split(sep, LEAD)
            if len(lead) <= LEAD:
                raise SlurmFormatError(f"squeue -O: a record with {len(lead)} fields, {want} asked for: "
                                       f"{chunk[:120]!r}")
            if not keep(lead):
                continue
            values = chunk.split(sep)
            if len(values) == want:
                out.append(dict(zip(keys, values)))
            else:
                unsure.append(lead[0])
        return out, unsure

    def _chunks(self, text: str) -> Iterator[str]:
        end = self.end + "\n"
        for chunk in text.split(end):
            if chunk.strip():
                yield chunk


class SlurmFormatError(ValueError):
    """squeue printed records that are not the fields asked for."""


def collapse_array_tasks(records: Iterable[dict[str, str]]) -> list[dict[str, str]]:
    """One record per job id, as slurmctld holds them (and squeue --json lists them).

    The read runs squeue with --array: without it squeue merges an array's pending tasks
    that were split off into their own records (modified, requeued) back into the array's
    record when name and partition match, hiding them and their own fields (and 23.02
    removed --array-unique, which turned that off). --array instead prints the array's record
    once per pending task, under the array's job id; those lines become one record again
    here, its tasks written as Slurm writes them (`1,3-5`)."""
    out: dict[str, dict[str, str]] = {}
    tasks: dict[str, list[int]] = {}
    for r in records:
        job_id = r["job_id"]
        task = r["array_task"]
        out.setdefault(job_id, r)
        if task.isdigit() and job_id == r["array_job_id"]:
            tasks.setdefault(job_id, []).append(int(task))
    for job_id, ids in tasks.items():
        out[job_id]["array_task"] = _ranges(sorted(set(ids)))
    return list(out.values())


def _ranges(ids: Sequence[int]) -> str:
    """[1, 3, 4, 5] -> `1,3-5`."""
    parts: list[str] = []
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        parts.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ",".join(parts)


def exclusions_layout() -> Layout:
    """`squeue -o` (SQUEUE_FORMAT) for the excluded nodes of pending jobs, where -O lacks them (before 24.05)."""
    return Layout((("job_id", "%A"), ("excluded_nodes", "%x")), secrets.token_hex(8), strict=True)


def exclusions_format(layout: Layout) -> str:
    return f"%A{layout.sep}%x{layout.end}"


def exclusions_from(text: str, layout: Layout) -> dict[str, str]:
    """Job id -> excluded nodes, for the jobs that exclude any."""
    return {r["job_id"]: _str(r["excluded_nodes"]) for r in layout.records(text) if _str(r["excluded_nodes"])}


def _str(value: str) -> str:
    return "" if value in _UNSET else value


def _int(value: str) -> int | None:
    try:
        return int(value)
    except ValueError:
        return None


def _time(value: str) -> float | None:
    """Epoch seconds (SLURM_TIME_FORMAT=%s); None when unset."""
    n = _int(value)
    return float(n) if n else None


_UNITS = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 ** 2, "P": 1024 ** 3}
_MEM = re.compile(r"(\d+(?:\.\d+)?)([KMGTP]?)")


def mem_mb(value: str) -> int | None:
    """`500M`, `16G`, `1.50T`, `2000` (MB) -> MB; None when unset or unreadable."""
    m = _MEM.fullmatch(value.strip())
    if not m:
        return None
    return int(round(float(m.group(1)) * _UNITS[m.group(2) or "M"]))


def tres_items(value: str) -> dict[str, str]:
    """`cpu=2,mem=1000M,node=1,billing=2` -> {"cpu": "2", "mem": "1000M", ...}."""
    out: dict[str, str] = {}
    for part in _str(value).split(","):
        key, eq, val = part.partition("=")
        if eq:
            out[key] = val
    return out


def time_limit_s(value: str) -> float | None:
    """`1-00:00:00`, `1:00:00`, `30:00`, `45` (minutes) -> seconds; None when unlimited or unset."""
    value = value.strip()
    if value in _UNSET or value in ("UNLIMITED", "INVALID", "NOT_SET"):
        return None
    days, _dash, rest = value.rpartition("-")
    parts = rest.split(":")
    try:
        nums = [int(p) for p in parts]
        d = int(days) if days else 0
    except ValueError:
        return None
    if len(nums) == 1:  # minutes alone
        secs = nums[0] * 60
    elif len(nums) == 2:  # minutes:seconds
        secs = nums[0] * 60 + nums[1]
    elif len(nums) == 3:
        secs = nums[0] * 3600 + nums[1] * 60 + nums[2]
    else:
        return None
    total = d * 86400 + secs
    return float(total) if total > 0 else None


#: OverSubscribe values of a job that does not share its nodes, up to 25.11 (job_share_string)
_NOT_SHARED = frozenset({"NO", "USER", "MCS", "TOPO"})


def _exclusive(f: Mapping[str, str]) -> bool:
    """26.05's Exclusive where asked for (anything but NO), else OverSubscribe (see the module)."""
    if "exclusive" in f:
        return _str(f["exclusive"]).upper() not in ("", "NO")
    return _str(f["shared"]).upper() in _NOT_SHARED


def job_from_fields(f: Mapping[str, str], *, gres_detail: Sequence[str] = ()) -> SlurmJob:
    """One record (`Layout.records`) as a SlurmJob, read as the JSON parser reads it
    (parse_json.job_from_json): unset fields are empty or None."""
    task = _str(f["array_task"])
    tres = tres_items(f["tres"])
    cpus = _int(f["cpus"]) or 1
    nodes_tres = _int(tres.get("node", ""))
    node_count = nodes_tres or _int(f["num_nodes"]) or 1
    memory = mem_mb(f["min_memory"]) or 0
    total = mem_mb(tres.get("mem", "")) if "mem" in tres else None
    per_cpu = bool(memory) and total is not None and total == memory * cpus and total != memory * node_count
    het = _str(f["het_job_id"])
    return SlurmJob(
        job_id=f["job_id"],
        name=_str_keep(f["name"]),
        user=_str(f["user"]),
        state=_str(f["state"]).upper() or "UNKNOWN",
        state_reason=f["state_reason"] if f["state_reason"] != "(null)" else "",
        priority=_int(f["priority"]),
        partition=_str(f["partition"]),
        submit_time=_time(f["submit_time"]) or 0.0,
        tres_per_node=_str(f["tres_per_node"]),
        tres_per_job=_str(f["tres_per_job"]),
        tres_per_task=_str(f["tres_per_task"]),
        tres_per_socket=_str(f["tres_per_socket"]),
        required_nodes=_str(f["required_nodes"]),
        excluded_nodes=_str(f.get("excluded_nodes", "")),
        features=_str(f["features"]),
        comment=_str_keep(f["comment"]),
        admin_comment=_str_keep(f["admin_comment"]),
        command=_str_keep(f["command"]),
        account=_str(f["account"]),
        nodes=_str(f["nodes"]),
        node_count=node_count,
        cpus=cpus,
        min_cpus_per_node=_int(f["min_cpus_per_node"]) or 1,
        memory_per_node_mb=None if per_cpu or not memory else memory,
        memory_per_cpu_mb=memory if per_cpu else None,
        gres_detail=tuple(gres_detail),
        array_job_id=_str(f["array_job_id"]) if task else "",
        array_task=task,
        het_job_id="" if het in ("", "0") else het,
        exclusive=_exclusive(f),
        start_time=_time(f["start_time"]),
        begin_time=_time(f["begin_time"]),
        max_nodes=_int(f["max_nodes"]) or None,
        time_limit_s=time_limit_s(f["time_limit"]),
        end_time=_time(f["end_time"]),
    )


def _str_keep(value: str) -> str:
    """Free text: only squeue's NULL spelling is unset (a comment may well say `None`)."""
    return "" if value == "(null)" else value


def needs_lead(lead: Sequence[str]) -> bool:
    """Whether a record is a job the placer acts on (see placer_needs), from its LEAD fields
    (job id, the four request fields, the admin comment) before the rest is split."""
    return lead[5].startswith("pal") or "gpu" in lead[1] or "gpu" in lead[2] or "gpu" in lead[3] or "gpu" in lead[4]


def needs_gpu_fields(f: Mapping[str, str]) -> bool:
    """`needs_lead` of a record already split."""
    return needs_lead([f[k] for k, _n in FIELDS[:LEAD]])


def placer_needs(job: SlurmJob) -> bool:
    """The jobs the placer reads: GPU jobs (any GPU in a request field) and jobs carrying a
    pal-slurm tag. Every job it holds, places, rescues or audits, and every running job whose
    GPUs it must know, is one of these; the rest of a queue (CPU jobs) it never looks at."""
    return (job.admin_comment.startswith("pal")
            or any("gpu" in t for t in (job.tres_per_node, job.tres_per_job, job.tres_per_task, job.tres_per_socket)))


__all__ = ["collapse_array_tasks", "exclusions_format", "exclusions_from", "exclusions_layout", "EXCLUSIVE_SINCE",
           "EXCNODES_SINCE", "FIELDS", "fields_for", "job_from_fields", "Layout", "LEAD", "mem_mb", "needs_gpu_fields",
           "needs_lead", "placer_needs", "RUNNING_STATES", "SlurmFormatError", "time_limit_s", "tres_items"]
