"""The pyslurm backend: jobs and nodes read through pyslurm, writes through scontrol."""

from __future__ import annotations

from collections.abc import Collection

from pal_slurm.errors import ConfigError
from pal_slurm.slurm import parse_json
from pal_slurm.slurm.cli_backend import VERSION_TEXT, CliBackend
from pal_slurm.slurm.model import SlurmJob, SlurmNode


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
        mine = tuple(int(x) for x in VERSION_TEXT.search(str(getattr(pyslurm, "__version__", "0.0"))).groups())  # type: ignore[union-attr]
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
