"""`pal report --html FILE`: one self-contained HTML page with tables and plots for operators.

The page needs nothing but a browser: the CSS is inline and the three plots are PNG
images embedded as base64 ``data:`` URIs (`plots`). There is no JavaScript, no font, no
external link; every string from data is escaped (`tables.escape`).

:func:`render_html` is pure (the same input gives the same page; no clock, no I/O);
:func:`write_html` writes it atomically (:mod:`pal_slurm.atomic_write`) and turns every
failure into one :class:`PalError` line.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pal_slurm.atomic_write import write_atomically
from pal_slurm.db.classification_store import StoredClassification
from pal_slurm.errors import PalError
from pal_slurm.report import plots, tables
from pal_slurm.report.tables import escape, finite, group_rows, node_of

__all__ = ["render_html", "write_html"]

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


def _savings_section(savings: dict[str, Any] | None) -> str:
    """The savings section: the headline, a plot per partition, the GPUs responsible."""
    if savings is None:
        return ('<h2 id="savings">Variability tax</h2><p class="note">No job accounting recorded yet: the placer '
                "records each finished GPU job (observe or enforce mode); see `pal report savings`.</p>")
    img, note = _safe_plot(plots.savings_plot, savings)
    parts = [_figure("Variability tax", "savings",
                     f"{savings['headline']}. Red: GPU-hours finished jobs took beyond typical GPUs; green: the "
                     "part the placer's choice saves (enforce mode, against Slurm's first fit) or would have "
                     "saved (observe mode).", img, note)]
    gpus = savings.get("gpus", [])
    if gpus:
        parts.append(tables.savings_gpu_table(gpus))
    return "\n".join(parts)


def _passive_section(passive: dict[str, Any] | None) -> str:
    """Passive speed: what the GPUs' own jobs say, beside the benchmark (`pal gpus learn`)."""
    head = '<h2 id="passive">Passive speed</h2>'
    if not passive or not passive.get("estimates"):
        return (head + '<p class="note">Nothing learned yet: <code>pal gpus learn --apply</code> (or '
                "pal-gpus-learn.timer) learns each GPU's factor from its finished jobs' run times.</p>"
                + tables.passive_tables(passive or {}))
    text = (f"{passive['estimates']} GPU × class estimates, learned {escape(str(passive['learned_at'])[:16])}; "
            f"{len(passive['disagreements'])} disagree with the benchmark beyond both uncertainties; "
            f"{len(passive['flags'])} open flag(s).")
    return head + f"<p>{text}</p>" + tables.passive_tables(passive)


def _figure(title: str, anchor: str, caption: str, img: str, note: str) -> str:
    parts = [f'<h2 id="{anchor}">{title}</h2>']
    if img:
        parts.append(f"<figure>{img}<figcaption>{escape(caption)}</figcaption></figure>")
    if note:
        parts.append(f'<p class="note">{escape(note)}</p>')
    return "\n".join(parts)


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
    models = sorted({r.model for r in stored.results})
    title = f"GPU variability report — classification version {escape(version)}"
    body = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        '<meta name="generator" content="pal-slurm">',
        f"<title>{title}</title>",
        f"<style>{_CSS}</style>",
        "</head><body>",
        f"<h1>{title}</h1>",
        f'<p class="sub">Created {escape(created)} · format {escape(report.get("format", ""))} · '
        f"models: {escape(', '.join(models)) or '–'} · PerfVar &gt; 1 means slower than the model's median GPU; "
        "slowdown is the bin's factor used for placement.</p>",
        '<nav><a href="#summary">Summary</a><a href="#classes">Job classes</a><a href="#outliers">Outliers</a>'
        '<a href="#dist">Distributions</a><a href="#nodes">Nodes</a><a href="#clocks">Clocks</a>'
        '<a href="#unprofiled">Unprofiled</a><a href="#savings">Variability tax</a><a href="#passive">Passive speed</a>'
        '<a href="#params">Parameters</a></nav>',
        f'<div class="cards">{_cards(stored, report, models)}</div>',
        *_sections(stored, report),
        '<h2 id="params">Classification parameters</h2>',
        f'<details><summary>The parameters classification version {escape(version)} ran with</summary>'
        f'{tables.params_table(params)}</details>',
        "</body></html>",
        "",
    ]
    return "\n".join(body)


