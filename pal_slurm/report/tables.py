"""The HTML report's tables, and the escaped, formatted cells every part of the page shows.

Everything that comes from data (model, benchmark, node and job-class names, UUIDs,
parameters, recommendations) passes through :func:`escape`: these strings come from
profile files, the inventory and the configuration, and a node called ``<script>`` must
show up as text, not run. Pure: strings in, HTML text out.
"""

from __future__ import annotations

import html
import json
import math
import re
from collections.abc import Iterable, Sequence
from typing import Any

from pal_slurm.db.classification_store import ResultRow, StoredClassification
from pal_slurm.numfmt import fmt_num

#: Rows of the per-node table (under the heatmap).
MAX_NODE_TABLE_ROWS = 2000


#: Rows of the unprofiled-GPU table.
MAX_UNPROFILED_ROWS = 200


UNKNOWN_NODE = "unknown"


_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def escape(value: Any) -> str:
    """Escape anything for HTML text and attribute values (control characters become U+FFFD)."""
    return _CONTROL.sub("\ufffd", html.escape("" if value is None else str(value), quote=True))


def finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _fmt(v: Any, digits: int = 3) -> str:
    """A number as plain (unescaped) text; '–' for None. Through fmt_num, as the terminal does."""
    return fmt_num(v, digits, none="–")


def _num(v: Any, digits: int = 3) -> str:
    """A number as HTML text."""
    return escape(_fmt(v, digits))


def count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def node_of(r: ResultRow) -> str:
    return r.node if r.node else UNKNOWN_NODE


def profiled(rows: Iterable[ResultRow]) -> list[ResultRow]:
    return [r for r in rows if r.profiled and finite(r.perfvar)]


def group_rows(stored: StoredClassification) -> dict[tuple[str, str], list[ResultRow]]:
    out: dict[tuple[str, str], list[ResultRow]] = {}
    for r in stored.results:
        out.setdefault((r.model, r.benchmark), []).append(r)
    return out


def node_cells(stored: StoredClassification) -> tuple[dict[str, dict[str, float]], list[str], list[str]]:
    """(node -> benchmark -> worst PerfVar, benchmarks, nodes sorted worst first)."""
    cells: dict[str, dict[str, float]] = {}
    for r in profiled(stored.results):
        row = cells.setdefault(node_of(r), {})
        pv = float(r.perfvar)  # type: ignore[arg-type]
        if pv > row.get(r.benchmark, -math.inf):
            row[r.benchmark] = pv
    benches = sorted({b for row in cells.values() for b in row})
    order = sorted(cells, key=lambda n: (-max(cells[n].values()), n))
    return cells, benches, order


def rows_text(order: Sequence[str]) -> str:
    """"96 nodes" or "96 nodes and the “unknown” row": the cards' node count, never one more."""
    real = sum(1 for n in order if n != UNKNOWN_NODE)
    return count(real, "node") + (f" and the “{UNKNOWN_NODE}” row" if len(order) > real else "")


def _bins_html(bins: Sequence[dict[str, Any]]) -> str:
    bins = [b for b in bins if not b.get("outlier")]  # outliers are counted, as in the terminal table
    if not bins:
        return '<span class="note">–</span>'
    parts = []
    for b in bins:
        title = (f"bin {b.get('bin')}: PerfVar {_fmt(b.get('low'))}–{_fmt(b.get('high'))}, "
                 f"centroid {_fmt(b.get('centroid'))}")
        parts.append(f'<span class="bin" title="{escape(title)}">{_num(b.get("slowdown"))}×'
                     f'{escape(b.get("gpus"))}</span>')
    return "".join(parts)


#: Under the summary tables: what each colour in them means (every colour on the page is named somewhere).
BINS_KEY = ('<p class="key">Colours: <span class="bin">1.000×60</span> a bin of regular GPUs, its slowdown '
             'factor × its GPUs (outliers are not bins: they are counted in the outliers column, and a '
             '<span class="bad">red</span> count has some). Grey headers and striped rows only guide the eye.</p>')


def _pv_cells(pv: dict[str, float] | None) -> str:
    keys = ("min", "p5", "median", "p95", "max")
    if not pv:
        return "".join('<td class="num">–</td>' for _ in keys)
    return "".join(f'<td class="num">{_num(pv.get(k))}</td>' for k in keys)


