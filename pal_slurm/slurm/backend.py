"""The Slurm adapter's one interface, and its backends.

Why an interface: the placer must run against the scontrol/squeue/sinfo commands every
Slurm has, against slurmrestd where a site prefers REST for reads, and against pyslurm
when its version matches. What the placer needs is small: read jobs and nodes, update a
pending job, hold and release. Writes always go through scontrol, because slurmrestd's
v0.0.38 job update cannot clear TresPerNode (design notes, section 3).
"""

from __future__ import annotations

import json
import logging
import os
import re
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from typing import Protocol

from pal_slurm.errors import ConfigError, SlurmError, SlurmUnavailable
from pal_slurm.slurm import parse_json
from pal_slurm.slurm.command import run_command
from pal_slurm.slurm.model import SlurmJob, SlurmNode

log = logging.getLogger(__name__)

Runner = Callable[..., "object"]


class SlurmBackend(Protocol):
    """Everything pal-slurm asks of Slurm."""

    name: str

    def version(self) -> tuple[int, int]: ...

    def jobs(self) -> list[SlurmJob]: ...

    def nodes(self) -> list[SlurmNode]: ...

    def update_job(self, job_id: str, fields: Sequence[tuple[str, str]]) -> None: ...

    def release(self, job_id: str) -> None: ...

    def hold(self, job_id: str) -> None: ...


_VERSION = re.compile(r"(\d+)\.(\d+)")


class CliBackend:
    """scontrol / squeue / sinfo through pal_slurm.slurm.command (argument lists, timeouts)."""

    name = "cli"

    def __init__(self, *, timeout: float = 30.0, env: dict[str, str] | None = None) -> None:
        self.timeout = timeout
        self.env = env
        self._version: tuple[int, int] | None = None

    def _run(self, argv: Sequence[str]) -> str:
        return run_command(argv, timeout=self.timeout, env=self.env).stdout

    def version(self) -> tuple[int, int]:
        if self._version is None:
            out = self._run(["sinfo", "--version"])
            m = _VERSION.search(out)
            if not m:
                raise SlurmError(f"sinfo --version: cannot read a version from {out.strip()[:60]!r}")
            self._version = (int(m.group(1)), int(m.group(2)))
        return self._version

    def jobs(self) -> list[SlurmJob]:
        doc = parse_json.load(self._run(["squeue", "--all", "--json"]), "squeue --json")
        return parse_json.iter_unique(parse_json.jobs_from_doc(doc))

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


class RestBackend(CliBackend):
    """Reads through slurmrestd (JWT), writes through scontrol.

    `url` like http://ctl:6820, `api` the data parser version slurmrestd serves (v0.0.38 on
    22.05, v0.0.40+ on 24.11); the token comes from SLURM_JWT (never logged).
    """

    name = "rest"

    def __init__(self, url: str, *, api: str = "v0.0.38", user: str | None = None, token: str | None = None,
                 timeout: float = 30.0, env: dict[str, str] | None = None) -> None:
        super().__init__(timeout=timeout, env=env)
        self.url = url.rstrip("/")
        self.api = api
        self.user = user or os.environ.get("SLURM_JWT_USER") or os.environ.get("USER", "root")
        self._token = token if token is not None else os.environ.get("SLURM_JWT", "")
        if not self._token:
            raise ConfigError("slurmrestd backend: no token (set SLURM_JWT, e.g. from `scontrol token`)")

    def _get(self, path: str) -> dict[str, object]:
        req = urllib.request.Request(f"{self.url}/slurm/{self.api}/{path}", headers={
            "X-SLURM-USER-NAME": self.user, "X-SLURM-USER-TOKEN": self._token, "Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                body = resp.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as exc:
            raise SlurmError(f"slurmrestd {path}: HTTP {exc.code} {exc.reason}") from exc
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            raise SlurmUnavailable(f"slurmrestd {path}: {getattr(exc, 'reason', exc)}") from exc
        return parse_json.load(body, f"slurmrestd {path}")

    def jobs(self) -> list[SlurmJob]:
        return parse_json.iter_unique(parse_json.jobs_from_doc(self._get("jobs")))

    def nodes(self) -> list[SlurmNode]:
        return parse_json.nodes_from_doc(self._get("nodes"))


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

    def jobs(self) -> list[SlurmJob]:
        # pyslurm's own objects differ by release; its JSON-like dicts follow the same field
        # names as squeue --json, which is what the shared parser reads
        jobs = self._pyslurm.Jobs.load()
        raw = [j.to_dict() for j in jobs.values()]
        return parse_json.iter_unique(parse_json.job_from_json(r) for r in raw)

    def nodes(self) -> list[SlurmNode]:
        nodes = self._pyslurm.Nodes.load()
        return [parse_json.node_from_json(n.to_dict()) for n in nodes.values()]


BACKENDS = ("cli", "rest", "pyslurm")


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


def _check_job_id(job_id: str) -> None:
    # job ids reach scontrol as one argument; still refuse anything that is not an id
    if not re.fullmatch(r"\d+(_\d+)?(\+\d+)?", job_id):
        raise SlurmError(f"not a Slurm job id: {job_id!r}")


def dumps(obj: object) -> str:
    return json.dumps(obj, sort_keys=True)
