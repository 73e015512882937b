"""The HTML report's plots: matplotlib figures as base64 PNG images for the page.

Plots are drawn with matplotlib's Agg renderer on private :class:`Figure` objects
(never pyplot and its global figure registry), so this works on a headless
login node and is safe to call from a long-running process.

Layout rules the browser test (tests/report/test_report_browser.py) checks in a real Chromium:
every figure is drawn :data:`FIG_WIDTH_IN` wide at :data:`CSS_DPI` and shown at the
page's width (``width: 100%``), so a point in matplotlib is at least a CSS point on a
1400 px screen and the smallest text (:data:`MIN_FONT_PT`) is about 12 px; the PNG is
saved at :data:`PNG_SCALE` times that density so it stays sharp when scaled. Legends sit
above the panels, outside every axes, so they never cover data; every colour on the
page is named in a legend, a caption or the key under the tables.

Each plot returns (img HTML or '', a plain-text note for the reader).
"""

from __future__ import annotations

import base64
import io
import math
from typing import Any, TypeVar

from pal_slurm.db.classification_store import ResultRow, StoredClassification
from pal_slurm.numfmt import fmt_num, mpl_text
from pal_slurm.report.tables import UNKNOWN_NODE, count, escape, finite, node_cells, profiled, rows_text

T = TypeVar("T")

#: Rows of the per-node heatmap: the nodes with the worst PerfVar are kept.
MAX_HEATMAP_NODES = 40


#: Panels of the per-benchmark histogram and of the clock scatter (model x benchmark groups).
MAX_PANELS = 24


#: Logical pixels per inch of a figure (the CSS inch): the <img> width and height attributes.
CSS_DPI = 96


#: The PNG holds PNG_SCALE x the logical pixels (1,440 px across), more than the page shows at 1400 px: sharp text.
PNG_SCALE = 1.25


#: Every figure is this wide: 12 in x 96 = 1152 px, about the page's content width (shown at width 100 %).
FIG_WIDTH_IN = 12.0


#: The smallest text in a plot (tick labels, cell values): 9 pt = 12 px at the page's width.
MIN_FONT_PT = 9.0


_LABEL_PT = 10.0


_TITLE_PT = 11.0


_REGULAR = "#4c78a8"


_OUTLIER = "#d62728"


_BIN_SHADES = ("#dfe9f5", "#eef3e6")


_OUTLIER_SHADE = "#fbe0dd"


_CENTROID = "#555555"


_MEDIAN_LINE = "#222222"


_NO_PERFVAR = "No profiled GPU has a PerfVar yet: nothing to plot."


def _capped(items: list[T], limit: int, note: str) -> tuple[list[T], list[str]]:
    """The first `limit` items and the notes under the plot: `note` when some were left out."""
    return (items[:limit], [note]) if len(items) > limit else (items, [])


def _new_figure(width: float, height: float):  # type: ignore[no-untyped-def]
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    # No layout engine: constrained/tight layout measure every label and roughly double the
    # rendering time; margins are set by hand in inches instead (see _panel_grid).
    fig = Figure(figsize=(width, height), dpi=CSS_DPI)
    FigureCanvasAgg(fig)
    return fig


def _panel_grid(n: int, *, top_in: float, integer_y: bool):  # type: ignore[no-untyped-def]
    """A figure with n panels on a grid, fixed margins in inches; returns (fig, axes list)."""
    cols = 1 if n == 1 else 2 if n <= 4 else 3
    rows = math.ceil(n / cols)
    panel_h, gap_h, bottom_in = 2.5, 1.0, 0.65
    height = top_in + rows * panel_h + (rows - 1) * gap_h + bottom_in
    fig = _new_figure(FIG_WIDTH_IN, height)
    left_in, right_in, gap_w = 0.8, 0.25, 0.75
    panel_w = (FIG_WIDTH_IN - left_in - right_in - (cols - 1) * gap_w) / cols
    fig.subplots_adjust(left=left_in / FIG_WIDTH_IN, right=1 - right_in / FIG_WIDTH_IN,
                        bottom=bottom_in / height, top=1 - top_in / height,
                        wspace=gap_w / panel_w, hspace=gap_h / panel_h)
    axes = fig.subplots(rows, cols, squeeze=False).flat
    for ax in axes[n:]:
        ax.set_visible(False)
    from matplotlib.ticker import MaxNLocator

    for ax in axes[:n]:  # few ticks: tick labels are most of the drawing time
        ax.xaxis.set_major_locator(MaxNLocator(nbins=5 if cols == 3 else 6))
        ax.yaxis.set_major_locator(MaxNLocator(nbins=4 if integer_y else 5, integer=integer_y))
        ax.tick_params(labelsize=MIN_FONT_PT)
    return fig, list(axes[:n])


