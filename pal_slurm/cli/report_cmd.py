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


@click.group(invoke_without_command=True)
@format_option
@click.option("--html", "html_path", type=click.Path(path_type=Path, dir_okay=False), metavar="FILE",
              help="Also write a self-contained HTML page with plots to FILE.")
@click.option("--version", "version", type=int, metavar="N", help="Classification version [default: latest].")
@click.pass_context
def report(ctx: click.Context, fmt: str, html_path: Path | None, version: int | None) -> None:
    """Variability per GPU model x benchmark and per job class: PerfVar spread, bins with
    slowdown factors, and outliers with what to do about them. JSON shape: docs/report-json.md.

    `pal report fairness` shows who got which GPUs and how long pal-slurm held their jobs."""
    if ctx.invoked_subcommand is not None:
        return
    app = ctx.find_object(AppContext)
    assert app is not None
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


def _share(tier_name: str):  # type: ignore[no-untyped-def]
    def cell(r: dict[str, Any]) -> str:
        mine, fleet = r["share"][tier_name], r["fleet_share"][tier_name]
        if mine is None:
            return "-"
        return f"{100 * mine:.0f}%" + ("" if fleet is None else f" ({100 * fleet:.0f}%)")
    return cell


FAIRNESS_COLUMNS = [
    Column("who", lambda r: f"{r['kind']} {r['name']}"),
    Column("jobs", lambda r: r["jobs"], "right"),
    Column("GPU-h", lambda r: r["gpu_hours"], "right"),
    Column("fast (fleet)", _share("fast"), "right"),
    Column("typical (fleet)", _share("typical"), "right"),
    Column("slow (fleet)", _share("slow"), "right"),
    Column("wait p50 s", lambda r: r["added_wait_s"]["median"], "right"),
    Column("wait p95 s", lambda r: r["added_wait_s"]["p95"], "right"),
]
FAIRNESS_CSV = [
    Column("kind", lambda r: r["kind"]), Column("name", lambda r: r["name"]), Column("jobs", lambda r: r["jobs"]),
    Column("gpu_hours", lambda r: r["gpu_hours"]),
    *[Column(f"{t}_share", lambda r, t=t: r["share"][t]) for t in ("fast", "typical", "slow")],
    *[Column(f"fleet_{t}_share", lambda r, t=t: r["fleet_share"][t]) for t in ("fast", "typical", "slow")],
    Column("added_wait_median_s", lambda r: r["added_wait_s"]["median"]),
    Column("added_wait_p95_s", lambda r: r["added_wait_s"]["p95"]),
]


@report.command("fairness")
@format_option
@click.option("--since", metavar="WHEN", help="Only jobs decided since WHEN: an ISO date/time (UTC) or an age "
                                                "like 7d, 12h, 30m [default: everything recorded].")
@click.pass_obj
def fairness_cmd(app: AppContext, fmt: str, since: str | None) -> None:
    """Per account and user: GPU-hours on fast, typical and slow GPUs (for the job's class)
    as a share of theirs, next to the whole fleet's share, and the median and p95 of the
    wait pal-slurm added (submission to release by the placer)."""
    from datetime import UTC, datetime

    from pal_slurm.db.migrate import require_current
    from pal_slurm.fairness import fairness
    from pal_slurm.placer.audit import placed_jobs

    require_current(app.engine)
    now = datetime.now(UTC)
    data = fairness(placed_jobs(app.engine, _since(since, now)), now)
    data["since"] = since
    if fmt == "json":
        emit_json(data)
        return
    rows = [data["fleet"], *data["rows"]]
    emit_rows(rows, FAIRNESS_CSV if fmt == "csv" else FAIRNESS_COLUMNS, fmt,
              title="GPU-hours by speed tier (fast < 0.99 <= typical <= 1.01 < slow, for each job's class) "
                    "and wait added by pal-slurm")


def _since(text: str | None, now: Any) -> Any:
    """`7d` / `12h` / `30m` / `90s` ago, or an ISO date/time (UTC when it has no zone)."""
    import re
    from datetime import UTC, datetime, timedelta

    from pal_slurm.errors import InputError

    if text is None:
        return None
    m = re.fullmatch(r"(\d+)([dhms])", text.strip())
    if m:
        unit = {"d": "days", "h": "hours", "m": "minutes", "s": "seconds"}[m.group(2)]
        return now - timedelta(**{unit: int(m.group(1))})
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise InputError(f"--since {text!r}: not an age (7d, 12h, 30m) or an ISO date/time") from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)