def summary_table(items: Sequence[dict[str, Any]], *, job_class: bool) -> str:
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
            + (f"<td>{escape(it.get('job_class'))}</td>" if job_class else "")
            + f"<td>{escape(it.get('model'))}</td><td>{escape(it.get('benchmark'))}</td>"
            f'<td class="num">{escape(it.get("gpus"))}</td><td class="num">{escape(it.get("unprofiled"))}</td>'
            + _pv_cells(it.get("perfvar"))
            + f"<td>{_bins_html(it.get('bins', []))}</td>"
            f'<td class="num{" bad" if n_out else ""}">{n_out}</td></tr>'
        )
    return f'<div class="wrap"><table><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table></div>'


def outlier_table(stored: StoredClassification, report: dict[str, Any]) -> str:
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
        if r.uuid in details and r.profiled and finite(r.perfvar):
            cells.setdefault(r.uuid, {})[r.benchmark] = r
    benches = sorted({b for per in cells.values() for b in per} | {b for d in details.values() for b, _ in d})
    any_row = {r.uuid: r for r in stored.results if r.uuid in details}

    def worst(uuid: str) -> float:
        return max((float(o.get("perfvar")) for _, o in details[uuid] if finite(o.get("perfvar"))), default=0.0)

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
                tds.append(f'<td class="{cls}" title="{escape(tip)}">{_num(r.perfvar)}</td>')
        # one line per distinct recommendation, with the benchmarks it is for when they differ
        recs: dict[str, list[str]] = {}
        for b, o in details[uuid]:
            recs.setdefault(str(o.get("recommendation") or ""), []).append(b)
        rec_html = "<br>".join(
            (f"{escape(rec)}" if len(recs) == 1 else f"{escape(', '.join(bs))}: {escape(rec)}")
            for rec, bs in recs.items() if rec
        ) or "–"
        rows.append(f"<tr><td>{escape(node)}</td><td class=\"mono\">{escape(uuid)}</td><td>{escape(model)}</td>"
                    + "".join(tds) + f"<td>{rec_html}</td></tr>")
    head = ("<th>Node</th><th>UUID</th><th>Model</th>" + "".join(f"<th>{escape(b)}</th>" for b in benches)
            + "<th>Recommendation</th>")
    key = ('<p class="key">One row per outlier GPU; each benchmark column is the GPU\'s PerfVar '
           '(<span class="swatch" style="background:#fbe0dd"></span> <span class="bad">red</span>: an outlier on '
           'that benchmark; plain: within a normal bin there; –: not profiled on it).</p>')
    return (f'<div class="wrap"><table><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table></div>'
            + key)


def unprofiled_table(stored: StoredClassification) -> str:
    rows = sorted((r for r in stored.results if not (r.profiled and finite(r.perfvar))),
                  key=lambda r: (r.model, r.benchmark, node_of(r), r.uuid))
    if not rows:
        return '<p class="note">Every GPU is profiled for every benchmark.</p>'
    note = ""
    if len(rows) > MAX_UNPROFILED_ROWS:
        note = f'<p class="note">Showing {MAX_UNPROFILED_ROWS} of {len(rows)} unprofiled GPU × benchmark rows.</p>'
        rows = rows[:MAX_UNPROFILED_ROWS]
    body = "".join(
        f"<tr><td>{escape(node_of(r))}</td><td class=\"mono\">{escape(r.uuid)}</td><td>{escape(r.model)}</td>"
        f'<td>{escape(r.benchmark)}</td><td class="num">{escape(r.runs)}</td></tr>'
        for r in rows
    )
    return (f'{note}<div class="wrap"><table><thead><tr><th>Node</th><th>UUID</th><th>Model</th><th>Benchmark</th>'
            f'<th>Valid runs</th></tr></thead><tbody>{body}</tbody></table></div>')


