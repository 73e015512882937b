"""Figures of a replay: JCT CDF per arm and busy GPUs over time, real against predicted.

Drawn on a private Figure with the Agg canvas (no pyplot state, no display needed).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from pal_slurm.errors import PalError
from pal_eval.replay.experiment import ArmReport
from pal_eval.replay.plan import ReplayPlan
from pal_slurm.numfmt import mpl_text

_COLOURS = {"slurm": "#1f77b4", "pal": "#d62728"}


def write_replay_plot(path: Path, trace: str, reports: Sequence[ArmReport], *, subtitle: str = "") -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if not reports:
        raise PalError("nothing to plot: no replay arm ran")
    fig = Figure(figsize=(6 + 4 * len(reports), 4.2), dpi=110)
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, 1 + len(reports), squeeze=False)[0]
    cdf = axes[0]
    for rep in reports:
        colour = _COLOURS.get(rep.arm, None)
        if rep.run is not None:
            real = np.sort([o.jct for o in rep.run.outcomes(_plan_of(rep))]) / 3600.0
            if real.size:
                cdf.step(real, np.arange(1, real.size + 1) / real.size, where="post", color=colour,
                         label=f"{rep.arm}: real")
        pred = np.sort([o.jct for o in rep.predicted.outcomes]) / 3600.0
        cdf.step(pred, np.arange(1, pred.size + 1) / pred.size, where="post", color=colour, linestyle="--",
                 label=f"{rep.arm}: predicted")
    cdf.set_xscale("log")
    cdf.set_xlabel("job completion time (trace hours, log scale)")
    cdf.set_ylabel("fraction of jobs")
    cdf.set_title(f"{mpl_text(trace, 60)}: JCT CDF", fontsize=10)
    cdf.grid(alpha=0.3)
    cdf.legend(fontsize=8, loc="lower right")
    for ax, rep in zip(axes[1:], reports):
        colour = _COLOURS.get(rep.arm, None)
        for timeline, style, label in ((rep.real_busy, "-", "real"), (rep.predicted.busy_timeline, "--", "predicted")):
            if timeline:
                t = np.array([x for x, _ in timeline]) / 3600.0
                b = np.array([y for _, y in timeline])
                ax.step(t, b, where="post", color=colour, linestyle=style, linewidth=1, label=label)
        ax.set_xlabel("time (trace hours)")
        ax.set_ylabel("GPUs allocated")
        ax.set_ylim(0, rep.predicted.cluster_gpus * 1.05)
        ax.set_title(f"{mpl_text(trace, 60)}, arm {rep.arm}: busy GPUs", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper right")
    if subtitle:
        fig.suptitle(subtitle, fontsize=9)
    fig.tight_layout()
    try:
        fig.savefig(path)
    except OSError as exc:
        raise PalError(f"cannot write the plot to {path}: {exc.strerror or exc}") from exc


def _plan_of(rep: ArmReport) -> ReplayPlan:
    """The plan the arm was measured with (its outcomes are in that plan's trace seconds)."""
    if rep.plan is None:
        raise PalError(f"arm {rep.arm}: no plan recorded")
    return rep.plan
