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


class GpuMoveRefused(InputError):
    """A node's measurement (an inventory scan, a profile file) puts a GPU on another node than
    the one it is recorded on. Why refused: a GPU node writes its own measurements, and one that
    could move any GPU to itself could take over another node's GPUs and their history; a GPU
    that really moved is moved by an admin (`--allow-move`)."""

    def __init__(self, uuid: str, recorded: str, new: str, *, source: str | None = None,
                 line: int | None = None) -> None:
        self.uuid, self.recorded, self.new = uuid, recorded, new
        super().__init__(
            f"GPU {uuid} is recorded on node {recorded}, this measurement puts it on node {new}: a node's "
            "measurements do not move a GPU to another node (nothing of it was stored); if the GPU was moved, "
            "an admin stores it with --allow-move (`pal profile import --allow-move FILE`, "
            "`pal profile inventory --allow-move` on the new node)", source=source, line=line)


class SlurmError(PalError):
    """A Slurm command failed or Slurm's output could not be understood; the message says which."""


class SlurmUnavailable(SlurmError):
    """slurmctld cannot be reached (down, restarting, timed out) or the command is not installed.

    Callers treat this as transient: the placer retries next cycle and releases nothing by mistake.
    """
