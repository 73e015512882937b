"""`pal report --html FILE`: one self-contained HTML page with tables and plots for operators.

The page needs nothing but a browser: the CSS is inline and the three plots are PNG
images embedded as base64 ``data:`` URIs. There is no JavaScript, no font, no
external link. Everything that comes from data (model, benchmark, node and job-class
names, UUIDs, parameters, recommendations) is passed through :func:`html.escape`:
these strings come from profile files, the inventory and the configuration, and a
node called ``<script>`` must show up as text, not run.

Plots are drawn with matplotlib's Agg renderer on private :class:`Figure` objects
(never pyplot and its global figure registry), so this works on a headless
login node and is safe to call from a long-running process.

Layout rules the browser test (tests/test_report_browser.py) checks in a real Chromium:
every figure is drawn :data:`FIG_WIDTH_IN` wide at :data:`CSS_DPI` and shown at the
page's width (``width: 100%``), so a point in matplotlib is at least a CSS point on a
1400 px screen and the smallest text (:data:`MIN_FONT_PT`) is about 12 px; the PNG is
saved at :data:`PNG_SCALE` times that density so it stays sharp when scaled. Legends sit
above the panels, outside every axes, so they never cover data; every colour on the
page is named in a legend, a caption or the key under the tables.

:func:`render_html` is pure (the same input gives the same page; no clock, no I/O);
:func:`write_html` writes it atomically (:mod:`pal_slurm.atomic_write`) and turns every
failure into one :class:`PalError` line.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pal_slurm.atomic_write import write_atomically
from pal_slurm.db.classification_store import ResultRow, StoredClassification
from pal_slurm.errors import PalError
from pal_slurm.numfmt import fmt_num, mpl_text

__all__ = ["render_html", "write_html", "MAX_HEATMAP_NODES", "MAX_PANELS"]

#: Rows of the per-node heatmap: the nodes with the worst PerfVar are kept.
MAX_HEATMAP_NODES = 40
#: Panels of the per-benchmark histogram and of the clock scatter (model x benchmark groups).
MAX_PANELS = 24
#: Rows of the per-node table (under the heatmap).
MAX_NODE_TABLE_ROWS = 2000
#: Rows of the unprofiled-GPU table.
MAX_UNPROFILED_ROWS = 200
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
UNKNOWN_NODE = "unknown"

_REGULAR = "#4c78a8"
_OUTLIER = "#d62728"
_BIN_SHADES = ("#dfe9f5", "#eef3e6")
_OUTLIER_SHADE = "#fbe0dd"
_CENTROID = "#555555"
_MEDIAN_LINE = "#222222"

_CSS = """
:root { color-scheme: light; }
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif;
       margin: 0 auto; padding: 1rem 1.25rem 3rem; max-width: 1320px; color: #1d1d1f;
       line-height: 1.4; font-size: 15px; }