def _top_legend(fig, handles: list[Any], **kw: Any) -> None:  # type: ignore[no-untyped-def]
    """The figure's legend in the band the caller left above the panels (its top_in): outside
    every axes, so it never covers data, however the data falls."""
    height = fig.get_figheight()
    fig.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 1 - 0.06 / height),
               ncols=min(len(handles), 4), fontsize=_LABEL_PT, frameon=False, **kw)


def _png(fig) -> tuple[str, int, int]:  # type: ignore[no-untyped-def]
    """(base64 PNG, logical width, logical height): the PNG has PNG_SCALE x the logical pixels."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=CSS_DPI * PNG_SCALE, metadata={"Software": None})
    w, h = fig.canvas.get_width_height()
    return base64.b64encode(buf.getvalue()).decode("ascii"), w, h


def _img(data: str, w: int, h: int, alt: str) -> str:
    return f'<img src="data:image/png;base64,{data}" width="{w}" height="{h}" alt="{escape(alt)}">'


#: A value more than this many regular spans beyond the regular GPUs' range goes into an
#: overflow bin at the axis' edge: one far outlier must not squeeze the regular bins into a sliver.
FAR_SPANS = 1.0


def _histogram_axis(values: Any, is_out: Any) -> tuple[Any, Any, tuple[int, int], tuple[float, float]]:
    """(bin edges, the values as drawn, (GPUs clipped low, high), (lowest, highest) value).

    The axis spans the regular GPUs (the non-outliers; all GPUs when every one is an outlier)
    with a margin; a value far beyond it (FAR_SPANS regular spans) is drawn in an overflow bin
    one bin wide at that edge, labelled with how many GPUs and how far they reach."""
    import numpy as np

    regular = values[~is_out] if (~is_out).any() else values
    r_lo, r_hi = float(regular.min()), float(regular.max())
    span = max(r_hi - r_lo, 0.02)
    nbins = int(min(40, max(8, math.ceil(math.sqrt(values.size) * 2))))
    far_lo, far_hi = values < r_lo - FAR_SPANS * span, values > r_hi + FAR_SPANS * span
    lo = float(values[~far_lo].min()) if (~far_lo).any() else r_lo
    hi = float(values[~far_hi].max()) if (~far_hi).any() else r_hi
    if hi - lo < 1e-9:
        lo, hi = lo - 0.01, hi + 0.01
    edges = np.linspace(lo, hi, nbins + 1)
    width = edges[1] - edges[0]
    if far_lo.any():
        edges = np.concatenate([[lo - width], edges])
    if far_hi.any():
        edges = np.concatenate([edges, [hi + width]])
    drawn = np.where(far_lo, lo - width / 2, np.where(far_hi, hi + width / 2, values))
    return edges, drawn, (int(far_lo.sum()), int(far_hi.sum())), (float(values.min()), float(values.max()))


def histogram_plot(report: dict[str, Any], groups: dict[tuple[str, str], list[ResultRow]]) -> tuple[str, str]:
    """(img HTML or '', plain-text note): histogram of per-GPU PerfVar per model x benchmark."""
    items = [i for i in report.get("benchmarks", []) if profiled(groups.get((i["model"], i["benchmark"]), []))]
    if not items:
        return "", _NO_PERFVAR
    items, notes = _capped(items, MAX_PANELS,
                           f"Showing the first {MAX_PANELS} of {len(items)} model × benchmark groups.")
    data, w, h = _png(histogram_figure(items, groups))
    img = _img(data, w, h, "Histogram of per-GPU PerfVar per model and benchmark")
    return img, " ".join(notes)


def histogram_figure(items: list[dict[str, Any]], groups: dict[tuple[str, str], list[ResultRow]]):  # type: ignore[no-untyped-def]
    """The histogram's figure, one panel per item (a report's model x benchmark entry)."""
    import numpy as np
    from matplotlib.legend_handler import HandlerTuple
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    fig, axes = _panel_grid(len(items), top_in=1.05, integer_y=True)
    for ax, item in zip(axes, items):
        prof = profiled(groups[(item["model"], item["benchmark"])])
        values = np.array([r.perfvar for r in prof], dtype=float)
        is_out = np.array([r.outlier for r in prof], dtype=bool)
        edges, drawn, (clipped_lo, clipped_hi), (v_min, v_max) = _histogram_axis(values, is_out)
        reg_counts, _ = np.histogram(drawn[~is_out], bins=edges)
        out_counts, _ = np.histogram(drawn[is_out], bins=edges)
        for k, b in enumerate(item.get("bins", [])):
            if not (finite(b.get("low")) and finite(b.get("high"))):
                continue
            shade = _OUTLIER_SHADE if b.get("outlier") else _BIN_SHADES[k % 2]
            ax.axvspan(b["low"], b["high"], color=shade, zorder=0, lw=0)
            if finite(b.get("centroid")):
                ax.axvline(b["centroid"], color=_CENTROID, ls="--", lw=0.9, zorder=3)
        ax.stairs(reg_counts, edges, fill=True, color=_REGULAR, alpha=0.9, zorder=2)
        if is_out.any():
            ax.stairs(reg_counts + out_counts, edges, baseline=reg_counts, fill=True, color=_OUTLIER, zorder=2)
            ax.plot(drawn[is_out], np.zeros(int(is_out.sum())), ls="none", marker="|", ms=14, mew=2,
                    color=_OUTLIER, zorder=4, clip_on=False)
        ax.set_xlim(edges[0], edges[-1])
        for n, at, reach, side in ((clipped_lo, edges[0], v_min, "left"), (clipped_hi, edges[-1], v_max, "right")):
            if n:  # the overflow bin: hatched, and how many GPUs it holds and how far they reach
                inner = edges[1] if side == "left" else edges[-2]
                ax.axvspan(min(at, inner), max(at, inner), facecolor="none", hatch="//", edgecolor=_OUTLIER, lw=0,
                           zorder=1)
                ax.annotate(f"{count(n, 'GPU')}\n{'down' if side == 'left' else 'up'} to {reach:.3g}", xy=(at, 1.0),
                            xycoords=("data", "axes fraction"), ha=side, va="top", fontsize=_LABEL_PT,
                            color=_OUTLIER)
        if edges[0] <= 1.0 <= edges[-1]:
            ax.axvline(1.0, color=_MEDIAN_LINE, lw=0.8, alpha=0.6, zorder=3)
        ax.set_title(f"{mpl_text(item['model'], 28)} · {mpl_text(item['benchmark'], 20)}\n"
                     f"{count(values.size, 'GPU')}, {count(int(is_out.sum()), 'outlier')}", fontsize=_TITLE_PT)
        ax.set_xlabel("PerfVar (>1 = slower than median GPU)", fontsize=_LABEL_PT)
        ax.set_ylabel("GPUs", fontsize=_LABEL_PT)
    handles = [Patch(color=_REGULAR, label="GPUs (count per PerfVar interval)"),
               Patch(color=_OUTLIER, label="outlier GPUs"),
               Line2D([], [], ls="none", marker="|", ms=12, mew=2, color=_OUTLIER, label="one outlier GPU's PerfVar"),
               (Patch(color=_BIN_SHADES[0]), Patch(color=_BIN_SHADES[1])),
               Patch(color=_OUTLIER_SHADE, label="outlier bin's range"),
               Patch(facecolor="none", hatch="//", edgecolor=_OUTLIER,
                     label="overflow: GPUs far off the regular range (axis cut)"),
               Line2D([], [], color=_CENTROID, ls="--", label="bin centroid"),
               Line2D([], [], color=_MEDIAN_LINE, lw=0.8, alpha=0.6, label="PerfVar 1 (median GPU)")]
    labels = [h.get_label() if not isinstance(h, tuple) else "bin ranges (neighbours alternate shades)"
              for h in handles]
    _top_legend(fig, handles, labels=labels, handler_map={tuple: HandlerTuple(ndivide=None)})
    return fig


def heatmap_plot(stored: StoredClassification) -> tuple[str, str]:
    """Nodes x benchmarks, each cell the worst (max) PerfVar of the node's GPUs."""
    import numpy as np
    from matplotlib.colors import Normalize

    cells, benches, order = node_cells(stored)
    if not cells:
        return "", _NO_PERFVAR
    order, notes = _capped(order, MAX_HEATMAP_NODES,
                           f"Showing the {MAX_HEATMAP_NODES} rows with the worst PerfVar of {rows_text(order)}.")
    if any(not r.node for r in stored.results):
        notes.append(f"GPUs without a known node are grouped as “{UNKNOWN_NODE}”, a row that is not a node.")
    mat = np.full((len(order), len(benches)), np.nan)
    for i, n in enumerate(order):
        for j, b in enumerate(benches):
            if b in cells[n]:
                mat[i, j] = cells[n][b]
    # Symmetric around 1.0 (the model's median GPU) so that the colour of a cell means the
    # same distance from the median on both sides.
    half = max(float(np.nanmax(mat)) - 1.0, 1.0 - float(np.nanmin(mat)), 0.01)
    norm = Normalize(vmin=1.0 - half, vmax=1.0 + half)
    ylabels = [mpl_text(n, 32) for n in order]
    xlabels = [mpl_text(b, 24) for b in benches]
    # the page's full width (the image is shown at width 100 %): columns share what the labels leave
    rotate = len(benches) > 8 or max(len(x) for x in xlabels) > 18
    left_in = min(3.0, 0.35 + 0.085 * max(len(x) for x in ylabels))
    top_in = 0.5 + (0.06 * max(len(x) for x in xlabels) if rotate else 0.0)
    bottom_in, cbar_in = 0.2, 1.5
    width = FIG_WIDTH_IN
    plot_w = width - left_in - cbar_in
    plot_h = 0.3 * len(order)
    height = top_in + plot_h + bottom_in
    fig = _new_figure(width, height)
    ax = fig.add_axes((left_in / width, bottom_in / height, plot_w / width, plot_h / height))
    from matplotlib import colormaps

    cmap = colormaps["RdYlGn_r"].with_extremes(bad="#e0e0e0")
    im = ax.imshow(np.ma.masked_invalid(mat), aspect="auto", cmap=cmap, norm=norm, interpolation="nearest")
    ax.set_yticks(range(len(order)), labels=ylabels, fontsize=MIN_FONT_PT)
    ax.xaxis.tick_top()
    ax.set_xticks(range(len(benches)), labels=xlabels, fontsize=_LABEL_PT,
                  rotation=30 if rotate else 0, ha="left" if rotate else "center", rotation_mode="anchor")
    if mat.size <= 600 and plot_w / len(benches) >= 0.6:
        for i in range(mat.shape[0]):
            for j in range(mat.shape[1]):
                if not math.isnan(mat[i, j]):
                    # dark text on the light middle of the scale, white on its saturated ends
                    dark = abs(mat[i, j] - 1.0) < 0.6 * half
                    ax.text(j, i, fmt_num(float(mat[i, j])), ha="center", va="center", fontsize=MIN_FONT_PT,
                            color="#111" if dark else "#fff")
    cb_h = min(plot_h, 4.0)
    cax = fig.add_axes(((left_in + plot_w + 0.25) / width, (bottom_in + plot_h - cb_h) / height, 0.18 / width,
                        cb_h / height))
    cb = fig.colorbar(im, cax=cax)
    cb.set_label("worst PerfVar on node\n(green faster, red slower)", fontsize=_LABEL_PT)
    cb.ax.tick_params(labelsize=MIN_FONT_PT)
    data, w, h = _png(fig)
    img = _img(data, w, h, "Heatmap of the worst PerfVar per node and benchmark")
    return img, " ".join(notes)


