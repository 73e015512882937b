"""Which GPU backend to use: NVML on a node with NVIDIA GPUs, the simulator only when asked.

Rule: `auto` picks NVML when libnvidia-ml loads and counts GPUs, or when /dev/nvidia0
exists (then NVML's own error explains what is wrong); with neither it stops and says
to pass `--backend sim`. The simulated fleet is never chosen silently, and is refused on
a node that has NVIDIA GPUs unless `--force-sim`: profiling results of a fake GPU
written for a real one would steer real jobs.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pal_slurm.errors import InputError, PalError
from pal_slurm.gpu.interface import BackendUnavailable, GpuBackend

__all__ = ["BackendChoice", "NvidiaProbe", "SimOptions", "choose_backend", "open_backend", "probe_nvidia"]

log = logging.getLogger(__name__)

BackendChoice = Literal["auto", "nvml", "sim"]
_DEVICE_FILE = re.compile(r"nvidia\d+")


class BackendRefused(PalError):
    """The requested backend must not be used here (sim on a GPU node, auto with no GPU)."""


@dataclass(frozen=True)
class NvidiaProbe:
    """What this machine shows of NVIDIA GPUs, found without opening any for work."""

    device_files: tuple[str, ...]  # /dev/nvidiaN
    nvml_gpus: int | None  # GPUs NVML counts; None when NVML cannot start
    nvml_error: str | None = None

    @property
    def has_gpus(self) -> bool:
        return bool(self.device_files) or bool(self.nvml_gpus)

    def describe(self) -> str:
        parts = []
        if self.device_files:
            parts.append(", ".join(self.device_files[:4]) + (" ..." if len(self.device_files) > 4 else ""))
        if self.nvml_gpus:
            parts.append(f"NVML counts {self.nvml_gpus} GPU{'s' if self.nvml_gpus != 1 else ''}")
        return "; ".join(parts) or f"no /dev/nvidiaN, NVML: {self.nvml_error or 'no GPUs'}"


def probe_nvidia(dev_dir: Path = Path("/dev"), nvml_loader: Callable[[], Any] | None = None) -> NvidiaProbe:
    """Look for NVIDIA device files and ask NVML how many GPUs it sees (then shut it down)."""
    from pal_slurm.gpu.nvml import NvmlBackend

    try:
        files = tuple(sorted((str(p) for p in dev_dir.iterdir() if _DEVICE_FILE.fullmatch(p.name)),
                             key=lambda s: int(s.rsplit("nvidia", 1)[1])))
    except OSError:
        files = ()
    try:
        backend = NvmlBackend(node="probe", nvml=nvml_loader() if nvml_loader else None)
    except BackendUnavailable as exc:
        return NvidiaProbe(files, None, str(exc))
    try:
        return NvidiaProbe(files, backend.device_count())
    finally:
        backend.close()


def choose_backend(requested: BackendChoice, probe: NvidiaProbe, *, force_sim: bool = False) -> Literal["nvml", "sim"]:
    """The backend to open for `requested`, or BackendRefused saying what to do instead."""
    if requested == "nvml":
        return "nvml"
    if requested == "sim":
        if probe.has_gpus and not force_sim:
            raise BackendRefused(
                f"this node has NVIDIA GPUs ({probe.describe()}): refusing the simulated backend, whose results "
                "would be stored as if measured; use --backend nvml, or --force-sim to simulate anyway"
            )
        return "sim"
    if requested != "auto":
        raise InputError(f"unknown backend {requested!r} (auto, nvml or sim)")
    if probe.nvml_gpus or probe.device_files:
        return "nvml"
    raise BackendRefused(
        f"no NVIDIA GPU found ({probe.describe()}); to try pal on a simulated fleet instead, pass --backend sim"
    )


@dataclass(frozen=True)
class SimOptions:
    """The simulated fleet behind `--backend sim` (same arguments, same fleet, anywhere)."""

    nodes: int = 16
    gpus_per_node: int = 4
    seed: int = 0
    model: str = "V100"  # V100 | H100
    node_prefix: str = "gpu"
    only_nodes: tuple[str, ...] | None = None  # None: the whole fleet
    busy: tuple[int, ...] = ()
    lost: tuple[int, ...] = ()
    bad_fraction: float = 0.03
    #: simulate this node alone: one node of `gpus_per_node` GPUs named so, seeded by `seed` and
    #: the name (`node_seed`), so that every node of a real cluster profiled with the simulated
    #: backend (`pal profile submit`) reports GPUs of its own, at its own name and slots
    as_node: str | None = None


def open_backend(choice: Literal["nvml", "sim"], *, node: str, sim: SimOptions | None = None,
                 nvml_module: Any = None) -> GpuBackend:
    """Open the chosen backend. `node` names this node for NVML; the simulator names its own."""
    if choice == "nvml":
        from pal_slurm.gpu.nvml import NvmlBackend

        backend = NvmlBackend(node=node, nvml=nvml_module)
        if backend.device_count() == 0:
            backend.close()
            raise BackendUnavailable("NVML works but sees no GPU on this node")
        return backend
    from pal_slurm.gpu import simulated_fleet
    from pal_slurm.gpu.sim_specs import H100, V100
    from pal_slurm.gpu.simulated import SimBackend

    opts = sim or SimOptions()
    models = {"V100": V100, "H100": H100}
    if opts.model not in models:
        raise InputError(f"unknown simulated GPU model {opts.model!r} (V100 or H100)")
    if opts.as_node is not None:
        fleet = simulated_fleet.make_fleet(nodes=1, gpus_per_node=opts.gpus_per_node, model=models[opts.model],
                                           seed=node_seed(opts.seed, opts.as_node), bad_fraction=opts.bad_fraction,
                                           node_names=(opts.as_node,))
        log.info("simulated node %s: %d %s GPUs, seed %d", opts.as_node, opts.gpus_per_node, opts.model, opts.seed)
        return SimBackend(fleet, busy=opts.busy, lost=opts.lost)
    fleet = simulated_fleet.make_fleet(nodes=opts.nodes, gpus_per_node=opts.gpus_per_node, model=models[opts.model],
                                seed=opts.seed, bad_fraction=opts.bad_fraction, node_prefix=opts.node_prefix)
    log.info("simulated fleet: %d nodes x %d %s GPUs, seed %d", opts.nodes, opts.gpus_per_node, opts.model, opts.seed)
    return SimBackend(fleet, opts.only_nodes, busy=opts.busy, lost=opts.lost)


def node_seed(seed: int, node: str) -> int:
    """The simulated fleet seed of one node simulated alone: the same for the same (seed, node)
    anywhere, different between nodes (so no two nodes report the same GPU identities)."""
    import zlib

    return (seed * 1_000_003 + zlib.crc32(node.encode("utf-8"))) % 2**32


def parse_indices(text: str | None, what: str = "--gpus") -> tuple[int, ...] | None:
    """'0,2,3' -> (0, 2, 3); None/'' -> None. A bad item is one clear InputError."""
    if text is None or not text.strip():
        return None
    out: list[int] = []
    for item in text.split(","):
        item = item.strip()
        if not item.isdigit():
            raise InputError(f"{what}: {item!r} is not a GPU index (expected e.g. 0,1,3)")
        out.append(int(item))
    return tuple(dict.fromkeys(out))


def parse_names(text: str | None) -> tuple[str, ...] | None:
    if text is None or not text.strip():
        return None
    return tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))


def indices_in_range(indices: Sequence[int], count: int, what: str = "--gpus") -> None:
    bad = [i for i in indices if i >= count]
    if bad:
        raise InputError(f"{what}: GPU index {bad[0]} does not exist (this node has {count}: 0..{count - 1})")
