"""`pal report savings`: GPU-hours lost to slower-than-typical GPUs, and what pal-slurm saves."""

from __future__ import annotations

import click

from pal_slurm.cli.context import AppContext
from pal_slurm.cli.numbers import Since, Whole, cutoff
from pal_slurm.cli.render import Column, emit_json, emit_rows, format_option, prose
from pal_slurm.numfmt import fmt_num

SINCE_HELP = ("Only jobs that ended since WHEN: an age like 7d, 12h, 30m, 90s or an ISO date/time (UTC when it "
              "has no zone) [default: 7d].")


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _num(x: float | None) -> str:
    return "-" if x is None else fmt_num(x)


GROUP_COLUMNS = [
    Column("name", lambda r: r["name"]),
    Column("jobs", lambda r: r["jobs"], "right"),
    Column("GPU-h", lambda r: _num(r["gpu_hours"]), "right"),
    Column("lost GPU-h", lambda r: _num(r["lost_gpu_hours"]), "right"),
    Column("lost", lambda r: _pct(r["lost_share"]), "right"),
    Column("saved GPU-h", lambda r: _num(r["saved_gpu_hours"]), "right"),
    Column("saved of lost", lambda r: _pct(r["saved_share"]), "right"),
    Column("unaccounted", lambda r: r["unaccounted_jobs"], "right"),
]
GROUP_CSV = [
    Column("name", lambda r: r["name"]), Column("jobs", lambda r: r["jobs"]),
    Column("accounted_jobs", lambda r: r["accounted_jobs"]), Column("unaccounted_jobs", lambda r: r["unaccounted_jobs"]),
    Column("unaccounted_gpu_hours", lambda r: r["unaccounted_gpu_hours"]),
    Column("gpu_hours", lambda r: r["gpu_hours"]), Column("lost_gpu_hours", lambda r: r["lost_gpu_hours"]),
    Column("lost_share", lambda r: r["lost_share"]), Column("net_tax_gpu_hours", lambda r: r["net_tax_gpu_hours"]),
    Column("observe_saved_gpu_hours", lambda r: r["observe_saved_gpu_hours"]),
    Column("enforce_saved_gpu_hours", lambda r: r["enforce_saved_gpu_hours"]),
    Column("saved_share", lambda r: r["saved_share"]),
]
GPU_COLUMNS = [
    Column("node", lambda r: r["node"]),
    Column("minor", lambda r: r["minor"], "right"),
    Column("lost GPU-h", lambda r: _num(r["lost_gpu_hours"]), "right"),
    Column("of lost", lambda r: _pct(r["share_of_lost"]), "right"),
    Column("jobs", lambda r: r["jobs"], "right"),
    Column("action", lambda r: r["action"] or "-"),
    Column("reason", lambda r: r["reason"] or "", optional=True),
]


@click.command("savings")
@click.option("--since", type=Since(), default="7d", show_default=False, metavar="WHEN", help=SINCE_HELP)
@click.option("--by", type=click.Choice(("partition", "account", "user", "class")),
              help="One row per partition, account, user or job class.")
@click.option("--top", type=Whole(0, 1000), default=10, show_default=True,
              help="How many of the GPUs responsible for the most loss to list.")
@format_option
@click.pass_obj
def savings(app: AppContext, since: str, by: str | None, top: int, fmt: str) -> None:
    """What slower-than-typical GPUs cost the jobs that finished, and how much of it the
    placer's choice avoids (enforce mode) or would have avoided (observe mode): GPU-hours and
    shares, the GPUs responsible for most of the loss with their graded action, and one line
    that sums it up. Jobs whose GPUs or factors were unknown are counted as unaccounted."""
    from datetime import UTC, datetime

    from pal_slurm.db.accounting_store import load_cells
    from pal_slurm.db.migrate import require_current
    from pal_slurm.report.service import gpu_context
    from pal_slurm.savings import savings as build

    since_time = cutoff(since, datetime.now(UTC))
    require_current(app.engine)
    cells, pace = load_cells(app.engine, since_time, by)
    names, actions = gpu_context(app.engine, app.cfg) if pace and top else ({}, {})
    data = build(cells, pace, by=by, since=since, gpu_names=names, actions=actions, top=top)
    if fmt == "json":
        emit_json(data)
        return
    if fmt == "csv":
        emit_rows([{"name": "total", **data}, *data["groups"]], GROUP_CSV, fmt)
        return
    prose(data["headline"])  # one line in a pipe (scripts grep it), wrapped between words on a terminal
    emit_rows([{"name": "total", **data}, *data["groups"]], GROUP_COLUMNS, fmt,
              title=f"GPU-hours lost to slower-than-typical GPUs{f' by {by}' if by else ''} and saved by the "
                    "placer's choice")
    if data["gpus"]:
        emit_rows(data["gpus"], GPU_COLUMNS, fmt, title="GPUs responsible for the most loss (action: pal gpus --actions)")


__all__ = ["savings"]