def clock_plot(report: dict[str, Any], groups: dict[tuple[str, str], list[ResultRow]]) -> tuple[str, str]:
    """Scatter of median SM clock vs PerfVar per model x benchmark, where clocks are known."""
    import numpy as np
    from matplotlib.lines import Line2D

    items, no_clock = [], 0
    for item in report.get("benchmarks", []):
        prof = profiled(groups.get((item["model"], item["benchmark"]), []))
        with_clock = [r for r in prof if finite(r.median_sm_clock_mhz)]
        if with_clock:
            items.append((item, with_clock, len(prof)))
        elif prof:
            no_clock += 1
    if not items:
        return "", ("No SM clock readings are known for the profiled GPUs (the profiler records them "
                    "when nvidia-smi/DCGM reports them): clock vs performance plot skipped.")
    items, notes = _capped(items, MAX_PANELS,
                           f"Showing the first {MAX_PANELS} of {len(items)} model × benchmark groups with clocks.")
    fig, axes = _panel_grid(len(items), top_in=0.85, integer_y=False)
    any_out = False
    for ax, (item, pts, total) in zip(axes, items):
        x = np.array([r.median_sm_clock_mhz for r in pts], dtype=float)
        y = np.array([r.perfvar for r in pts], dtype=float)
        out = np.array([r.outlier for r in pts], dtype=bool)
        ax.scatter(x[~out], y[~out], s=14, color=_REGULAR, alpha=0.75, lw=0)
        if out.any():
            any_out = True
            ax.scatter(x[out], y[out], s=32, color=_OUTLIER, marker="x")
        ax.axhline(1.0, color=_MEDIAN_LINE, lw=0.8, alpha=0.6)
        ax.set_title(f"{mpl_text(item['model'], 28)} · {mpl_text(item['benchmark'], 20)}\n"
                     f"{len(pts)} of {total} GPUs with clocks", fontsize=_TITLE_PT)
        ax.set_xlabel("median SM clock (MHz)", fontsize=_LABEL_PT)
        ax.set_ylabel("PerfVar", fontsize=_LABEL_PT)
        ax.grid(True, lw=0.4, alpha=0.5)
    handles = [Line2D([], [], ls="none", marker="o", ms=5, color=_REGULAR, alpha=0.75, label="GPU"),
               Line2D([], [], color=_MEDIAN_LINE, lw=0.8, alpha=0.6, label="PerfVar 1 (median GPU)")]
    if any_out:
        handles.insert(1, Line2D([], [], ls="none", marker="x", ms=7, color=_OUTLIER, label="outlier GPU"))
    _top_legend(fig, handles)
    if no_clock:
        notes.append(f"{no_clock} model × benchmark group(s) have no clock readings and are not shown.")
    data, w, h = _png(fig)
    img = _img(data, w, h, "Scatter of median SM clock against PerfVar per model and benchmark")
    return img, " ".join(notes)


