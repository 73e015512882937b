"""The command-line backend: the placer's reads and writes through squeue, sinfo and scontrol.

Every Slurm has these commands; the REST and pyslurm backends (slurm/rest_backend.py,
slurm/pyslurm_backend.py) read another way and write through this one's scontrol. The queue is
read lean (`squeue -O`, parsed by slurm/parse_squeue.py), and what is costly to read again (a
running job's GPU slots, a pending job's excluded nodes before 24.05, an unchanged record's
SlurmJob) is kept between reads.
"""

from __future__ import annotations

import logging
import math
import os
import re
import time
from collections.abc import Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

from pal_slurm.errors import SlurmError, SlurmUnavailable
from pal_slurm.slurm import parse_json, parse_squeue
from pal_slurm.slurm.command import run_command
from pal_slurm.slurm.gres_detail import gres_detail_of
from pal_slurm.slurm.hostlist import expand_nodes
from pal_slurm.slurm.model import SlurmJob, SlurmNode
from pal_slurm.slurm.priority import PriorityConfig, parse_config, parse_partition_tiers

log = logging.getLogger(__name__)

#: a Slurm release as `sinfo --version` (or pyslurm's version) writes it: major.minor first
VERSION_TEXT = re.compile(r"(\d+)\.(\d+)")


class CliBackend:
    """scontrol / squeue / sinfo through pal_slurm.slurm.command (argument lists, timeouts)."""

    name = "cli"

    def __init__(self, *, timeout: float = 30.0, env: dict[str, str] | None = None) -> None:
        self.timeout = timeout
        self.env = env
        self._version: tuple[int, int] | None = None
        #: running jobs' GPU slots: job id -> ((start time, completing), node -> GRES detail);
        #: a running job's allocation does not change, so each is read once, and once more when
        #: it ends (see `_running_slots`)
        self._slots: dict[str, tuple[tuple[float | None, bool], dict[str, str]]] = {}
        #: pending jobs' excluded nodes where squeue -O lacks them (see `_add_exclusions`)
        self._excluded: dict[str, str] = {}
        self._excluded_at = -math.inf
        #: the last full read's jobs by their fields as squeue printed them: a job whose fields
        #: did not change is the same SlurmJob again (a held job's record is the same cycle
        #: after cycle; at 10,000 held jobs converting them was a fifth of the cycle)
        self._converted: dict[tuple[tuple[str, ...], tuple[str, ...]], SlurmJob] = {}

    def _run(self, argv: Sequence[str]) -> str:
        return run_command(argv, timeout=self.timeout, env=self.env).stdout

    def _squeue(self, argv: Sequence[str], **env: str) -> str:
        """squeue with `env` added and no SQUEUE_* variable of ours (SQUEUE_STATES, SQUEUE_ARRAY,
        SQUEUE_PARTITION... would change what a read returns)."""
        base = {k: v for k, v in os.environ.items() if not k.startswith("SQUEUE_")}
        return run_command(argv, timeout=self.timeout, env={**base, **(self.env or {}), **env},
                           inherit_env=False).stdout

    def version(self) -> tuple[int, int]:
        if self._version is None:
            out = self._run(["sinfo", "--version"])
            m = VERSION_TEXT.search(out)
            if not m:
                raise SlurmError(f"sinfo --version: cannot read a version from {out.strip()[:60]!r}")
            self._version = (int(m.group(1)), int(m.group(2)))
        return self._version

    def jobs(self, only: Collection[str] | None = None) -> list[SlurmJob]:
        """The placer's jobs (see SlurmBackend.jobs) through `squeue -O`, the lean read of
        parse_squeue: squeue's own active states (pending, running, suspended, completing),
        only the fields SlurmJob holds, and only GPU or pal-tagged jobs split and converted.
        Before Slurm 24.05 pending jobs' excluded nodes come from `squeue -o %x` (`_exclusions`);
        running GPU jobs' slots come from `scontrol -d show job`, once per job.

        The whole queue is read without --array (`_whole_queue`): each pending array is one
        record there, as slurmctld holds it, instead of one per task."""
        if only is not None and not only:
            return []
        layout = parse_squeue.Layout.new(self.version())
        if only is None:
            records = self._whole_queue(layout)
        else:
            got = self._scan_read(layout, _select_jobs(only), array=True)
            if got is None:
                return []
            records = [r for r in got if r["job_id"] in only]
        records = parse_squeue.collapse_array_tasks(records)
        if not layout.has("excluded_nodes"):
            self._add_exclusions(records, full=only is None)
        slots = self._running_slots(records, prune=only is None)
        return parse_json.iter_unique(self._convert(records, slots, keep=only is None))

    def _whole_queue(self, layout: parse_squeue.Layout) -> list[dict[str, str]]:
        """Every record the placer needs, in two reads at most.

        Without --array squeue folds an array's pending tasks that were split off into their
        own records (modified, requeued: a task the placer retyped) back into the array's
        record when name and partition match, which hides their own fields (see
        parse_squeue.collapse_array_tasks); with --array it prints a record per pending task,
        which on a queue of arrays is most of the read (40 arrays of 1,000 CPU tasks: 40,000
        of 50,000 records, a third of squeue's time). So the queue is read without --array,
        and the pending arrays among the records the placer needs (GPU or pal-tagged) are read
        again, alone and with --array; their records replace what the first read said of them."""
        records = self._scan_read(layout, [], array=False) or []
        arrays = sorted({r["array_job_id"] for r in records if _pending_array(r)})
        if not arrays:
            return records
        if len(arrays) > _ARRAYS_BY_ID:  # a --jobs list that long: the whole queue with --array instead
            return self._scan_read(layout, [], array=True) or []
        again = self._scan_read(layout, [f"--jobs={','.join(arrays)}"], array=True) or []
        ids = set(arrays)
        return [r for r in records if r["array_job_id"] not in ids] + [r for r in again if r["array_job_id"] in ids]

    def _scan_read(self, layout: parse_squeue.Layout, select: Sequence[str], *,
                   array: bool) -> list[dict[str, str]] | None:
        """One squeue's records the placer needs (parse_squeue.needs_lead), a record whose own
        text holds the separator read again strictly; None when the one job asked for is gone."""
        out = self._read_squeue(layout, select, array=array)
        if out is None:
            return None
        try:
            records, unsure = layout.scan(out, parse_squeue.needs_lead)
        except parse_squeue.SlurmFormatError as exc:
            raise SlurmError(str(exc)) from exc
        del out
        if len(unsure) > _UNSURE_ALONE:  # many: the whole read again, strictly, not one squeue each
            strict = layout.strictly()
            try:
                return strict.scan(self._read_squeue(strict, select, array=array) or "", parse_squeue.needs_lead)[0]
            except parse_squeue.SlurmFormatError as exc:
                raise SlurmError(str(exc)) from exc
        for job_id in unsure:  # a separator in a job's own text: that job alone, strictly
            records += self._one(job_id, layout)
        return records

    def _convert(self, records: Sequence[dict[str, str]], slots: Mapping[str, tuple[str, ...]],
                 *, keep: bool) -> list[SlurmJob]:
        """SlurmJobs for `records`, reusing the last full read's for unchanged fields (a
        SlurmJob is immutable); `keep`: remember these for the next read (only a full read's,
        so what is kept is at most the current queue's GPU jobs)."""
        before = self._converted
        now: dict[tuple[tuple[str, ...], tuple[str, ...]], SlurmJob] = {}
        out = []
        for r in records:
            detail = slots.get(r["job_id"], ())
            key = (tuple(r.values()), tuple(detail))
            job = before.get(key)
            if job is None:
                job = parse_squeue.job_from_fields(r, gres_detail=detail)
            now[key] = job
            out.append(job)
        if keep:
            self._converted = now
        return out

    def _read_squeue(self, layout: parse_squeue.Layout, select: Sequence[str], *, array: bool = True) -> str | None:
        """squeue (--array unless `array` is False) with `layout` (SQUEUE_FORMAT2, times as epoch
        seconds); None when the one job asked for is gone."""
        try:
            return self._squeue(["squeue", "--all", *(["--array"] if array else []), "--noheader", *select],
                                SQUEUE_FORMAT2=layout.format(), SLURM_TIME_FORMAT="%s", TZ="UTC")
        except SlurmError as exc:
            if select and "invalid job id" in str(exc).lower():
                return None
            raise

    def _one(self, job_id: str, plain: parse_squeue.Layout) -> list[dict[str, str]]:
        """One job's records read alone with `plain`'s fields, strictly (see parse_squeue.Layout.scan)."""
        layout = plain.strictly()
        out = self._read_squeue(layout, [f"--jobs={job_id}"])
        try:
            return [r for r in layout.records(out or "") if r["job_id"] == job_id]
        except parse_squeue.SlurmFormatError as exc:
            raise SlurmError(str(exc)) from exc

    def _add_exclusions(self, records: Sequence[dict[str, str]], *, full: bool) -> None:
        """Pending jobs' excluded nodes where squeue -O cannot print them (before 24.05).

        A second read of the whole queue is a second job-info RPC of every job (on a queue of
        50,000, as much as the first), so each pending job's exclusions are kept: read when a
        job is first seen (alone, `squeue -j ID`, which asks slurmctld for that job only; the
        whole queue once when many are new) and read again for every job every
        EXCLUSIONS_REFRESH_S (a user may change a pending job's --exclude)."""
        pending = [r["job_id"] for r in records if r["state"] == "PENDING"]
        now = time.monotonic()
        new = [j for j in pending if j not in self._excluded]
        if full and (len(new) > _EXCLUSIONS_ALONE or now - self._excluded_at > EXCLUSIONS_REFRESH_S):
            if pending:
                self._excluded = {j: "" for j in pending} | self._exclusions([])
                self._excluded_at = now
        elif new:
            with ThreadPoolExecutor(max_workers=min(_DETAIL_READERS, len(new))) as pool:
                for job_id, found in zip(new, pool.map(lambda j: self._exclusions([f"--jobs={j}"]), new)):
                    self._excluded[job_id] = found.get(job_id, "")
        if full:
            keep = set(pending)
            self._excluded = {j: v for j, v in self._excluded.items() if j in keep}
        for r in records:
            r["excluded_nodes"] = self._excluded.get(r["job_id"], "")

    def _exclusions(self, select: Sequence[str]) -> dict[str, str]:
        """Job id -> excluded nodes (`squeue -o %x`), for a squeue whose -O lacks them (< 24.05)."""
        layout = parse_squeue.exclusions_layout()
        try:
            out = self._squeue(["squeue", "--all", "--array", "--noheader", *select],
                               SQUEUE_FORMAT=parse_squeue.exclusions_format(layout))
        except SlurmError as exc:
            if select and "invalid job id" in str(exc).lower():
                return {}
            raise
        try:
            return parse_squeue.exclusions_from(out, layout)
        except parse_squeue.SlurmFormatError as exc:
            raise SlurmError(str(exc)) from exc

    def _running_slots(self, records: Sequence[Mapping[str, str]], *, prune: bool) -> dict[str, tuple[str, ...]]:
        """Running GPU jobs -> their per-node GRES detail, in the order of their node list
        (what squeue --json calls gres_detail). Read with `scontrol -d show job ID` the first
        time a job is seen running (a few at a time, in parallel), then kept while it runs,
        and read again when it is seen COMPLETING: slurmctld frees a job's GPUs as it ends,
        and its detail is then empty (as in squeue --json), so a job waiting for them is
        placed at once, not when the node has finished the job's epilog."""
        running = {r["job_id"]: r for r in records if r["state"] in parse_squeue.RUNNING_STATES}
        if prune:
            self._slots = {k: v for k, v in self._slots.items() if k in running}
        want: list[tuple[str, tuple[float | None, bool], list[str]]] = []
        out: dict[str, tuple[str, ...]] = {}
        for job_id, r in running.items():
            key = (float(r["start_time"]) if r["start_time"].isdigit() else None, r["state"] == "COMPLETING")
            nodes = expand_nodes(r["nodes"] if r["nodes"] not in ("(null)", "N/A") else "")
            known = self._slots.get(job_id)
            if known is not None and known[0] == key and all(n in known[1] for n in nodes):
                out[job_id] = tuple(known[1][n] for n in nodes)
            elif nodes:
                want.append((job_id, key, nodes))
        if not want:
            return out
        with ThreadPoolExecutor(max_workers=min(_DETAIL_READERS, len(want))) as pool:
            found = list(pool.map(lambda w: self._detail(w[0]), want))
        for (job_id, key, nodes), per_node in zip(want, found):
            if per_node and all(n in per_node for n in nodes):
                self._slots[job_id] = (key, per_node)
                out[job_id] = tuple(per_node[n] for n in nodes)
        return out

    def _detail(self, job_id: str) -> dict[str, str] | None:
        """Node -> GRES detail of one job (`scontrol -d show job ID`); None when the job is gone."""
        try:
            text = self._run(["scontrol", "-d", "show", "job", job_id])
        except SlurmUnavailable:
            raise
        except SlurmError as exc:
            log.debug("job %s: no GPU slots read (%s)", job_id, exc)
            return None
        groups = gres_detail_of(text, job_id)
        if groups is None:
            return None
        return {node: gres for hosts, gres in groups.items() for node in expand_nodes(hosts)}

    def pending_jobs(self) -> list[SlurmJob]:
        """Every pending job, GPU or not (`jobs` reads only the placer's): what a GPU taken out of
        service is checked against (pal_slurm.slurm.quarantine_shapes), a whole-node CPU job too.
        Read strictly (a separator in a job's own text cannot shift its fields); a pending array
        is one record."""
        layout = parse_squeue.Layout.new(self.version()).strictly()
        out = self._squeue(["squeue", "--all", "--noheader", "--states=PENDING"], SQUEUE_FORMAT2=layout.format(),
                           SLURM_TIME_FORMAT="%s", TZ="UTC")
        try:
            records = list(layout.records(out))
        except parse_squeue.SlurmFormatError as exc:
            raise SlurmError(str(exc)) from exc
        if not layout.has("excluded_nodes"):
            self._add_exclusions(records, full=True)
        return [parse_squeue.job_from_fields(r) for r in records]

    def nodes(self) -> list[SlurmNode]:
        if self.version() >= (23, 2):
            doc = parse_json.load(self._run(["scontrol", "show", "node", "--json"]), "scontrol show node --json")
        else:
            doc = parse_json.load(self._run(["sinfo", "--json"]), "sinfo --json")
        return parse_json.nodes_from_doc(doc)

    def update_job(self, job_id: str, fields: Sequence[tuple[str, str]]) -> None:
        _check_job_id(job_id)
        args = ["scontrol", "update", f"jobid={job_id}"]
        for key, value in fields:
            if not re.fullmatch(r"[A-Za-z]+", key):
                raise ValueError(f"not a job field name: {key!r}")
            args.append(f"{key}={value}")
        self._run(args)

    def release(self, job_id: str) -> None:
        _check_job_id(job_id)
        self._run(["scontrol", "release", job_id])

    def hold(self, job_id: str) -> None:
        _check_job_id(job_id)
        self._run(["scontrol", "hold", job_id])

    def start_now(self, job_id: str) -> None:
        self.update_job(job_id, [("StartTime", "now")])

    def drain_node(self, name: str, reason: str) -> None:
        _check_node_name(name)
        self._run(["scontrol", "update", f"NodeName={name}", "State=DRAIN", f"Reason={reason}"])

    def partition_tiers(self) -> dict[str, int]:
        return parse_partition_tiers(self._run(["scontrol", "show", "partition", "-o"]))

    def priority_config(self) -> PriorityConfig:
        return parse_config(self._run(["scontrol", "show", "config"]))

    def set_begin(self, job_id: str, epoch: float, now: float) -> None:
        # relative to `now` (the caller's clock), so scontrol's time zone and date format do not matter
        self.update_job(job_id, [("StartTime", f"now+{max(0, math.ceil(epoch - now))}")])


