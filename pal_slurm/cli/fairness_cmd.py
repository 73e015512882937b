"""`pal report fairness`: per account and user, GPU-hours by speed tier and the wait pal-slurm added."""

from __future__ import annotations

from typing import Any

import click

from pal_slurm.cli.context import AppContext
from pal_slurm.cli.numbers import Since, cutoff
from pal_slurm.cli.render import Column, emit_json, emit_rows, format_option


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


@click.command("fairness")
@format_option
@click.option("--since", type=Since(), metavar="WHEN", help="Only jobs decided since WHEN: an ISO date/time (UTC) or an age "
                                                "like 7d, 12h, 30m [default: everything recorded].")
@click.pass_obj
def fairness_cmd(app: AppContext, fmt: str, since: str | None) -> None:
    """Per account and user: GPU-hours on fast, typical and slow GPUs (for the job's class)
    as a share of theirs, next to the whole fleet's share, and the median and p95 of the
    wait pal-slurm added (submission to release by the placer). In observe mode the jobs are
    the ones the placer's ledger accounted, on the GPUs Slurm gave them, with no wait added."""
    from datetime import UTC, datetime

    from pal_slurm.db.migrate import require_current
    from pal_slurm.placer.audit import observed_jobs, placed_jobs
    from pal_slurm.report.fairness import fairness

    require_current(app.engine)
    now = datetime.now(UTC)
    since_at = cutoff(since, now)
    placed = placed_jobs(app.engine, since_at)
    held = {j.job_id for j in placed}
    data = fairness([*placed, *(j for j in observed_jobs(app.engine, since_at) if j.job_id not in held)], now)
    data["since"] = since
    if fmt == "json":
        emit_json(data)
        return
    rows = [data["fleet"], *data["rows"]]
    emit_rows(rows, FAIRNESS_CSV if fmt == "csv" else FAIRNESS_COLUMNS, fmt,
              title="GPU-hours by speed tier (fast < 0.99 <= typical <= 1.01 < slow, for each job's class) "
                    "and wait added by pal-slurm")
