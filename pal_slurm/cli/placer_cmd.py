"""`pal placer` (the daemon), `pal placer release-stale` (the fail-safe), `pal placements`, `pal explain`."""

from __future__ import annotations

import click

from pal_slurm.cli.context import AppContext
from pal_slurm.cli.numbers import Real, Whole
from pal_slurm.cli.render import Column, emit_json, emit_rows, format_option, text_format_option
from pal_slurm.placement.table import policy_names


@click.group(invoke_without_command=True)
@click.option("--once", is_flag=True, help="Run one cycle, print what it did, and exit.")
@click.option("--mode", type=click.Choice(["observe", "enforce"]), help="Override placer.mode.")
@click.option("--policy", help=f"Override placer.policy ({', '.join(policy_names())}).")
@click.option("--interval", type=Real(0.05, 300), help="Seconds between cycles [default: placer.interval_s].")
@click.option("--state-file", help="Override placer.state_file (the file job_submit.lua reads).")
@text_format_option
@click.pass_context
def placer(ctx: click.Context, once: bool, mode: str | None, policy: str | None, interval: float | None,
           state_file: str | None, fmt: str) -> None:
    """The placement daemon (run it on the controller, in the foreground, under systemd).

    \b
    Each cycle: publish the heartbeat the submit filter checks, read jobs and nodes,
    place the GPU jobs the filter held (enforce mode) with the configured policy, rewrite
    their GRES request to per-slot types and NodeList, release, and verify. Anything it
    cannot place is released unchanged with the reason in its admin comment. SIGTERM
    releases every job it holds. In observe mode no job is changed; decisions are only
    recorded (see `pal placements`).
    """
    if ctx.invoked_subcommand is not None:
        return
    app = ctx.find_object(AppContext)
    assert app is not None
    from pal_slurm.placer.service import build_placer, one_placer, run_forever, start_metrics, tune_gc

    app.engine  # noqa: B018 - a mistyped SQLite URL stops the daemon here, with the path, before it holds anything
    metrics = None if once else start_metrics(app.cfg, lambda: app.engine)
    p = build_placer(app.cfg, lambda: app.engine, mode=mode, policy=policy, state_file=state_file, metrics=metrics,
                     background_db=not once)
    one = one_placer(app.cfg, lambda: app.engine, state_file=state_file, runner=p.runner)
    tune_gc()
    if once:
        if not one.take():
            raise click.ClickException(f"{one.why}: one placer at a time; --once changes nothing beside it")
        report = p.cycle()
        if fmt == "json":
            emit_json(report.as_dict())
        else:
            d = report.as_dict()
            click.echo(" ".join(f"{k}={len(v) if isinstance(v, list) else v}" for k, v in d.items()))
        one.release()
        return
    run_forever(p, interval or p.cfg.interval_s, one)


@placer.command("release-stale")
@click.option("--max-age", type=Real(0, 86_400), help="Heartbeat age in seconds that counts as stale [default: placer.stale_after_s].")
@click.option("--force", is_flag=True, help="Release every held job even if the heartbeat is fresh.")
@click.option("--grace", is_flag=True,
              help="Let the filter keep holding new GPU jobs for placer.restart_grace_s (each briefly), as after "
                   "a daemon stop: ExecStopPost uses it so that a restart leaves no unheld window.")
@click.option("--state-file", help="Override placer.state_file.")
@text_format_option
@click.pass_obj
def release_stale(app: AppContext, max_age: float | None, force: bool, grace: bool, state_file: str | None,
                  fmt: str) -> None:
    """Fail-safe: release every job pal-slurm holds when the daemon's heartbeat is stale, and
    give every placement that cannot start (BadConstraints, priority 0, its node gone) the
    user's request back.

    \b
    Never acts beside a live placer: it takes the placer's lock file first, and where the
    database is a server asks it (3 s at most) whether a placer on another host holds the
    database lock; a database that does not answer leaves the lock file in charge. Needs
    only the Slurm commands otherwise.

    \b
    Run by pal-placer-failsafe.timer and by ExecStopPost of pal-placer.service. Without
    systemd, run it from cron every minute:
      * * * * * slurm PAL_CONFIG=/etc/pal/pal.toml /usr/local/bin/pal placer release-stale
    (as the daemon runs: SlurmUser; setting AdminComment needs SlurmUser, root or AdminLevel=Administrator).
    """
    from pal_slurm.placer.service import build_placer, one_placer, release_stale as fail_safe

    one = one_placer(app.cfg, lambda: app.engine, state_file=state_file, connect_timeout_s=3)
    out = fail_safe(build_placer(app.cfg, lambda: app.engine, state_file=state_file), max_age=max_age, force=force,
                    grace=grace, one=one)
    age, stale, released = out["heartbeat_age_s"], out["stale"], out["released"]
    if fmt == "json":
        emit_json(out)
    else:
        what = "no heartbeat" if age is None else f"heartbeat {age:.0f} s old"
        if not stale:
            click.echo(f"{what}; daemon alive, nothing to do")
        elif out["locked_by"]:
            click.echo(f"{what}; {out['locked_by']}: a placer is alive, nothing released")
        else:
            click.echo(f"{what}; released {len(released)} held job(s)")


