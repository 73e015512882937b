"""Typed configuration: /etc/pal/pal.toml, overridden by --config/PAL_CONFIG and --db/PAL_DB_URL.

Loaded once by the CLI entry point and passed down; nothing here runs at import time.
Every setting has a default, so a missing file is fine; an invalid one gives one line
that names the key and what is wrong. The sections and their checks are
pal_slurm.config.schema's; this module finds the file, the database URL (argument,
environment, systemd credential, url_file) and turns a validation error into that line.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from pal_slurm.config.schema import (
    DEFAULT_JOB_CLASSES,
    AgentConfig,
    ClassificationConfig,
    DatabaseConfig,
    IngestConfig,
    JobClassConfig,
    JobsConfig,
    LoggingConfig,
    PalConfig,
    PlacerConfig,
    ReportConfig,
    default_data_dir,
    did_you_mean,
    job_classes_of,
)
from pal_slurm.errors import ConfigError

__all__ = ["DB_URL_CREDENTIAL", "DEFAULT_CONFIG_PATH", "DEFAULT_JOB_CLASSES", "AgentConfig", "ClassificationConfig",
           "DatabaseConfig", "IngestConfig", "JobClassConfig", "JobsConfig", "LoggingConfig", "PalConfig",
           "PlacerConfig", "ReportConfig", "config_as_dict", "default_data_dir", "job_classes_of", "load_config",
           "mask_url"]

DEFAULT_CONFIG_PATH = Path("/etc/pal/pal.toml")


def _section_model(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The model of the table an error's key sits in (for the valid names of an unknown key)."""
    model: type[BaseModel] = PalConfig
    for part in loc[:-1]:
        field = model.model_fields.get(str(part))
        annotation = field.annotation if field is not None else None
        if model is PalConfig and part == "job_classes":
            return JobClassConfig if len(loc) == 3 else None
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return None
        model = annotation
    return model


def _format_error(err: ValidationError, source: str) -> str:
    first = err.errors()[0]
    loc = tuple(first["loc"])
    key = ".".join(str(p) for p in loc) or "(top level)"
    msg = first["msg"]
    if msg.startswith("Value error, "):
        msg = msg.removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        section = _section_model(loc)
        names = sorted(section.model_fields) if section is not None else []
        msg = "unknown setting" + (f"{did_you_mean(str(loc[-1]), names)}; valid: {', '.join(names)}"
                                   if names else "")
    return f"{source}: {key}: {msg}"


def load_config(
    path: str | os.PathLike[str] | None = None,
    *,
    db_url: str | None = None,
    env: Mapping[str, str] | None = None,
) -> PalConfig:
    """Build the effective configuration.

    Precedence (highest first): `db_url` argument (--db), PAL_DB_URL, the systemd credential
    `pal-db-url` (`LoadCredential=pal-db-url:/etc/pal/db-url`: a login only root may read, handed
    to one service), the file's [database] url or url_file; the file is `path` (--config), else
    PAL_CONFIG, else /etc/pal/pal.toml when it exists. An explicitly named file must exist.
    """
    env = os.environ if env is None else env
    explicit = path if path is not None else env.get("PAL_CONFIG") or None
    file = Path(explicit) if explicit else DEFAULT_CONFIG_PATH
    data: dict[str, Any] = {}
    source = str(file)
    if file.exists() or explicit:
        try:
            with open(file, "rb") as fh:
                data = tomllib.load(fh)
        except FileNotFoundError as exc:
            raise ConfigError(f"{file}: configuration file not found") from exc
        except PermissionError as exc:
            raise ConfigError(f"{file}: cannot read configuration file (permission denied)") from exc
        except IsADirectoryError as exc:
            raise ConfigError(f"{file}: is a directory, not a configuration file") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{file}: invalid TOML: {exc}") from exc
        except UnicodeDecodeError as exc:  # a binary file, or another encoding: TOML is UTF-8
            raise ConfigError(f"{file}: not a TOML file (byte {exc.start} is not UTF-8 text)") from exc
    url = db_url or env.get("PAL_DB_URL") or None
    section = data.get("database")
    if not url and env.get("CREDENTIALS_DIRECTORY"):
        url = _url_from_credential(Path(env["CREDENTIALS_DIRECTORY"]))
    if not url and isinstance(section, dict) and section.get("url_file") is not None:
        url = _url_from_file(section, file, source)
    if url:
        data.setdefault("database", {})
        if not isinstance(data["database"], dict):
            raise ConfigError(f"{source}: database: must be a table")
        data["database"] = {**data["database"], "url": url}
    if "data_dir" not in data:
        data["data_dir"] = str(default_data_dir(env))
    try:
        cfg = PalConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_error(exc, source)) from exc
    _check_across_sections(cfg, source)
    return cfg