def savings_plot(savings: dict[str, Any]) -> tuple[str, str]:
    """Per partition (and in all): GPU-hours lost to slow GPUs and the part the placer's choice
    saves or would have saved, as horizontal bars."""
    rows = [("all", savings), *[(g["name"], g) for g in savings.get("groups", [])]]
    rows = [(name, r) for name, r in rows if r.get("accounted_jobs")]
    if not rows:
        return "", "No accounted job in this window: nothing to plot."
    height = 0.9 + 0.45 * len(rows)
    fig = _new_figure(FIG_WIDTH_IN, height)
    fig.subplots_adjust(left=1.6 / FIG_WIDTH_IN, right=1 - 0.3 / FIG_WIDTH_IN, bottom=0.55 / height,
                        top=1 - 0.35 / height)
    ax = fig.add_subplot(1, 1, 1)
    ys = list(range(len(rows)))[::-1]
    lost = [float(r["lost_gpu_hours"]) for _n, r in rows]
    saved = [float(r["saved_gpu_hours"]) for _n, r in rows]
    ax.barh([y + 0.18 for y in ys], lost, height=0.36, color="#c0392b", label="lost to slow GPUs")
    ax.barh([y - 0.18 for y in ys], saved, height=0.36, color="#27ae60", label="saved by the placer's choice")
    ax.set_yticks(ys, [mpl_text(n) for n, _r in rows], fontsize=MIN_FONT_PT)
    ax.set_xlabel("GPU-hours", fontsize=_LABEL_PT)
    ax.tick_params(labelsize=MIN_FONT_PT)
    ax.axvline(0, color="#555", linewidth=0.8)
    ax.legend(loc="lower right", fontsize=_LABEL_PT, frameon=False)
    data, w, h = _png(fig)
    return _img(data, w, h, "GPU-hours lost to slow GPUs and saved, per partition"), ""
