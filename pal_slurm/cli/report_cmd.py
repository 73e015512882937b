"""`pal report` and `pal gpus`: what operators read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from pal_slurm.cli.context import AppContext
from pal_slurm.cli.render import Column, console, emit_json, emit_rows, format_option


def _bins_text(item: dict[str, Any]) -> str:
    """Regular bins as slowdown x GPUs; outliers are listed below the table."""
    return "  ".join(f"{b['slowdown']:.3f}x{b['gpus']}" for b in item["bins"] if not b["outlier"])


def _pv(key: str):  # type: ignore[no-untyped-def]
    return lambda r: None if r["perfvar"] is None else round(r["perfvar"][key], 4)


BENCHMARK_COLUMNS = [
    Column("model", lambda r: r["model"]),
    Column("benchmark", lambda r: r["benchmark"]),
    Column("GPUs", lambda r: r["gpus"], "right"),
    Column("unprofiled", lambda r: r["unprofiled"], "right"),
    Column("PerfVar min", _pv("min"), "right"),
    Column("p5", _pv("p5"), "right"),
    Column("median", _pv("median"), "right"),
    Column("p95", _pv("p95"), "right"),
    Column("max", _pv("max"), "right"),
    Column("bins (slowdown x GPUs)", _bins_text),
    Column("outliers", lambda r: len(r["outliers"]), "right"),
]
OUTLIER_COLUMNS = [
    Column("node", lambda r: r["node"]), Column("GPU", lambda r: r["uuid"]), Column("model", lambda r: r["model"]),
    Column("benchmark", lambda r: r["benchmark"]), Column("PerfVar", lambda r: r["perfvar"], "right"),
    Column("recommendation", lambda r: r["recommendation"]),
]
CLASS_COLUMNS = [Column("class", lambda r: r["job_class"]), *BENCHMARK_COLUMNS]
CSV_COLUMNS = [Column("job_class", lambda r: r.get("job_class")), *BENCHMARK_COLUMNS[:-2],
               Column("bins", _bins_text), Column("outliers", lambda r: " ".join(r["outliers"]))]


@click.command()
@format_option
@click.option("--html", "html_path", type=click.Path(path_type=Path, dir_okay=False), metavar="FILE",
              help="Also write a self-contained HTML page with plots to FILE.")
@click.option("--version", "version", type=int, metavar="N", help="Classification version [default: latest].")
@click.pass_obj
def report(app: AppContext, fmt: str, html_path: Path | None, version: int | None) -> None:
    """Variability per GPU model x benchmark and per job class: PerfVar spread, bins with
    slowdown factors, and outliers with what to do about them. JSON shape: docs/report-json.md."""
    from pal_slurm.services import load_for_html, load_report

    if html_path is not None:
        from pal_slurm.report_html import write_html

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
    show_report(data)


def show_report(data: dict[str, Any]) -> None:
    """The report as tables for people (also used by `pal demo`)."""
    version = data["classification"]["version"]
    emit_rows(data["benchmarks"], BENCHMARK_COLUMNS, "table",
              title=f"GPU variability per model and benchmark (classification version {version}; "
                    "PerfVar > 1 = slower than the model's median GPU)")
    emit_rows(data["job_classes"], CLASS_COLUMNS, "table", title="Per job class (the bins placement uses)")
    outliers = [{**o, "model": item["model"], "benchmark": item["benchmark"]}
                for item in data["benchmarks"] for o in item["outlier_details"]]
    if outliers:
        emit_rows(outliers, OUTLIER_COLUMNS, "table", title="Outliers: what to do")
    else:
        console().print("no outliers", markup=False)


@click.command()
@format_option
@click.option("--model", metavar="NAME", help="Only GPUs of this model.")
@click.option("--node", metavar="NAME", help="Only GPUs of this node.")
@click.option("--version", "version", type=int, metavar="N", help="Classification version [default: latest].")
@click.pass_obj
def gpus(app: AppContext, fmt: str, model: str | None, node: str | None, version: int | None) -> None:
    """One row per GPU: node, model, bin and slowdown factor per job class, last profiled."""
    from pal_slurm.services import load_gpu_rows

    rows = load_gpu_rows(app.engine, version)
    rows = [r for r in rows if (model is None or r["model"] == model) and (node is None or r["node"] == node)]
    classes = sorted({c for r in rows for c in r["classes"]})
    columns = [Column("node", lambda r: r["node"]), Column("uuid", lambda r: r["uuid"]),
               Column("model", lambda r: r["model"])]
    for c in classes:
        columns.append(Column(f"{c} bin", lambda r, c=c: r["classes"][c]["bin"], "right"))
        columns.append(Column(f"{c} slowdown", lambda r, c=c: r["classes"][c]["slowdown"], "right"))
    columns += [Column("outlier", lambda r: "yes" if r["outlier"] else ""),
                Column("last profiled", lambda r: r["last_profiled"])]
    emit_rows(rows, columns, fmt)