def node_table(stored: StoredClassification) -> str:
    """Every node (worst first): GPUs, outlier GPUs, worst PerfVar per benchmark; searchable text."""
    cells, benches, order = node_cells(stored)
    if not order:
        return ""
    gpus: dict[str, set[str]] = {}
    outliers: dict[str, set[str]] = {}
    for r in stored.results:
        gpus.setdefault(node_of(r), set()).add(r.uuid)
        if r.outlier and r.profiled:
            outliers.setdefault(node_of(r), set()).add(r.uuid)
    note = ""
    total = rows_text(order)
    if len(order) > MAX_NODE_TABLE_ROWS:
        note = f'<p class="note">Showing the {MAX_NODE_TABLE_ROWS} worst rows of {escape(total)}.</p>'
        order = order[:MAX_NODE_TABLE_ROWS]
    head = "<th>Node</th><th>GPUs</th><th>Outlier GPUs</th>" + "".join(f"<th>{escape(b)}</th>" for b in benches)
    rows = []
    for n in order:
        n_out = len(outliers.get(n, ()))
        rows.append(
            f"<tr><td>{escape(n)}</td><td class=\"num\">{len(gpus.get(n, ()))}</td>"
            f'<td class="num{" bad" if n_out else ""}">{n_out}</td>'
            + "".join(f'<td class="num">{_num(cells[n].get(b))}</td>' for b in benches) + "</tr>"
        )
    return (f"<details><summary>All nodes as a table ({escape(total)}; worst PerfVar per benchmark)</summary>"
            f'{note}<div class="wrap"><table><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody>'
            '</table></div><p class="key">A <span class="bad">red</span> count: the node has outlier GPUs.</p>'
            "</details>")


def params_table(params: Any) -> str:
    if not isinstance(params, dict) or not params:
        return '<p class="note">No parameters recorded.</p>'
    body = "".join(
        f'<tr><th scope="row">{escape(k)}</th>'
        f'<td class="mono">{escape(json.dumps(v, sort_keys=True, default=str))}</td></tr>'
        for k, v in sorted(params.items(), key=lambda kv: str(kv[0]))
    )
    return f'<div class="wrap"><table><tbody>{body}</tbody></table></div>'


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f} %"


def savings_gpu_table(gpus: Sequence[dict[str, Any]]) -> str:
    """The GPUs responsible for the most loss, with their graded action (`pal report savings`' `gpus`)."""
    head = "<tr><th>node</th><th>GPU</th><th>UUID</th><th>lost GPU-h</th><th>of lost</th><th>jobs</th>" \
           "<th>action</th></tr>"
    body = "".join(
        f"<tr><td>{escape(g['node'])}</td><td>{escape(g['minor'])}</td><td>{escape(g['uuid'] or '–')}</td>"
        f"<td>{escape(fmt_num(g['lost_gpu_hours']))}</td>"
        f"<td>{escape(_pct(g['share_of_lost']))}</td>"
        f"<td>{escape(g['jobs'])}</td><td>{escape(g['action'] or '–')}</td></tr>" for g in gpus)
    return (f"<p>GPUs responsible for the most loss (their action: <code>pal gpus --actions</code>)</p>"
            f"<table>{head}{body}</table>")


def passive_tables(passive: dict[str, Any]) -> str:
    """The passive-speed section's tables: GPUs whose jobs disagree with their benchmark, and the
    open flags (the report's `passive`)."""
    parts = []
    rows = passive.get("disagreements", [])
    if rows:
        head = ("<tr><th>node</th><th>GPU</th><th>UUID</th><th>class</th><th>benchmark sf</th><th>passive sf</th>"
                "<th>95 % interval</th><th>jobs paced</th><th></th></tr>")
        body = "".join(
            f"<tr><td>{escape(d['node'] or '–')}</td><td>{escape(d['slot'] if d['slot'] is not None else '–')}</td>"
            f"<td>{escape(d['uuid'])}</td><td>{escape(d['job_class'])}</td>"
            f"<td>{escape(fmt_num(d['benchmark_slowdown']))}</td><td>{escape(fmt_num(d['passive_slowdown']))}</td>"
            f"<td>{escape(fmt_num(d['low']))}–{escape(fmt_num(d['high']))}</td><td>{escape(d['paced'])}</td>"
            f"<td>{escape(d['disagrees'])}</td></tr>" for d in rows)
        parts.append("<p>GPUs whose jobs ran slower or faster than their benchmark factor, beyond both "
                     f"uncertainties</p><table>{head}{body}</table>")
    flags = passive.get("flags", [])
    if flags:
        head = "<tr><th>node</th><th>GPU</th><th>UUID</th><th>flag</th><th>detail</th></tr>"
        body = "".join(
            f"<tr><td>{escape(f['node'] or '–')}</td><td>{escape(f['slot'] if f['slot'] is not None else '–')}</td>"
            f"<td>{escape(f['uuid'])}</td><td>{escape(f['kind'].replace('_', '-'))}</td>"
            f"<td>{escape(f['detail'])}</td></tr>" for f in flags)
        parts.append("<p>Open re-profiling requests (<code>pal profile submit --gpus FLAGGED</code>)</p>"
                     f"<table>{head}{body}</table>")
    return "".join(parts)
