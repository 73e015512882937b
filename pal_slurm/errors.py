"""One root exception type, so the CLI boundary can turn every known failure into one line."""

from __future__ import annotations


class PalError(Exception):
    """Base of every error pal-slurm raises on purpose; the CLI prints it as one line (exit 1)."""


class ConfigError(PalError):
    """The configuration file or an override is invalid; the message names the key."""


class DatabaseError(PalError):
    """The database is unreachable, or its schema is missing or newer than this code."""


class InputError(PalError):
    """Bad user input (a profile file, an option value); the message names file:line where it can."""

    def __init__(self, message: str, *, source: str | None = None, line: int | None = None) -> None:
        self.source = source
        self.line = line
        where = f"{source}:{line}: " if source is not None and line is not None else (f"{source}: " if source else "")
        super().__init__(f"{where}{message}")


class SlurmError(PalError):
    """A Slurm command failed or Slurm's output could not be understood; the message says which."""


class SlurmUnavailable(SlurmError):
    """slurmctld cannot be reached (down, restarting, timed out) or the command is not installed.

    Callers treat this as transient: the placer retries next cycle and releases nothing by mistake.
    """
