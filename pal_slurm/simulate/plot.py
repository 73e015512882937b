"""`pal simulate --plot FILE`: JCT CDF per policy and busy GPUs over time, per trace.

Drawn on a private Figure with the Agg canvas (no pyplot state, no display needed).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from pal_slurm.errors import PalError
from pal_slurm.simulate.result import SimResult

MAX_TRACES = 8


def write_plot(path: Path, results: Sequence[SimResult]) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    traces = list(dict.fromkeys(r.trace for r in results))[:MAX_TRACES]
    if not traces:
        raise PalError("nothing to plot: no simulation results")
    fig = Figure(figsize=(11, 3.2 * len(traces)), dpi=100)
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(traces), 2, squeeze=False)
    for row, trace in enumerate(traces):
        cdf_ax, busy_ax = axes[row]
        for r in (r for r in results if r.trace == trace):
            jct = np.sort([o.jct for o in r.outcomes]) / 3600.0
            if jct.size:
                cdf_ax.step(jct, np.arange(1, jct.size + 1) / jct.size, where="post", label=r.policy)
            times = np.array([t for t, _ in r.busy_timeline]) / 3600.0
            busy = np.array([b for _, b in r.busy_timeline])
            if times.size:
                busy_ax.step(times, busy, where="post", label=r.policy, linewidth=1)
        cdf_ax.set_xscale("log")
        cdf_ax.set_xlabel("job completion time (hours, log scale)")
        cdf_ax.set_ylabel("fraction of jobs")
        cdf_ax.set_title(f"{trace}: JCT CDF", fontsize=10)
        cdf_ax.grid(alpha=0.3)
        busy_ax.set_xlabel("time (hours)")
        busy_ax.set_ylabel("GPUs allocated")
        busy_ax.set_title(f"{trace}: busy GPUs", fontsize=10)
        busy_ax.grid(alpha=0.3)
        if row == 0:
            cdf_ax.legend(fontsize=8)
    fig.tight_layout()
    try:
        fig.savefig(path, format=_format(path))
    except OSError as exc:
        raise PalError(f"cannot write the plot to {path}: {exc.strerror or exc}") from exc


def _format(path: Path) -> str:
    ext = path.suffix.lower().lstrip(".")
    if ext in ("png", "svg", "pdf"):
        return ext
    raise PalError(f"{path}: plot format must be .png, .svg or .pdf")