PLACEMENT_COLUMNS = [
    Column("job", lambda r: r["job_id"]),
    Column("decided", lambda r: (r["decided_at"] or "")[:19]),
    Column("outcome", lambda r: r["outcome"]),
    Column("class", lambda r: r["class"] or "-"),
    Column("policy", lambda r: r["policy"]),
    Column("gpus", lambda r: " ".join(f"{g.get('node')}:{g.get('minor')}" for g in r["gpus"] or []) or "-"),
    Column("reason", lambda r: r["reason"]),
]


@click.command("placements")
@click.option("--job", "job_id", help="Only this job.")
@click.option("--limit", type=Whole(1, 100_000), default=50, show_default=True)
@format_option
@click.pass_obj
def placements(app: AppContext, job_id: str | None, limit: int, fmt: str) -> None:
    """List placement decisions, newest first (what the placer did and why)."""
    from pal_slurm.db.migrate import require_current
    from pal_slurm.placer.audit import placements_for

    require_current(app.engine)
    rows = placements_for(app.engine, job_id, limit)
    if job_id is not None and not rows:  # a filter that matches nothing is an error, in every format
        from pal_slurm.errors import InputError

        raise InputError(f"job {job_id}: no placement decision recorded (only GPU jobs the placer held are recorded)")
    if fmt == "table" and not rows:  # not an empty table that reads like a listing
        click.echo("no placement decision recorded" + (f" for job {job_id}" if job_id else " yet")
                   + " (only GPU jobs the placer held are recorded)")
        return
    emit_rows(rows, PLACEMENT_COLUMNS, fmt, title="placements")


@click.command("explain")
@click.argument("job_id")
@text_format_option
@click.pass_obj
def explain(app: AppContext, job_id: str, fmt: str) -> None:
    """Why job JOB_ID got its GPUs (or was released unchanged): every decision recorded for it."""
    from pal_slurm.db.migrate import require_current
    from pal_slurm.errors import InputError
    from pal_slurm.placer.audit import placements_for

    if not job_id.replace("_", "").isdigit():
        raise InputError(f"not a Slurm job id: {job_id!r}")
    require_current(app.engine)
    rows = placements_for(app.engine, job_id, limit=100)
    if not rows:  # nothing found: exit 1, as for a job id that is not one
        raise InputError(f"job {job_id}: no decision recorded (not a GPU job held by pal-slurm, or before the "
                         "placer ran)")
    if fmt == "json":
        emit_json({"job_id": job_id, "decisions": rows})
        return
    for r in reversed(rows):
        click.echo(f"job {job_id} at {r['decided_at']}: {r['outcome']} (policy {r['policy']}, class {r['class'] or '-'}"
                   f"{', classes v' + str(r['classification_version']) if r['classification_version'] else ''})")
        for g in r["gpus"] or []:
            sf = g.get("slowdown")
            click.echo(f"  gpu {g.get('node')}:{g.get('minor')} ({g.get('type', '-')})"
                       + (f" slowdown {sf:.3f}" if isinstance(sf, (int, float)) else ""))
        click.echo(f"  why: {r['reason']}")
        alts = r.get("alternatives") or []
        if alts:
            click.echo("  weighed: " + "; ".join(
                f"{'+'.join(a.get('gpus') or []) or 'nothing'} (weight {a.get('weight', 0):.3f})" for a in alts))
