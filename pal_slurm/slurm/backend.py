"""The Slurm adapter's one interface, and its backends.

Why an interface: the placer must run against the scontrol/squeue/sinfo commands every
Slurm has, against slurmrestd where a site prefers REST for reads, and against pyslurm
when its version matches. What the placer needs is small: read jobs and nodes, update a
pending job, hold and release (both kinds of hold: priority 0 through `release`/`hold`, a
begin time through `start_now`/`set_begin`). Writes always go through scontrol, because slurmrestd's
v0.0.38 job update has no AdminComment or required-node field and clears `gres` only to
`TresPerNode=gres:`, so a GPU request cannot be retyped through it (checked on 22.05.8).
"""

from __future__ import annotations

import base64
import http.client
import json
import logging
import math
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

from pal_slurm.errors import ConfigError, SlurmError, SlurmUnavailable
from pal_slurm.slurm import parse_json, parse_squeue
from pal_slurm.slurm.command import run_command
from pal_slurm.slurm.gresconf import SlurmNodeGres
from pal_slurm.slurm.hostlist import expand_nodes
from pal_slurm.slurm.model import SlurmJob, SlurmNode
from pal_slurm.slurm.priority import PriorityConfig, parse_config, parse_partition_tiers

log = logging.getLogger(__name__)


class SlurmBackend(Protocol):
    """Everything pal-slurm asks of Slurm."""

    name: str

    def version(self) -> tuple[int, int]: ...

    def jobs(self, only: Collection[str] | None = None) -> list[SlurmJob]:
        """The jobs the placer acts on that are not finished: GPU jobs and jobs with a
        pal-slurm tag (parse_squeue.placer_needs), running ones with their GPU slots
        (`gres_detail`); with `only`, just those ids. A queue's other jobs are not read."""
        ...

    def nodes(self) -> list[SlurmNode]: ...

    def update_job(self, job_id: str, fields: Sequence[tuple[str, str]]) -> None: ...

    def release(self, job_id: str) -> None:
        """End a priority-0 hold (`scontrol release`)."""
        ...

    def hold(self, job_id: str) -> None:
        """Hold with priority 0 (`scontrol hold`)."""
        ...

    def start_now(self, job_id: str) -> None:
        """End a begin-time hold: the job may start now (`StartTime=now`)."""
        ...

    def set_begin(self, job_id: str, epoch: float) -> None:
        """Hold (or keep holding) a pending job until `epoch` through its begin time."""
        ...

    def partition_tiers(self) -> dict[str, int]:
        """Partition name -> PriorityTier (Slurm's first sort key)."""
        ...

    def drain_node(self, name: str, reason: str) -> None:
        """Drain one node, named exactly (never ALL, a NodeSet or a hostlist), with `reason`."""
        ...

    def priority_config(self) -> PriorityConfig:
        """The priority plugin and its age weight (see pal_slurm.slurm.priority)."""
        ...


_VERSION = re.compile(r"(\d+)\.(\d+)")


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
            m = _VERSION.search(out)
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
        layout = parse_squeue.Layout.new(excluded_nodes=self.version() >= parse_squeue.EXCNODES_SINCE)
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
            strict = parse_squeue.Layout.new(excluded_nodes=layout.has("excluded_nodes"), strict=True)
            try:
                return strict.scan(self._read_squeue(strict, select, array=array) or "", parse_squeue.needs_lead)[0]
            except parse_squeue.SlurmFormatError as exc:
                raise SlurmError(str(exc)) from exc
        for job_id in unsure:  # a separator in a job's own text: that job alone, strictly
            records += self._one(job_id, layout.has("excluded_nodes"))
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

    def _one(self, job_id: str, excluded_nodes: bool) -> list[dict[str, str]]:
        """One job's records read alone with a strict layout (see parse_squeue.Layout.scan)."""
        layout = parse_squeue.Layout.new(excluded_nodes=excluded_nodes, strict=True)
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
        groups = parse_squeue.gres_detail_of(text, job_id)
        if groups is None:
            return None
        return {node: gres for hosts, gres in groups.items() for node in expand_nodes(hosts)}

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

    def set_begin(self, job_id: str, epoch: float) -> None:
        # relative to now, so scontrol's time zone and date format do not matter
        self.update_job(job_id, [("StartTime", f"now+{max(0, math.ceil(epoch - time.time()))}")])


