"""The object every `pal` command receives: global options, lazily loaded config and engine."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from pal_slurm.config import PalConfig


@dataclass
class AppContext:
    """What every command may need, built lazily so `--help` reads no file and opens no database."""

    config_path: str | None
    db_url: str | None
    debug: bool
    #: Called once with the configuration when a command first reads it (main applies [logging] level).
    on_config: Callable[[PalConfig], None] | None = field(default=None, repr=False)
    _cfg: PalConfig | None = field(default=None, repr=False)
    _engine: Engine | None = field(default=None, repr=False)

    @property
    def cfg(self) -> PalConfig:
        if self._cfg is None:
            from pal_slurm.config import load_config

            self._cfg = load_config(self.config_path, db_url=self.db_url)
            if self.on_config is not None:
                self.on_config(self._cfg)
        return self._cfg

    @property
    def engine(self) -> Engine:
        """The configured database, which must exist (a mistyped SQLite URL is refused, not created)."""
        if self._engine is None:
            from pal_slurm.db.engine import open_engine

            self._engine = open_engine(self.cfg, create=False)
        return self._engine

    def creating_engine(self) -> Engine:
        """The configured database, creating a SQLite file (only `pal db upgrade` may)."""
        if self._engine is None:
            from pal_slurm.db.engine import open_engine

            self._engine = open_engine(self.cfg, create=True)
        return self._engine

    def close(self) -> None:
        if self._engine is not None:
            self._engine.dispose()