def _url_from_file(section: dict[str, Any], config_file: Path, source: str) -> str:
    """The URL in [database] url_file (relative to the configuration file's directory): its one
    line that is not blank or a # comment. ConfigError naming the file when it cannot be read,
    holds no URL or more than one, or when `url` is set too (which of the two would win?).
    Warned about (not refused) when every user may read it: it holds a password."""
    where = f"{source}: database.url_file"
    if section.get("url") is not None:
        raise ConfigError(f"{where}: set either url or url_file, not both")
    value = section["url_file"]
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where}: must be a file name")
    path = Path(value).expanduser()
    if not path.is_absolute():
        path = config_file.parent / path
    return _read_url(path, where)


#: the systemd credential that holds the database URL (`LoadCredential=pal-db-url:FILE`)
DB_URL_CREDENTIAL = "pal-db-url"


def _url_from_credential(directory: Path) -> str | None:
    """The URL in the service's systemd credential `pal-db-url`, None when the service was given
    none (systemd copies the file, readable by the service's user alone, under
    $CREDENTIALS_DIRECTORY)."""
    path = directory / DB_URL_CREDENTIAL
    if not path.exists():
        return None
    return _read_url(path, f"systemd credential {DB_URL_CREDENTIAL}")


def _read_url(path: Path, where: str) -> str:
    """The one URL line of a credentials file (see `_url_from_file`)."""
    import logging
    import stat

    try:
        text = path.read_text(encoding="utf-8")
        mode = path.stat().st_mode
    except FileNotFoundError as exc:
        raise ConfigError(f"{where}: {path} does not exist") from exc
    except PermissionError as exc:
        raise ConfigError(f"{where}: {path} cannot be read (permission denied: it is 0640 root:pal, and this "
                          "user is not root or in group pal)") from exc
    except IsADirectoryError as exc:
        raise ConfigError(f"{where}: {path} is a directory, not a file") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{where}: {path} is not UTF-8 text") from exc
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    if len(lines) != 1:
        raise ConfigError(f"{where}: {path} must hold the database URL on one line, it has "
                          f"{'none' if not lines else len(lines)}")
    if mode & stat.S_IROTH:
        logging.getLogger(__name__).warning("%s is readable by every user and holds the database password: "
                                            "chmod 0640 %s (owner root, group pal)", path, path)
    return lines[0]


def _check_across_sections(cfg: PalConfig, source: str) -> None:
    """What one section cannot check alone, at load, so that `pal config show` and every command
    refuse it (not only the command that uses it): [jobs] thresholds against [job_classes]."""
    from pal_slurm.jobs.sensitivity import SensitivityRule

    try:
        SensitivityRule.build(list(cfg.job_classes), cfg.jobs.thresholds, min_samples=cfg.jobs.min_samples,
                              history=cfg.jobs.history)
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from exc


def mask_url(url: str) -> str:
    """The URL with its password replaced, for logs and `pal config show` (credentials never printed)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except ArgumentError:
        return "<unparseable URL>"
    # a password can also ride in the query string (?password=, ?sslpassword=, libpq's passfile
    # is a path and harmless); every such value is masked like the userinfo one
    secret = {k: "***" for k in parsed.query if any(w in k.lower() for w in ("password", "passwd", "secret", "token"))
              and not k.lower().endswith(("file", "path"))}
    if secret:
        parsed = parsed.update_query_dict(secret)
    return parsed.render_as_string(hide_password=True).replace("%2A%2A%2A", "***")


def config_as_dict(cfg: PalConfig) -> dict[str, Any]:
    """JSON/TOML-ready view of the effective configuration with secrets masked."""
    out = cfg.model_dump(mode="json")
    out["database"]["url"] = mask_url(cfg.db_url)
    return out