class RestBackend(CliBackend):
    """Reads jobs and nodes through slurmrestd (JWT), writes through scontrol.

    `url` like http://ctl:6820; `api` the API slurmrestd serves for slurmctld (v0.0.38 on
    22.05, v0.0.40+ on 24.11). The token is `token`, else SLURM_JWT, which is then removed
    from this process's environment (`scontrol token` output, with or without its
    `SLURM_JWT=` prefix; never logged); the user name sent with it is
    `user`, else SLURM_JWT_USER, else the token's own `sun` claim (slurmctld refuses a
    token whose user differs from the header).

    Failing open (`fallback_cli`, default on): when slurmrestd cannot serve a read (down,
    token expired or refused, no token at all) the read goes through squeue/sinfo instead,
    with a warning when this starts and a note when slurmrestd serves again. The writes need
    scontrol anyway, so the CLI is there; without the fallback a fail-safe run lacking the
    token (pal placer release-stale) could not find the jobs it must release.
    With `fallback_cli=False` a failed read raises: SlurmUnavailable when slurmrestd cannot
    be reached, SlurmError naming the HTTP status otherwise.

    22.05's slurmrestd passes the token through to slurmctld: a missing token is HTTP 401,
    but a refused (bad, expired, other user's) token is HTTP 500 with the same error
    document as a down slurmctld. An expired token is recognised from its `exp`; otherwise,
    without the fallback, `scontrol ping` tells the two apart (SlurmError for the token,
    SlurmUnavailable for the controller).
    """

    name = "rest"

    def __init__(self, url: str, *, api: str = "v0.0.38", user: str | None = None, token: str | None = None,
                 timeout: float = 30.0, env: dict[str, str] | None = None, fallback_cli: bool = True) -> None:
        super().__init__(timeout=timeout, env=env)
        try:
            parts = urllib.parse.urlsplit(url)
            ok = (parts.scheme in ("http", "https") and bool(parts.hostname) and parts.port is not None
                  and not (parts.username or parts.password or parts.query or parts.fragment))
        except ValueError:  # a port that is not a number
            ok = False
        if not ok:
            raise ConfigError(f"slurmrestd backend: rest_url must be http(s)://HOST:PORT, got {url!r}")
        if not re.fullmatch(r"v\d+\.\d+\.\d+", api):
            raise ConfigError(f"slurmrestd backend: rest_api must look like v0.0.38, got {api!r}")
        self.url = url.rstrip("/")
        self.api = api
        self.fallback_cli = fallback_cli
        # Taken out of the environment: with SLURM_JWT set, Slurm's own commands authenticate
        # with the token instead of munge, so scontrol would act as the token's user (updates
        # of other users' jobs refused) and a bad token would break squeue; nor need the
        # commands this process runs see the credential.
        raw = token if token is not None else os.environ.pop("SLURM_JWT", "")
        self._token = raw.strip().removeprefix("SLURM_JWT=")
        if self._token and not re.fullmatch(r"[\x21-\x7e]+", self._token):
            raise ConfigError("slurmrestd backend: SLURM_JWT is not a token (spaces or control characters)")
        self._claims = _jwt_claims(self._token)
        self.user = (user or os.environ.get("SLURM_JWT_USER") or str(self._claims.get("sun") or "")
                     or os.environ.get("USER") or "root")
        if not re.fullmatch(r"[\x21-\x7e]+", self.user):
            raise ConfigError(f"slurmrestd backend: not a user name: {self.user!r}")
        self._failing: str | None = None  # why slurmrestd last failed, while reads fall back
        if not self._token:
            if not fallback_cli:
                raise ConfigError("slurmrestd backend: no token (set SLURM_JWT, e.g. from `scontrol token`)")
            self._fall_back("no token (set SLURM_JWT, e.g. from `scontrol token`)")
        # no proxy from the environment (the token must go to slurmrestd only), no redirects
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect())

    def _get(self, path: str) -> dict[str, object]:
        """GET /slurm/<api>/<path> as a checked JSON document (see the class for the errors)."""
        what = f"slurmrestd {self.url} {path}"
        req = urllib.request.Request(f"{self.url}/slurm/{self.api}/{path}", headers={
            "X-SLURM-USER-NAME": self.user, "X-SLURM-USER-TOKEN": self._token, "Accept": "application/json"})
        try:
            with self._opener.open(req, timeout=self.timeout) as resp:
                body = resp.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as exc:
            raise self._http_error(what, exc) from exc
        except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
            raise SlurmUnavailable(f"{what}: {getattr(exc, 'reason', None) or exc or type(exc).__name__}") from exc
        return parse_json.load(body, what)

    def _http_error(self, what: str, exc: urllib.error.HTTPError) -> SlurmError:
        head = f"{what}: HTTP {exc.code} {exc.reason}"
        if exc.code in (401, 403):
            return SlurmError(f"{head}: token or user {self.user!r} refused (SLURM_JWT, SLURM_JWT_USER)")
        if exc.code == 404:
            return SlurmError(f"{head}: this slurmrestd does not serve API {self.api} (placer.rest_api)")
        if 300 <= exc.code < 400:
            return SlurmError(f"{head}: redirects are not followed (point placer.rest_url at slurmrestd)")
        expired = self._expired()
        if expired:
            return SlurmError(f"{head}: the token expired {expired}; get a new one with `scontrol token`")
        try:
            body = exc.read().decode("utf-8", "replace")
        except (OSError, http.client.HTTPException):
            body = ""
        if body.lstrip().startswith("{"):
            try:
                parse_json.load(body, what)
            except SlurmError as inner:  # the error document 22.05 sends with HTTP 500
                said = f"{head}: {str(inner).removeprefix(what + ': ')}"
                if self.fallback_cli:  # the squeue/sinfo read that follows tells which
                    return SlurmUnavailable(f"{said} (slurmctld down, or it refused the token or user)")
                if self._ctld_up():
                    return SlurmError(f"{said}: slurmctld answers `scontrol ping`, so it refused the token "
                                      f"or user {self.user!r} (SLURM_JWT, SLURM_JWT_USER)")
                return SlurmUnavailable(f"{said}: slurmctld does not answer")
        return (SlurmUnavailable if exc.code >= 500 else SlurmError)(head)

    def _ctld_up(self) -> bool:
        """Does slurmctld answer (munge, not the token)? Tells a refused token from a down
        controller, which 22.05's slurmrestd reports alike."""
        try:
            return " is UP" in self._run(["scontrol", "ping"])
        except SlurmError:
            return False

    def _expired(self, now: float | None = None) -> str:
        """When the token's `exp` has passed, that time (UTC) as text; '' otherwise."""
        exp = self._claims.get("exp")
        if not isinstance(exp, (int, float)) or exp > (time.time() if now is None else now):
            return ""
        return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(exp))

    def _fall_back(self, why: str) -> None:
        if why != self._failing:
            log.warning("slurmrestd: %s; reading jobs and nodes through squeue/sinfo until it answers", why)
        self._failing = why

    def _read(self, path: str, parse: Callable[[dict[str, object]], list], cli: Callable[[], list]) -> list:
        if not self._token:  # only with fallback_cli (checked in __init__)
            return cli()
        try:
            result = parse(self._get(path))
        except SlurmError as exc:
            if not self.fallback_cli:
                raise
            self._fall_back(str(exc))
            return cli()
        if self._failing is not None:
            log.info("slurmrestd answers again; reading jobs and nodes through it")
            self._failing = None
        return result

    def jobs(self, only: Collection[str] | None = None) -> list[SlurmJob]:
        # slurmrestd answers with every job (no state or job filter in v0.0.38 to v0.0.42's
        # GET jobs): only the placer's are converted, and the document is dropped after
        return self._read("jobs", lambda doc: parse_json.iter_unique(
            parse_json.jobs_from_doc(doc, active_only=True, only=only, placer_only=True)),
            lambda: super(RestBackend, self).jobs(only))

    def nodes(self) -> list[SlurmNode]:
        return self._read("nodes", parse_json.nodes_from_doc, super().nodes)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is an error: the token headers must not follow it elsewhere."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # type: ignore[no-untyped-def]
        return None


