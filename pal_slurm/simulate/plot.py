"""`pal simulate --plot FILE`: per trace, the JCT CDF of every policy and busy GPUs over time.

Busy GPUs are small multiples: one panel per policy, sharing both axes, with the cluster's
size drawn in each, so policies are compared at a glance without lines hiding each other
(one plot with nine overlaid step curves is unreadable). A policy has the same colour in
its CDF line, its panel and its title; legends sit outside the axes. Drawn on a private
Figure with the Agg canvas (no pyplot state, no display needed).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pal_slurm.errors import PalError
from pal_slurm.numfmt import mpl_text
from pal_slurm.simulate.result import SimResult

MAX_TRACES = 8
#: columns of busy-GPU panels (one panel per policy)
PANEL_COLUMNS = 3
FIG_WIDTH_IN = 12.0
#: the smallest text (tick labels): readable when the figure is shown at 1200 px or so
MIN_FONT_PT = 9.0
_STYLE = {"font.size": 10, "xtick.labelsize": MIN_FONT_PT, "ytick.labelsize": MIN_FONT_PT, "axes.titlesize": 11,
          "legend.fontsize": 10, "legend.title_fontsize": 10}
# Fixed margins in inches, no layout engine: constrained layout measures every label several
# times, and with one panel per policy and trace that costs seconds per plot.
_LEFT_IN, _RIGHT_IN, _GAP_W_IN = 0.8, 2.3, 0.55  # right: the legends, outside the axes
_CDF_H_IN, _CDF_TOP_IN, _CDF_BOTTOM_IN = 2.6, 0.45, 0.65
_PANEL_H_IN, _PANEL_TOP_IN, _PANEL_BOTTOM_IN = 1.3, 0.4, 0.55
_TRACE_GAP_IN = 0.35


def policy_colours(policies: Sequence[str]) -> dict[str, Any]:
    """One colour per policy, stable across traces and panels (tab10, in first-seen order)."""
    from matplotlib import colormaps

    cmap = colormaps["tab10"]
    return {p: cmap(i % 10) for i, p in enumerate(dict.fromkeys(policies))}


def _trace_height(n_runs: int) -> float:
    rows = math.ceil(n_runs / min(PANEL_COLUMNS, n_runs))
    return _CDF_TOP_IN + _CDF_H_IN + _CDF_BOTTOM_IN + rows * (_PANEL_TOP_IN + _PANEL_H_IN + _PANEL_BOTTOM_IN)


def _draw_trace(fig, top_in: float, trace: str, runs: Sequence[SimResult],  # type: ignore[no-untyped-def]
                colours: dict[str, Any]) -> None:
    """One trace's block, its top `top_in` inches below the figure's top: the CDF, then the panels."""
    from matplotlib.lines import Line2D

    W, H = fig.get_figwidth(), fig.get_figheight()

    def rect(x_in: float, y_top_in: float, w_in: float, h_in: float) -> tuple[float, float, float, float]:
        return (x_in / W, 1 - (y_top_in + h_in) / H, w_in / W, h_in / H)

    plot_w = W - _LEFT_IN - _RIGHT_IN
    y = top_in + _CDF_TOP_IN
    cdf_ax = fig.add_axes(rect(_LEFT_IN, y, plot_w, _CDF_H_IN))
    for r in runs:
        jct = np.sort([o.jct for o in r.outcomes]) / 3600.0
        if jct.size:
            cdf_ax.step(jct, np.arange(1, jct.size + 1) / jct.size, where="post", color=colours[r.policy],
                        lw=1.4, label=mpl_text(r.policy))
    cdf_ax.set_xscale("log")
    cdf_ax.set_xlabel("job completion time (hours, log scale)")
    cdf_ax.set_ylabel("fraction of jobs")
    cdf_ax.set_title(f"{mpl_text(trace, 60)}: JCT CDF (higher and further left is better)")
    cdf_ax.grid(alpha=0.3)
    cdf_ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, title="policy")
    y += _CDF_H_IN + _CDF_BOTTOM_IN

    cols = min(PANEL_COLUMNS, len(runs))
    panel_w = (plot_w - (cols - 1) * _GAP_W_IN) / cols
    cluster = max((r.cluster_gpus for r in runs), default=0)
    panels: list[Any] = []
    for k, r in enumerate(runs):
        row, col = divmod(k, cols)
        top = y + row * (_PANEL_TOP_IN + _PANEL_H_IN + _PANEL_BOTTOM_IN) + _PANEL_TOP_IN
        ax = fig.add_axes(rect(_LEFT_IN + col * (panel_w + _GAP_W_IN), top, panel_w, _PANEL_H_IN),
                          sharex=panels[0] if panels else None, sharey=panels[0] if panels else None)
        panels.append(ax)
        times = np.array([t for t, _ in r.busy_timeline], dtype=float) / 3600.0
        busy = np.array([b for _, b in r.busy_timeline], dtype=float)
        if times.size:
            # the last level holds until the run's last job ends, then nothing is busy (a round-mode
            # timeline stops at its last change, before the end)
            end = max((o.finish_time for o in r.outcomes), default=0.0) / 3600.0
            times, busy = np.append(times, max(end, times[-1])), np.append(busy, 0.0)
            ax.step(times, busy, where="post", color=colours[r.policy], lw=1.0)
            ax.fill_between(times, busy, step="post", color=colours[r.policy], alpha=0.35, lw=0)
        if cluster:
            ax.axhline(cluster, color="#444", ls="--", lw=0.9)
        ax.set_title(f"{mpl_text(r.policy)}: utilization {r.metrics.utilization:.2f}", color=colours[r.policy],
                     fontsize=10, fontweight="bold")
        ax.grid(alpha=0.3)
        if col == 0:
            ax.set_ylabel("busy GPUs")
        ax.set_xlabel("time (hours)")
    if panels:
        panels[0].set_ylim(0, max(cluster, 1) * 1.08)
        key = [Line2D([], [], color="#444", ls="--", lw=0.9, label=f"cluster size\n({cluster} GPUs)")]
        panels[cols - 1].legend(handles=key, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)


def build_figure(results: Sequence[SimResult]):  # type: ignore[no-untyped-def]
    """The whole plot as a matplotlib Figure (Agg canvas), not yet saved: a CDF and the
    busy-GPU panels per trace (at most MAX_TRACES traces)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    traces = list(dict.fromkeys(r.trace for r in results))[:MAX_TRACES]
    if not traces:
        raise PalError("nothing to plot: no simulation results")
    colours = policy_colours([r.policy for r in results])
    by_trace = {t: [r for r in results if r.trace == t] for t in traces}
    heights = [_trace_height(len(rs)) for rs in by_trace.values()]
    with _rc():
        fig = Figure(figsize=(FIG_WIDTH_IN, sum(heights) + _TRACE_GAP_IN * (len(traces) - 1)), dpi=100)
        FigureCanvasAgg(fig)
        top = 0.0
        for trace, h in zip(traces, heights):
            _draw_trace(fig, top, trace, by_trace[trace], colours)
            top += h + _TRACE_GAP_IN
    return fig


def write_plot(path: Path, results: Sequence[SimResult]) -> None:
    fmt = _format(path)
    fig = build_figure(results)
    try:
        with _rc():  # tick labels are made at draw time, with the style in force then
            fig.savefig(path, format=fmt)
    except OSError as exc:
        raise PalError(f"cannot write the plot to {path}: {exc.strerror or exc}") from exc


def _rc():  # type: ignore[no-untyped-def]
    from matplotlib import rc_context

    return rc_context(_STYLE)


def _format(path: Path) -> str:
    ext = path.suffix.lower().lstrip(".")
    if ext in ("png", "svg", "pdf"):
        return ext
    raise PalError(f"{path}: plot format must be .png, .svg or .pdf")