h1 { font-size: 1.6rem; margin: .4rem 0 .2rem; }
h2 { font-size: 1.25rem; margin: 2rem 0 .5rem; border-bottom: 1px solid #ddd; padding-bottom: .2rem; }
.sub { color: #555; margin: 0 0 1rem; }
nav a { margin-right: 1rem; }
.wrap { overflow-x: auto; }
table { border-collapse: collapse; margin: .4rem 0 1rem; font-size: .9rem; }
th, td { border: 1px solid #d8d8d8; padding: .25rem .5rem; text-align: left; vertical-align: top; }
th { background: #f2f4f7; }
summary { cursor: pointer; color: #333; margin: .3rem 0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr:nth-child(even) td { background: #fafbfc; }
code, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: .85em;
              word-break: break-all; }
.bin { display: inline-block; margin: 0 .3rem .15rem 0; padding: 0 .3rem; border-radius: 3px;
       background: #e8eef7; white-space: nowrap; font-variant-numeric: tabular-nums; }
.bad { color: #b3261e; font-weight: 600; }
.note { color: #555; font-size: .9rem; }
.cards { display: flex; flex-wrap: wrap; gap: .6rem; margin: .6rem 0; }
.card { border: 1px solid #ddd; border-radius: 6px; padding: .4rem .8rem; min-width: 7rem; }
.card b { display: block; font-size: 1.3rem; }
figure { margin: .5rem 0 1.5rem; }
figure img { display: block; width: 100%; max-width: 100%; height: auto; border: 1px solid #eee;
             box-sizing: border-box; }
figcaption { color: #555; font-size: .9rem; }
.key { color: #333; font-size: .9rem; margin: -.4rem 0 1rem; }
.key span { margin-right: .2rem; }
.swatch { display: inline-block; width: .9em; height: .9em; vertical-align: -.1em; border: 1px solid #bbb; }
td.out { color: #b3261e; font-weight: 600; background: #fbe0dd !important; }
"""


# --------------------------------------------------------------------------- helpers


_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def _e(value: Any) -> str:
    """Escape anything for HTML text and attribute values (control characters become U+FFFD)."""
    return _CONTROL.sub("\ufffd", html.escape("" if value is None else str(value), quote=True))


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _fmt(v: Any, digits: int = 3) -> str:
    """A number as plain (unescaped) text; '–' for None. Through fmt_num, as the terminal does."""
    return fmt_num(v, digits, none="–")


def _num(v: Any, digits: int = 3) -> str:
    """A number as HTML text."""
    return _e(_fmt(v, digits))


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _node(r: ResultRow) -> str:
    return r.node if r.node else UNKNOWN_NODE


def _profiled(rows: Iterable[ResultRow]) -> list[ResultRow]:
    return [r for r in rows if r.profiled and _finite(r.perfvar)]


def _group_rows(stored: StoredClassification) -> dict[tuple[str, str], list[ResultRow]]:
    out: dict[tuple[str, str], list[ResultRow]] = {}
    for r in stored.results:
        out.setdefault((r.model, r.benchmark), []).append(r)
    return out


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
    return f'<img src="data:image/png;base64,{data}" width="{w}" height="{h}" alt="{_e(alt)}">'


# --------------------------------------------------------------------------- plots


def _histogram_plot(report: dict[str, Any], groups: dict[tuple[str, str], list[ResultRow]]) -> tuple[str, str]:
    """(img HTML or '', plain-text note): histogram of per-GPU PerfVar per model x benchmark."""
    import numpy as np
    from matplotlib.legend_handler import HandlerTuple
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    items = [i for i in report.get("benchmarks", []) if _profiled(groups.get((i["model"], i["benchmark"]), []))]
    if not items:
        return "", "No profiled GPU has a PerfVar yet: nothing to plot."
    notes = []
    if len(items) > MAX_PANELS:
        notes.append(f"Showing the first {MAX_PANELS} of {len(items)} model × benchmark groups.")
        items = items[:MAX_PANELS]
    fig, axes = _panel_grid(len(items), top_in=1.05, integer_y=True)
    for ax, item in zip(axes, items):
        prof = _profiled(groups[(item["model"], item["benchmark"])])
        values = np.array([r.perfvar for r in prof], dtype=float)
        is_out = np.array([r.outlier for r in prof], dtype=bool)
        lo, hi = float(values.min()), float(values.max())
        if hi - lo < 1e-9:
            lo, hi = lo - 0.01, hi + 0.01
        nbins = int(min(40, max(8, math.ceil(math.sqrt(values.size) * 2))))
        edges = np.linspace(lo, hi, nbins + 1)
        reg_counts, _ = np.histogram(values[~is_out], bins=edges)
        out_counts, _ = np.histogram(values[is_out], bins=edges)
        for k, b in enumerate(item.get("bins", [])):
            if not (_finite(b.get("low")) and _finite(b.get("high"))):
                continue
            shade = _OUTLIER_SHADE if b.get("outlier") else _BIN_SHADES[k % 2]
            ax.axvspan(b["low"], b["high"], color=shade, zorder=0, lw=0)
            if _finite(b.get("centroid")):
                ax.axvline(b["centroid"], color=_CENTROID, ls="--", lw=0.9, zorder=3)
        ax.stairs(reg_counts, edges, fill=True, color=_REGULAR, alpha=0.9, zorder=2)
        if is_out.any():
            ax.stairs(reg_counts + out_counts, edges, baseline=reg_counts, fill=True, color=_OUTLIER, zorder=2)
            ax.plot(values[is_out], np.zeros(int(is_out.sum())), ls="none", marker="|", ms=14, mew=2,
                    color=_OUTLIER, zorder=4, clip_on=False)
        ax.axvline(1.0, color=_MEDIAN_LINE, lw=0.8, alpha=0.6, zorder=3)
        ax.set_title(f"{mpl_text(item['model'], 28)} · {mpl_text(item['benchmark'], 20)}\n"
                     f"{_count(values.size, 'GPU')}, {_count(int(is_out.sum()), 'outlier')}", fontsize=_TITLE_PT)
        ax.set_xlabel("PerfVar (>1 = slower than median GPU)", fontsize=_LABEL_PT)
        ax.set_ylabel("GPUs", fontsize=_LABEL_PT)
    handles = [Patch(color=_REGULAR, label="GPUs (count per PerfVar interval)"),
               Patch(color=_OUTLIER, label="outlier GPUs"),
               Line2D([], [], ls="none", marker="|", ms=12, mew=2, color=_OUTLIER, label="one outlier GPU's PerfVar"),
               (Patch(color=_BIN_SHADES[0]), Patch(color=_BIN_SHADES[1])),
               Patch(color=_OUTLIER_SHADE, label="outlier bin's range"),
               Line2D([], [], color=_CENTROID, ls="--", label="bin centroid"),
               Line2D([], [], color=_MEDIAN_LINE, lw=0.8, alpha=0.6, label="PerfVar 1 (median GPU)")]
    labels = [h.get_label() if not isinstance(h, tuple) else "bin ranges (neighbours alternate shades)"
              for h in handles]
    _top_legend(fig, handles, labels=labels, handler_map={tuple: HandlerTuple(ndivide=None)})
    data, w, h = _png(fig)
    img = _img(data, w, h, "Histogram of per-GPU PerfVar per model and benchmark")
    return img, " ".join(notes)


def _node_cells(stored: StoredClassification) -> tuple[dict[str, dict[str, float]], list[str], list[str]]:
    """(node -> benchmark -> worst PerfVar, benchmarks, nodes sorted worst first)."""
    cells: dict[str, dict[str, float]] = {}
    for r in _profiled(stored.results):
        row = cells.setdefault(_node(r), {})
        pv = float(r.perfvar)  # type: ignore[arg-type]
        if pv > row.get(r.benchmark, -math.inf):
            row[r.benchmark] = pv
    benches = sorted({b for row in cells.values() for b in row})
    order = sorted(cells, key=lambda n: (-max(cells[n].values()), n))
    return cells, benches, order


def _rows_text(order: Sequence[str]) -> str:
    """"96 nodes" or "96 nodes and the “unknown” row": the cards' node count, never one more."""
    real = sum(1 for n in order if n != UNKNOWN_NODE)
    return _count(real, "node") + (f" and the “{UNKNOWN_NODE}” row" if len(order) > real else "")


def _heatmap_plot(stored: StoredClassification) -> tuple[str, str]:
    """Nodes x benchmarks, each cell the worst (max) PerfVar of the node's GPUs."""
    import numpy as np
    from matplotlib.colors import Normalize

    cells, benches, order = _node_cells(stored)
    if not cells:
        return "", "No profiled GPU has a PerfVar yet: nothing to plot."
    notes = []
    if len(order) > MAX_HEATMAP_NODES:
        notes.append(f"Showing the {MAX_HEATMAP_NODES} rows with the worst PerfVar of {_rows_text(order)}.")
        order = order[:MAX_HEATMAP_NODES]
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


def _clock_plot(report: dict[str, Any], groups: dict[tuple[str, str], list[ResultRow]]) -> tuple[str, str]:
    """Scatter of median SM clock vs PerfVar per model x benchmark, where clocks are known."""
    import numpy as np
    from matplotlib.lines import Line2D

    items, no_clock = [], 0
    for item in report.get("benchmarks", []):
        prof = _profiled(groups.get((item["model"], item["benchmark"]), []))
        with_clock = [r for r in prof if _finite(r.median_sm_clock_mhz)]
        if with_clock:
            items.append((item, with_clock, len(prof)))
        elif prof:
            no_clock += 1
    if not items:
        return "", ("No SM clock readings are known for the profiled GPUs (the profiler records them "
                    "when nvidia-smi/DCGM reports them): clock vs performance plot skipped.")
    notes = []
    if len(items) > MAX_PANELS:
        notes.append(f"Showing the first {MAX_PANELS} of {len(items)} model × benchmark groups with clocks.")
        items = items[:MAX_PANELS]
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


# --------------------------------------------------------------------------- tables


def _bins_html(bins: Sequence[dict[str, Any]]) -> str:
    bins = [b for b in bins if not b.get("outlier")]  # outliers are counted, as in the terminal table
    if not bins:
        return '<span class="note">–</span>'
    parts = []
    for b in bins:
        title = (f"bin {b.get('bin')}: PerfVar {_fmt(b.get('low'))}–{_fmt(b.get('high'))}, "
                 f"centroid {_fmt(b.get('centroid'))}")
        parts.append(f'<span class="bin" title="{_e(title)}">{_num(b.get("slowdown"))}×{_e(b.get("gpus"))}</span>')
    return "".join(parts)


#: Under the summary tables: what each colour in them means (every colour on the page is named somewhere).
_BINS_KEY = ('<p class="key">Colours: <span class="bin">1.000×60</span> a bin of regular GPUs, its slowdown '
             'factor × its GPUs (outliers are not bins: they are counted in the outliers column, and a '
             '<span class="bad">red</span> count has some). Grey headers and striped rows only guide the eye.</p>')


def _pv_cells(pv: dict[str, float] | None) -> str:
    keys = ("min", "p5", "median", "p95", "max")
    if not pv:
        return "".join('<td class="num">–</td>' for _ in keys)
    return "".join(f'<td class="num">{_num(pv.get(k))}</td>' for k in keys)


def _summary_table(items: Sequence[dict[str, Any]], *, job_class: bool) -> str:
    if not items:
        return '<p class="note">None.</p>'
    head = ("<th>Job class</th>" if job_class else "") + (
        "<th>Model</th><th>Benchmark</th><th>GPUs</th><th>Unprofiled</th><th>PerfVar min</th><th>p5</th>"
        "<th>median</th><th>p95</th><th>max</th><th>Bins (slowdown × GPUs)</th><th>Outliers</th>")
    rows = []
    for it in items:
        n_out = len(it.get("outliers", []))
        rows.append(
            "<tr>"
            + (f"<td>{_e(it.get('job_class'))}</td>" if job_class else "")
            + f"<td>{_e(it.get('model'))}</td><td>{_e(it.get('benchmark'))}</td>"
            f'<td class="num">{_e(it.get("gpus"))}</td><td class="num">{_e(it.get("unprofiled"))}</td>'
            + _pv_cells(it.get("perfvar"))
            + f"<td>{_bins_html(it.get('bins', []))}</td>"
            f'<td class="num{" bad" if n_out else ""}">{n_out}</td></tr>'
        )
    return f'<div class="wrap"><table><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table></div>'


def _outlier_table(stored: StoredClassification, report: dict[str, Any]) -> str:
    """One row per outlier GPU, a column per benchmark: the GPU's PerfVar on every benchmark it
    has, red where it is an outlier, so a GPU slow on three benchmarks is one line, not three."""
    details: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for it in report.get("benchmarks", []):
        for o in it.get("outlier_details", []):
            details.setdefault(str(o.get("uuid")), []).append((str(it.get("benchmark")), o))
    if not details:
        return '<p class="note">No outliers in this classification.</p>'
    cells: dict[str, dict[str, ResultRow]] = {}
    for r in stored.results:
        if r.uuid in details and r.profiled and _finite(r.perfvar):
            cells.setdefault(r.uuid, {})[r.benchmark] = r
    benches = sorted({b for per in cells.values() for b in per} | {b for d in details.values() for b, _ in d})
    any_row = {r.uuid: r for r in stored.results if r.uuid in details}

    def worst(uuid: str) -> float:
        return max((float(o.get("perfvar")) for _, o in details[uuid] if _finite(o.get("perfvar"))), default=0.0)

    rows = []
    for uuid in sorted(details, key=lambda u: (-worst(u), u)):
        first = details[uuid][0][1]
        row = any_row.get(uuid)
        node = first.get("node") or (row.node if row else None) or UNKNOWN_NODE
        model = row.model if row else ""
        out_in = {b for b, _ in details[uuid]}
        tds = []
        for b in benches:
            r = cells.get(uuid, {}).get(b)
            if r is None:
                tds.append('<td class="num">–</td>')
            else:  # the bin's slowdown factor (what placement uses) on hover
                tip = f"{'outlier' if b in out_in else 'bin'} on {b}: slowdown {_fmt(r.slowdown)}"
                cls = "num out" if b in out_in else "num"
                tds.append(f'<td class="{cls}" title="{_e(tip)}">{_num(r.perfvar)}</td>')
        # one line per distinct recommendation, with the benchmarks it is for when they differ
        recs: dict[str, list[str]] = {}
        for b, o in details[uuid]:
            recs.setdefault(str(o.get("recommendation") or ""), []).append(b)
        rec_html = "<br>".join(
            (f"{_e(rec)}" if len(recs) == 1 else f"{_e(', '.join(bs))}: {_e(rec)}") for rec, bs in recs.items() if rec
        ) or "–"
        rows.append(f"<tr><td>{_e(node)}</td><td class=\"mono\">{_e(uuid)}</td><td>{_e(model)}</td>"
                    + "".join(tds) + f"<td>{rec_html}</td></tr>")
    head = ("<th>Node</th><th>UUID</th><th>Model</th>" + "".join(f"<th>{_e(b)}</th>" for b in benches)
            + "<th>Recommendation</th>")
    key = ('<p class="key">One row per outlier GPU; each benchmark column is the GPU\'s PerfVar '
           '(<span class="swatch" style="background:#fbe0dd"></span> <span class="bad">red</span>: an outlier on '
           'that benchmark; plain: within a normal bin there; –: not profiled on it).</p>')
    return (f'<div class="wrap"><table><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table></div>'
            + key)


def _unprofiled_table(stored: StoredClassification) -> str:
    rows = sorted((r for r in stored.results if not (r.profiled and _finite(r.perfvar))),
                  key=lambda r: (r.model, r.benchmark, _node(r), r.uuid))
    if not rows:
        return '<p class="note">Every GPU is profiled for every benchmark.</p>'
    note = ""
    if len(rows) > MAX_UNPROFILED_ROWS:
        note = f'<p class="note">Showing {MAX_UNPROFILED_ROWS} of {len(rows)} unprofiled GPU × benchmark rows.</p>'
        rows = rows[:MAX_UNPROFILED_ROWS]
    body = "".join(
        f"<tr><td>{_e(_node(r))}</td><td class=\"mono\">{_e(r.uuid)}</td><td>{_e(r.model)}</td>"
        f'<td>{_e(r.benchmark)}</td><td class="num">{_e(r.runs)}</td></tr>'
        for r in rows
    )
    return (f'{note}<div class="wrap"><table><thead><tr><th>Node</th><th>UUID</th><th>Model</th><th>Benchmark</th>'
            f'<th>Valid runs</th></tr></thead><tbody>{body}</tbody></table></div>')


def _node_table(stored: StoredClassification) -> str:
    """Every node (worst first): GPUs, outlier GPUs, worst PerfVar per benchmark; searchable text."""
    cells, benches, order = _node_cells(stored)
    if not order:
        return ""
    gpus: dict[str, set[str]] = {}
    outliers: dict[str, set[str]] = {}
    for r in stored.results:
        gpus.setdefault(_node(r), set()).add(r.uuid)
        if r.outlier and r.profiled:
            outliers.setdefault(_node(r), set()).add(r.uuid)
    note = ""
    total = _rows_text(order)
    if len(order) > MAX_NODE_TABLE_ROWS:
        note = f'<p class="note">Showing the {MAX_NODE_TABLE_ROWS} worst rows of {_e(total)}.</p>'
        order = order[:MAX_NODE_TABLE_ROWS]
    head = "<th>Node</th><th>GPUs</th><th>Outlier GPUs</th>" + "".join(f"<th>{_e(b)}</th>" for b in benches)
    rows = []
    for n in order:
        n_out = len(outliers.get(n, ()))
        rows.append(
            f"<tr><td>{_e(n)}</td><td class=\"num\">{len(gpus.get(n, ()))}</td>"
            f'<td class="num{" bad" if n_out else ""}">{n_out}</td>'
            + "".join(f'<td class="num">{_num(cells[n].get(b))}</td>' for b in benches) + "</tr>"
        )
    return (f"<details><summary>All nodes as a table ({_e(total)}; worst PerfVar per benchmark)</summary>"
            f'{note}<div class="wrap"><table><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody>'
            '</table></div><p class="key">A <span class="bad">red</span> count: the node has outlier GPUs.</p>'
            "</details>")


def _params_table(params: Any) -> str:
    if not isinstance(params, dict) or not params:
        return '<p class="note">No parameters recorded.</p>'
    body = "".join(
        f'<tr><th scope="row">{_e(k)}</th><td class="mono">{_e(json.dumps(v, sort_keys=True, default=str))}</td></tr>'
        for k, v in sorted(params.items(), key=lambda kv: str(kv[0]))
    )
    return f'<div class="wrap"><table><tbody>{body}</tbody></table></div>'


def _savings_plot(savings: dict[str, Any]) -> tuple[str, str]:
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


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f} %"


def _savings_section(savings: dict[str, Any] | None) -> str:
    """The savings section: the headline, a plot per partition, the GPUs responsible."""
    if savings is None:
        return ('<h2 id="savings">Variability tax</h2><p class="note">No job accounting recorded yet: the placer '
                "records each finished GPU job (observe or enforce mode); see `pal report savings`.</p>")
    img, note = _safe_plot(_savings_plot, savings)
    parts = [_figure("Variability tax", "savings",
                     f"{savings['headline']}. Red: GPU-hours finished jobs took beyond typical GPUs; green: the "
                     "part the placer's choice saves (enforce mode, against Slurm's first fit) or would have "
                     "saved (observe mode).", img, note)]
    gpus = savings.get("gpus", [])
    if gpus:
        head = "<tr><th>node</th><th>GPU</th><th>UUID</th><th>lost GPU-h</th><th>of lost</th><th>jobs</th>" \
               "<th>action</th></tr>"
        body = "".join(
            f"<tr><td>{_e(g['node'])}</td><td>{_e(g['minor'])}</td><td>{_e(g['uuid'] or '–')}</td>"
            f"<td>{_e(fmt_num(g['lost_gpu_hours']))}</td>"
            f"<td>{_e(_pct(g['share_of_lost']))}</td>"
            f"<td>{_e(g['jobs'])}</td><td>{_e(g['action'] or '–')}</td></tr>" for g in gpus)
        parts.append(f"<p>GPUs responsible for the most loss (their action: <code>pal gpus --actions</code>)</p>"
                     f"<table>{head}{body}</table>")
    return "\n".join(parts)


def _figure(title: str, anchor: str, caption: str, img: str, note: str) -> str:
    parts = [f'<h2 id="{anchor}">{title}</h2>']
    if img:
        parts.append(f"<figure>{img}<figcaption>{_e(caption)}</figcaption></figure>")
    if note:
        parts.append(f'<p class="note">{_e(note)}</p>')
    return "\n".join(parts)


# --------------------------------------------------------------------------- page


def _safe_plot(fn, *args: Any) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    """A plot that cannot be drawn (odd data, a matplotlib quirk) costs its figure, not the page."""
    try:
        return fn(*args)  # type: ignore[no-any-return]
    except Exception as exc:  # noqa: BLE001 - the tables are still worth writing
        return "", f"This plot could not be drawn ({type(exc).__name__}: {exc})."


def render_html(stored: StoredClassification, report: dict[str, Any]) -> str:
    """The whole page as a string: pure, deterministic, self-contained."""
    cls = report.get("classification", {})
    version = cls.get("version", stored.version)
    created = cls.get("created_at") or stored.created_at.isoformat()
    params = cls.get("params", stored.params)
    groups = _group_rows(stored)

    gpus = {r.uuid for r in stored.results}
    nodes = {_node(r) for r in stored.results}
    models = sorted({r.model for r in stored.results})
    n_outlier_gpus = len({o["uuid"] for it in report.get("benchmarks", []) for o in it.get("outlier_details", [])})
    n_unprof = sum(1 for r in stored.results if not (r.profiled and _finite(r.perfvar)))

    hist_img, hist_note = _safe_plot(_histogram_plot, report, groups)
    heat_img, heat_note = _safe_plot(_heatmap_plot, stored)
    clock_img, clock_note = _safe_plot(_clock_plot, report, groups)

    ids = report.get("identity")
    if ids and ids["physical_min"] < ids["gpus"]:  # GPUs the data cannot place: say how many are physical
        gpu_cards: tuple[tuple[str, Any], ...] = (("physical GPUs (at least)", ids["physical_min"]),
                                                  ("GPU identities", ids["gpus"]), ("nodes", ids["nodes"]))
    elif ids:
        gpu_cards = (("GPUs", ids["gpus"]), ("nodes", ids["nodes"]))
    else:
        gpu_cards = (("GPUs", len(gpus)), ("nodes", len(nodes)))
    cards = "".join(
        f'<div class="card"><b>{_e(v)}</b>{_e(k)}</div>'
        for k, v in (*gpu_cards, ("models", len(models)),
                     ("benchmarks", len({r.benchmark for r in stored.results})),
                     ("outlier GPUs", n_outlier_gpus), ("unprofiled GPU × benchmark", n_unprof))
    )
    title = f"GPU variability report — classification version {_e(version)}"
    body = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        '<meta name="generator" content="pal-slurm">',
        f"<title>{title}</title>",
        f"<style>{_CSS}</style>",
        "</head><body>",
        f"<h1>{title}</h1>",
        f'<p class="sub">Created {_e(created)} · format {_e(report.get("format", ""))} · '
        f"models: {_e(', '.join(models)) or '–'} · PerfVar &gt; 1 means slower than the model's median GPU; "
        "slowdown is the bin's factor used for placement.</p>",
        '<nav><a href="#summary">Summary</a><a href="#classes">Job classes</a><a href="#outliers">Outliers</a>'
        '<a href="#dist">Distributions</a><a href="#nodes">Nodes</a><a href="#clocks">Clocks</a>'
        '<a href="#unprofiled">Unprofiled</a><a href="#savings">Variability tax</a>'
        '<a href="#params">Parameters</a></nav>',
        f'<div class="cards">{cards}</div>',
        '<h2 id="summary">Per model × benchmark</h2>',
        _summary_table(report.get("benchmarks", []), job_class=False),
        _BINS_KEY,
        '<h2 id="classes">Per job class</h2>',
        _summary_table(report.get("job_classes", []), job_class=True),
        _BINS_KEY,
        '<h2 id="outliers">Outliers</h2>',
        _outlier_table(stored, report),
        _figure("PerfVar distribution per benchmark", "dist",
                "Histogram of per-GPU PerfVar for each model × benchmark (legend above the panels). Shaded "
                "bands are the bins' PerfVar ranges, dashed lines their centroids; outlier GPUs are red, each "
                "also marked by a red tick at its PerfVar under the axis.", hist_img, hist_note),
        _figure("Worst PerfVar per node", "nodes",
                "Each cell is the highest PerfVar among the node's GPUs for that benchmark: green is faster "
                "and red slower than the model's median GPU (colour bar on the right), grey means no data. "
                "Nodes are sorted worst first.", heat_img, heat_note),
        _node_table(stored),
        _figure("SM clock vs performance", "clocks",
                "Median SM clock of each GPU's profile runs against its PerfVar (blue dots GPUs, red crosses "
                "outliers, grey line PerfVar 1); a GPU that is slow at a low clock is likely throttled "
                "(power or thermal).", clock_img, clock_note),
        '<h2 id="unprofiled">Unprofiled GPUs</h2>',
        _unprofiled_table(stored),
        _savings_section(report.get("savings")),
        '<h2 id="params">Classification parameters</h2>',
        f'<details><summary>The parameters classification version {_e(version)} ran with</summary>'
        f'{_params_table(params)}</details>',
        "</body></html>",
        "",
    ]
    return "\n".join(body)


def write_html(path: Path, stored: StoredClassification, report: dict[str, Any]) -> None:
    """Render the page and write it to ``path`` atomically; PalError (one line) on failure."""
    path = Path(path)
    parent = path.parent
    if not parent.is_dir():
        why = "is not a directory" if parent.exists() else "does not exist"
        raise PalError(f"cannot write HTML report {path}: directory {parent} {why}")
    if path.is_dir():
        raise PalError(f"cannot write HTML report {path}: it is a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise PalError(f"cannot write HTML report {path}: directory {parent} is not writable")
    text = render_html(stored, report)
    try:
        write_atomically(path, text)
    except OSError as exc:
        raise PalError(f"cannot write HTML report {path}: {exc.strerror or exc}") from None
