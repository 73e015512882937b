"""`pal report`: the fleet's variability per GPU model x benchmark and per job class, as operators
read it (its subcommands: `pal report fairness`, `pal report savings`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from pal_slurm.cli.context import AppContext
from pal_slurm.cli.numbers import ident
from pal_slurm.cli.outlier_columns import action_columns, outlier_perfvars, short_ids
from pal_slurm.cli.render import Column, emit_json, emit_rows, format_option, prose, wide_option
from pal_slurm.numfmt import fmt_num


def _bins_text(row: dict[str, Any]) -> str:
    """The report's bins cell (pal_slurm.report.data says how; imported here, when a table is drawn,
    because the report module reads the database's records: `pal report --help` stays light)."""
    from pal_slurm.report.data import bins_text as text

    return text(row)


def _regular_bins_text(row: dict[str, Any]) -> str | None:
    from pal_slurm.report.data import regular_bins

    return _bins_text(row) if regular_bins(row) else None


def _pv(key: str):  # type: ignore[no-untyped-def]
    return lambda r: None if r["perfvar"] is None else fmt_num(r["perfvar"][key])


def _pv_range(low: str, high: str):  # type: ignore[no-untyped-def]
    """One cell such as 0.946-1.122: a range that fits 80 columns whole."""
    return lambda r: None if r["perfvar"] is None else f"{fmt_num(r['perfvar'][low])}-{fmt_num(r['perfvar'][high])}"


def _perfvar_columns(wide: bool) -> list[Column]:
    """The PerfVar spread. --wide: min, p5, median, p95, max apart; otherwise the range (min-max)
    and the p5-p95 spread as one cell each, which fit 80 columns, and the median (always near 1)
    goes first when the terminal is narrow."""
    if wide:
        return [Column(f"PerfVar {k}", _pv(k), "right") for k in ("min", "p5", "median", "p95", "max")]
    return [Column("PerfVar\nmin-max", _pv_range("min", "max"), "right"),
            Column("PerfVar\np5-p95", _pv_range("p5", "p95"), "right"),
            Column("PerfVar\nmedian", _pv("median"), "right", optional=True)]


def benchmark_columns(wide: bool) -> list[Column]:
    """Per model x benchmark; the model is in the title (one table per model) unless --wide."""
    return [
        *([Column("model", lambda r: r["model"])] if wide else []),
        Column("benchmark", lambda r: r["benchmark"]),
        Column("GPUs", lambda r: r["gpus"], "right"),
        Column("unprofiled", lambda r: r["unprofiled"], "right", optional=not wide),
        *_perfvar_columns(wide),
        Column("bins: slowdown\nfactor x GPUs", _bins_text, wrap=True),
        Column("outliers", lambda r: len(r["outliers"]), "right"),
    ]


def class_columns(wide: bool) -> list[Column]:
    return [Column("class", lambda r: r["job_class"]), *benchmark_columns(wide)]


#: Under the report's tables: which scale each number is on.
REPORT_LEGEND = ("PerfVar: measured, a GPU's median time over its model's median GPU's (> 1 = slower), spread over "
                 "the GPUs. Bins: slowdown factor x GPUs, the factor placement ranks by (1.000 = the bin of the "
                 "model's median GPU). `pal gpus --explain GPU` shows one GPU on both scales.")


CSV_COLUMNS = [Column("job_class", lambda r: r.get("job_class")), Column("model", lambda r: r["model"]),
               Column("benchmark", lambda r: r["benchmark"]), Column("GPUs", lambda r: r["gpus"]),
               Column("unprofiled", lambda r: r["unprofiled"]),
               *[Column(h, lambda r, k=k: None if r["perfvar"] is None else r["perfvar"][k])
                 for h, k in (("PerfVar min", "min"), ("PerfVar p5", "p5"), ("PerfVar median", "median"),
                              ("PerfVar p95", "p95"), ("PerfVar max", "max"))],
               Column("bins (slowdown factor x GPUs)", _regular_bins_text),  # empty, as every missing cell
               Column("outliers", lambda r: " ".join(r["outliers"]))]


@click.group(invoke_without_command=True)
@format_option
@click.option("--html", "html_path", type=click.Path(path_type=Path, dir_okay=False), metavar="FILE",
              help="Also write a self-contained HTML page with plots to FILE.")
@click.option("--version", "version", type=ident(), metavar="N", help="Classification version [default: latest].")
@wide_option
@click.pass_context
def report(ctx: click.Context, fmt: str, html_path: Path | None, version: int | None, wide: bool) -> None:
    """Variability per GPU model x benchmark and per job class: PerfVar spread, bins with
    slowdown factors, and outliers with what to do about them (docs/admin-guide.md explains
    each action). JSON shape: docs/report-json.md.

    `pal report fairness` shows who got which GPUs and how long pal-slurm held their jobs."""
    if ctx.invoked_subcommand is not None:
        return
    app = ctx.find_object(AppContext)
    assert app is not None
    from pal_slurm.report.service import load_for_html, load_report

    if html_path is not None:
        from pal_slurm.report.page import write_html

        stored, data = load_for_html(app.engine, app.cfg, version)
        write_html(html_path, stored, data)
        click.echo(f"HTML report written to {html_path}", err=True)
    else:
        data = load_report(app.engine, app.cfg, version)
    if fmt == "json":
        emit_json(data)
        return
    if fmt == "csv":  # one row per benchmark (job_class empty), then one per job class
        emit_rows([*data["benchmarks"], *data["job_classes"]], CSV_COLUMNS, "csv")
        return
    show_report(data, wide=wide)


def show_report(data: dict[str, Any], *, wide: bool = False) -> None:
    """The report as tables for people (also used by `pal demo`): one story with the JSON and
    the HTML -- the same regular bins, the same outlier counts, numbers rounded once (fmt_num)."""
    from pal_slurm.report.data import identity_text

    version = data["classification"]["version"]
    if data.get("identity"):
        prose("GPUs in the database: " + identity_text(data["identity"]))
    models = sorted({i["model"] for i in data["benchmarks"]}) if not wide else [None]
    for model in models:
        items = [i for i in data["benchmarks"] if model is None or i["model"] == model]
        classes = [i for i in data["job_classes"] if model is None or i["model"] == model]
        where = "" if model is None else f"{model}, "
        emit_rows(items, benchmark_columns(wide), "table", wide=wide,
                  title=f"GPU variability per benchmark ({where}classification version {version})")
        emit_rows(classes, class_columns(wide), "table", wide=wide,
                  title=f"Per job class ({where}the bins placement uses)")
    prose(REPORT_LEGEND)
    actions = data.get("actions", [])
    if actions:
        ids = short_ids(a["uuid"] for a in actions)
        emit_rows(actions, action_columns(wide, ids, outlier_perfvars(data)), "table", wide=wide,
                  title="Outlier GPUs: what to do (docs/admin-guide.md, \"Outliers\")")
    else:
        prose("no outliers")
    passive = data.get("passive") or {}
    if passive.get("estimates"):
        slower = sum(d["disagrees"] == "slower" for d in passive["disagreements"])
        fail_slow = sum(f["kind"] == "fail_slow" for f in passive["flags"])
        prose(f"passive speed (learned {str(passive['learned_at'])[:16]}): {passive['estimates']} GPU x class "
              f"estimates; {slower} slower than the benchmark beyond both uncertainties; {fail_slow} fail-slow "
              "flag(s) open (`pal gpus --passive`)")