#: `scontrol -d show job` (or `squeue -j`) run at once for jobs seen for the first time
_DETAIL_READERS = 8
#: records with the separator in their own text read again one by one; more: the whole queue, strictly
_UNSURE_ALONE = 8
#: the most pending GPU arrays read again by id (`--jobs`; one argument, which Linux bounds at 128 KiB)
_ARRAYS_BY_ID = 5000


def _pending_array(r: Mapping[str, str]) -> bool:
    """A pending record of a job array: squeue without --array may have folded the array's
    pending split-off tasks into it (CliBackend._whole_queue)."""
    return r["state"] == "PENDING" and r["array_task"] not in ("", "N/A")  # a job outside arrays: N/A
#: new pending jobs whose exclusions are read one by one; more: the whole queue at once
_EXCLUSIONS_ALONE = 16
#: how often every pending job's exclusions are read again (before Slurm 24.05)
EXCLUSIONS_REFRESH_S = 60.0
#: the most ids passed to squeue -j: squeue compares every job with every id asked for
_SELECT_MAX = 64


def _select_jobs(only: Collection[str] | None) -> list[str]:
    """squeue's -j for a read of a few ids (one id: slurmctld sends just that job); none for
    many (squeue would compare each job of the queue with each id) or for all."""
    if only is None or len(only) > _SELECT_MAX or not all(re.fullmatch(r"\d+", j) for j in only):
        return []
    return [f"--jobs={','.join(sorted(only))}"]


def _check_job_id(job_id: str) -> None:
    # job ids reach scontrol as one argument; still refuse anything that is not an id
    if not re.fullmatch(r"\d+(_\d+)?(\+\d+)?", job_id):
        raise SlurmError(f"not a Slurm job id: {job_id!r}")


def _check_node_name(name: str) -> None:
    # NodeName= also takes ALL, NodeSets and hostlists (`n[1-4]`, `n1,n2`): a write names one node
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name) or name.upper() == "ALL":
        raise SlurmError(f"not the name of one Slurm node: {name!r}")