def _cards(stored: StoredClassification, report: dict[str, Any], models: list[str]) -> str:
    """The counts at the top of the page. When some GPU identities cannot be placed (a UUID
    measured without its slot may be a GPU also known by its slot), the cards give the least
    number of physical GPUs beside the number of identities, as `pal report` does."""
    gpus = {r.uuid for r in stored.results}
    nodes = {node_of(r) for r in stored.results}
    n_outlier_gpus = len({o["uuid"] for it in report.get("benchmarks", []) for o in it.get("outlier_details", [])})
    n_unprof = sum(1 for r in stored.results if not (r.profiled and finite(r.perfvar)))
    ids = report.get("identity")
    if ids and ids["physical_min"] < ids["gpus"]:  # GPUs the data cannot place: say how many are physical
        gpu_cards: tuple[tuple[str, Any], ...] = (("physical GPUs (at least)", ids["physical_min"]),
                                                  ("GPU identities", ids["gpus"]), ("nodes", ids["nodes"]))
    elif ids:
        gpu_cards = (("GPUs", ids["gpus"]), ("nodes", ids["nodes"]))
    else:
        gpu_cards = (("GPUs", len(gpus)), ("nodes", len(nodes)))
    return "".join(
        f'<div class="card"><b>{escape(v)}</b>{escape(k)}</div>'
        for k, v in (*gpu_cards, ("models", len(models)),
                     ("benchmarks", len({r.benchmark for r in stored.results})),
                     ("outlier GPUs", n_outlier_gpus), ("unprofiled GPU × benchmark", n_unprof))
    )


def _sections(stored: StoredClassification, report: dict[str, Any]) -> list[str]:
    """The page's sections in the order the nav lists them, from the summary to the variability
    tax: each table, and each plot with its caption (or the note saying why it is missing)."""
    groups = group_rows(stored)
    hist_img, hist_note = _safe_plot(plots.histogram_plot, report, groups)
    heat_img, heat_note = _safe_plot(plots.heatmap_plot, stored)
    clock_img, clock_note = _safe_plot(plots.clock_plot, report, groups)
    return [
        '<h2 id="summary">Per model × benchmark</h2>',
        tables.summary_table(report.get("benchmarks", []), job_class=False),
        tables.BINS_KEY,
        '<h2 id="classes">Per job class</h2>',
        tables.summary_table(report.get("job_classes", []), job_class=True),
        tables.BINS_KEY,
        '<h2 id="outliers">Outliers</h2>',
        tables.outlier_table(stored, report),
        _figure("PerfVar distribution per benchmark", "dist",
                "Histogram of per-GPU PerfVar for each model × benchmark (legend above the panels). Shaded "
                "bands are the bins' PerfVar ranges, dashed lines their centroids; outlier GPUs are red, each "
                "also marked by a red tick at its PerfVar under the axis.", hist_img, hist_note),
        _figure("Worst PerfVar per node", "nodes",
                "Each cell is the highest PerfVar among the node's GPUs for that benchmark: green is faster "
                "and red slower than the model's median GPU (colour bar on the right), grey means no data. "
                "Nodes are sorted worst first.", heat_img, heat_note),
        tables.node_table(stored),
        _figure("SM clock vs performance", "clocks",
                "Median SM clock of each GPU's profile runs against its PerfVar (blue dots GPUs, red crosses "
                "outliers, grey line PerfVar 1); a GPU that is slow at a low clock is likely throttled "
                "(power or thermal).", clock_img, clock_note),
        '<h2 id="unprofiled">Unprofiled GPUs</h2>',
        tables.unprofiled_table(stored),
        _savings_section(report.get("savings")),
        _passive_section(report.get("passive")),
    ]


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
