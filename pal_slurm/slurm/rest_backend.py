"""The slurmrestd backend: jobs and nodes read over REST with a JWT, writes through scontrol.

Why writes stay on the command line: slurmrestd's v0.0.38 job update has no AdminComment or
required-node field and clears `gres` only to `TresPerNode=gres:`, so a GPU request cannot be
retyped through it (checked on 22.05.8). The token's handling (where it comes from, its user,
its expiry, a refused one told from a down slurmctld) is RestBackend's; see its docstring.
"""

from __future__ import annotations

import base64
import http.client
import json
import logging
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Collection

from pal_slurm.errors import ConfigError, SlurmError, SlurmUnavailable
from pal_slurm.slurm import parse_json
from pal_slurm.slurm.cli_backend import CliBackend
from pal_slurm.slurm.model import SlurmJob, SlurmNode

log = logging.getLogger(__name__)

#: the first data_parser whose job records have no `shared` (exclusivity) field (Slurm 26.05)
SHARED_GONE = (0, 0, 45)


class RestBackend(CliBackend):
    """Reads jobs and nodes through slurmrestd (JWT), writes through scontrol.

    `url` like http://ctl:6820; `api` the API slurmrestd serves for slurmctld (v0.0.38 on
    22.05, v0.0.40-v0.0.42 on 24.11, v0.0.42-v0.0.45 on 26.05, where v0.0.42 is deprecated). The token is `token`, else SLURM_JWT, which is then removed
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
        if tuple(int(x) for x in api[1:].split(".")) >= SHARED_GONE:
            log.warning("slurmrestd API %s: its job records do not say whether a job is exclusive, so every job "
                        "reads as sharing its nodes, and a held --exclusive GPU job may be placed beside other jobs "
                        "(it then waits for the whole node); on Slurm 26.05 rest_api = \"v0.0.44\" still says it", api)
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
        # slurmrestd answers with every job (no state or job filter in v0.0.38 to v0.0.45's
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