def _jwt_claims(token: str) -> dict[str, object]:
    """The payload of a JWT (not verified: only to name its user and expiry); {} if unreadable."""
    parts = token.split(".")
    if len(parts) != 3:
        return {}
    try:
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (ValueError, UnicodeDecodeError):
        return {}
    return claims if isinstance(claims, dict) else {}


class PyslurmBackend(CliBackend):
    """Reads through pyslurm, only when its version matches the installed Slurm (pyslurm refuses
    to build otherwise, and a mismatched one would misread structures); writes through scontrol."""

    name = "pyslurm"

    def __init__(self, *, timeout: float = 30.0, env: dict[str, str] | None = None) -> None:
        super().__init__(timeout=timeout, env=env)
        try:
            import pyslurm  # type: ignore[import-not-found]
        except ImportError as exc:
            raise ConfigError("pyslurm backend: pyslurm is not installed (pip install 'pal-slurm[slurm]' "
                              "with a pyslurm matching your Slurm), use backend = \"cli\"") from exc
        mine = tuple(int(x) for x in _VERSION.search(str(getattr(pyslurm, "__version__", "0.0"))).groups())  # type: ignore[union-attr]
        slurm = self.version()
        if mine[:2] != slurm:
            raise ConfigError(f"pyslurm backend: pyslurm {mine[0]}.{mine[1]} does not match Slurm "
                              f"{slurm[0]}.{slurm[1]}; use backend = \"cli\"")
        self._pyslurm = pyslurm

    def jobs(self, only: Collection[str] | None = None) -> list[SlurmJob]:
        # pyslurm's own objects differ by release; its JSON-like dicts follow the same field
        # names as squeue --json, which is what the shared parser reads
        jobs = self._pyslurm.Jobs.load()
        return parse_json.iter_unique(parse_json.jobs_from_doc({"jobs": [j.to_dict() for j in jobs.values()]},
                                                               active_only=True, only=only, placer_only=True))

    def nodes(self) -> list[SlurmNode]:
        nodes = self._pyslurm.Nodes.load()
        return [parse_json.node_from_json(n.to_dict()) for n in nodes.values()]


BACKENDS = ("cli", "rest", "pyslurm")


def read_node_gres(timeout: float = 30.0, env: Mapping[str, str] | None = None) -> list[SlurmNodeGres]:
    """Each node's configured GRES and features as slurmctld reports them (`scontrol show node`),
    for comparing Slurm's configuration with the inventory."""
    from pal_slurm.slurm.nodeinfo import parse_show_node

    return parse_show_node(run_command(["scontrol", "show", "node", "-o"], timeout=timeout, env=env).stdout)


def make_backend(name: str, *, rest_url: str | None = None, rest_api: str = "v0.0.38",
                 timeout: float = 30.0) -> SlurmBackend:
    """The backend a configuration names; ConfigError with the valid names otherwise."""
    if name == "cli":
        return CliBackend(timeout=timeout)
    if name == "rest":
        if not rest_url:
            raise ConfigError("placer.slurm_backend = \"rest\" needs placer.rest_url")
        return RestBackend(rest_url, api=rest_api, timeout=timeout)
    if name == "pyslurm":
        return PyslurmBackend(timeout=timeout)
    raise ConfigError(f"unknown Slurm backend {name!r}; valid: {', '.join(BACKENDS)}")


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
