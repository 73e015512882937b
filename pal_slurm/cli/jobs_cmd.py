"""`pal jobs`: job classes learned from the agent's job profiles, and the admin rules that override them."""

from __future__ import annotations

from pathlib import Path

import click

from pal_slurm.cli.context import AppContext
from pal_slurm.cli.numbers import MAX_ID
from pal_slurm.cli.render import Column, emit_json, emit_rows, fmt_float, format_option, printable, text_format_option


@click.group()
def jobs() -> None:
    """Job sensitivity classes: what was learned from real jobs, and admin override rules.

    \b
    pal jobs learn                 recompute classes from job profiles (pal agent) and identities
    pal jobs classes               what was learned, from what evidence
    pal jobs rule add --class D --user alice --name etl
    pal jobs rule list | delete ID | export
    pal jobs import-history FILE   runtimes from an `sacct -P` export (the placer's estimates)
    """


@jobs.command()
@text_format_option
@click.pass_obj
def learn(app: AppContext, fmt: str) -> None:
    """Recompute every job fingerprint's class from job_profiles joined with job_identities.

    The rule (compute score = sm * sm / (sm + mem), thresholds in [jobs]) is described in
    docs/agent.md. Fingerprints with fewer than [jobs] min_samples GPU-samples get no class.
    """
    from pal_slurm.db.engine import session_scope
    from pal_slurm.db.sensitivity_store import learn as do_learn
    from pal_slurm.db.sensitivity_store import sensitivity_rule

    rule = sensitivity_rule(app.cfg)
    with session_scope(app.engine) as session:
        summary = do_learn(session, rule)
    data = {"profiles": summary.profiles, "unidentified_profiles": summary.unidentified,
            "fingerprints": summary.fingerprints, "classified": summary.classified, "by_class": summary.by_class,
            "removed": summary.removed}
    if fmt == "json":
        emit_json(data)
        return
    per_class = ", ".join(f"{k}: {v}" for k, v in summary.by_class.items()) or "none"
    click.echo(f"learned {summary.classified} of {summary.fingerprints} job fingerprints from {summary.profiles} "
               f"job profiles ({per_class}); {summary.unidentified} profiles without a job identity; "
               f"{summary.removed} stale classes removed")


@jobs.command("import-history")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--cluster", "source", default="default", show_default=True, metavar="NAME",
              help="The cluster the export is from (job ids are per cluster; the same id from two clusters "
                   "is two jobs).")
@text_format_option
@click.pass_obj
def import_history(app: AppContext, file: Path, source: str, fmt: str) -> None:
    """Import finished jobs from an `sacct -P` export: the placer learns runtimes from them.

    \b
    Export on a host with Slurm accounting (slurmdbd):
      sacct -P -a -X -S now-30days \\
        --format=JobID,JobName,User,Submit,Start,End,Elapsed,State,AllocTRES,NodeList > jobs.txt
      pal jobs import-history jobs.txt --cluster NAME

    Required columns: JobID, JobName, User, Start, State and End or Elapsed (AllocTRES: GPUs,
    NNodes or NodeList: nodes, optional). Job steps, jobs that never started or have not ended
    and jobs without GPUs are skipped; importing the same export again adds nothing. A job's
    estimate is then the 0.9 quantile of the newest [jobs] history COMPLETED or TIMEOUT runs of
    its user and job name (at least [jobs] runtime_min_jobs of the last 90 days), never more
    than its time limit; a runtime learned from its job profiles (same command) comes first.
    """
    from pal_slurm.services.jobs import import_history_file

    result = import_history_file(lambda: app.engine, file, source)  # the file is read first
    data = {"file": str(file), "cluster": result.source, "jobs": result.jobs, "imported": result.added,
            "already_present": result.already_present, "imported_by_state": result.by_state,
            "skipped": sum(result.skipped.values()), "skipped_by_reason": result.skipped,
            "job_steps_skipped": result.steps,
            "bad_rows": [{"line": line, "problem": problem} for line, problem in result.bad]}
    if fmt == "json":
        emit_json(data)
        return
    by_state = ", ".join(f"{k}: {v}" for k, v in result.by_state.items()) or "none"
    click.echo(f"{file}: imported {result.added} jobs into cluster {result.source!r} ({by_state}); "
               f"{result.already_present} already present; {result.steps} job steps skipped")
    if result.skipped:
        click.echo(f"skipped {sum(result.skipped.values())} jobs: "
                   + "; ".join(f"{v} {k}" for k, v in result.skipped.items()))
    for line, problem in result.bad[:20]:
        click.echo(f"{file}:{line}: {printable(problem)}; row skipped", err=True)
    if len(result.bad) > 20:
        click.echo(f"{file}: {len(result.bad) - 20} more bad rows skipped (--format json lists them all)", err=True)
    if result.jobs and not any(k in result.by_state for k in ("COMPLETED", "TIMEOUT")) and result.added:
        click.echo("note: no COMPLETED or TIMEOUT job among them: nothing to learn runtimes from")


@jobs.command()
@format_option
@click.pass_obj
def classes(app: AppContext, fmt: str) -> None:
    """Learned job classes: fingerprint, user, job name, class, and the evidence behind it
    (jobs, GPU-samples, mean GPU utilisation, SM activity, memory-bandwidth utilisation, score).

    `filter rule` says whether the submit filter gets it as a {user, name} rule (not when the
    same user + name has scripts learned into different classes)."""
    from pal_slurm.db.engine import session_scope
    from pal_slurm.db.sensitivity_store import learned_classes

    with session_scope(app.engine) as session:
        rows = learned_classes(session)
    columns = [
        Column("fingerprint", lambda r: r["fingerprint"]), Column("user", lambda r: r["user"]),
        Column("name", lambda r: r["name"]), Column("class", lambda r: r["class"]),
        Column("score", lambda r: fmt_float(r["compute_score"], 2), "right"),
        Column("jobs", lambda r: r["jobs"], "right"), Column("samples", lambda r: r["samples"], "right"),
        Column("util %", lambda r: fmt_float(r["gpu_util_mean"], 1), "right"),
        Column("SM %", lambda r: fmt_float(r["sm_active_mean"], 1), "right"),
        Column("mem bw %", lambda r: fmt_float(r["mem_bw_util_mean"], 1), "right"),
        Column("filter rule", lambda r: r["filter_rule"]),
    ]
    emit_rows(rows, columns, fmt, title="learned job classes")


@jobs.group()
def rule() -> None:
    """Admin rules: jobs matching every given field get the class, before anything learned."""


@rule.command("add")
@click.option("--class", "job_class", required=True, help="The class to give (one of the configured job classes).")
@click.option("--user", help="Exact Slurm user name.")
@click.option("--name", help="Exact job name.")
@click.option("--account", help="Exact Slurm account.")
@click.option("--partition", help="Exact partition.")
@click.option("--note", default="", help="Why (shown by `pal jobs rule list`).")
@click.option("--replace", is_flag=True,
              help="When a rule with the same fields gives another class, make it give this one instead.")
@text_format_option
@click.pass_obj
def rule_add(app: AppContext, job_class: str, user: str | None, name: str | None, account: str | None,
             partition: str | None, note: str, replace: bool, fmt: str) -> None:
    """Add a rule; at least one of --user/--name/--account/--partition. Matching is exact; the
    most specific rule wins, then the oldest. A rule with the same fields as an existing one but
    another class is refused, naming that rule, unless --replace. The placement daemon
    publishes rules to the submit filter on its next cycle."""
    from pal_slurm.db.engine import session_scope
    from pal_slurm.db.sensitivity_store import put_rule

    with session_scope(app.engine) as session:
        change = put_rule(session, job_class, list(app.cfg.job_classes), user=user, name=name, account=account,
                          partition=partition, note=note, replace=replace)
    added = change.rule
    if fmt == "json":
        emit_json({"id": added.id, "rule_id": added.rule_id, "class": added.job_class, "user": added.user,
                   "name": added.name, "account": added.account, "partition": added.partition, "note": added.note,
                   "replaced_class": change.replaced_class, "unchanged": change.unchanged})
    elif change.unchanged:
        click.echo(f"{added.rule_id} already gives class {added.job_class}: nothing changed")
    elif change.replaced_class is not None:
        click.echo(f"replaced {added.rule_id}: class {added.job_class} (was {change.replaced_class})")
    else:
        click.echo(f"added {added.rule_id}: class {added.job_class}")


@rule.command("list")
@format_option
@click.pass_obj
def rule_list(app: AppContext, fmt: str) -> None:
    """Admin rules in the order the submit filter tries them (first match wins)."""
    from pal_slurm.db.engine import session_scope
    from pal_slurm.db.sensitivity_store import list_rules

    with session_scope(app.engine) as session:
        rows = [{"id": r.id, "rule_id": r.rule_id, "class": r.job_class, "user": r.user, "name": r.name,
                 "account": r.account, "partition": r.partition, "note": r.note, "created_at": created.isoformat()}
                for r, created in list_rules(session)]
    columns = [Column("id", lambda r: r["id"], "right"), Column("class", lambda r: r["class"]),
               Column("user", lambda r: r["user"]), Column("name", lambda r: r["name"]),
               Column("account", lambda r: r["account"]), Column("partition", lambda r: r["partition"]),
               Column("note", lambda r: r["note"]), Column("created", lambda r: r["created_at"][:19])]
    emit_rows(rows, columns, fmt, title="job class rules")


class RuleId(click.ParamType):
    """A rule as `pal jobs rule add` printed it (rule-4) or its bare number (4)."""

    name = "rule-N"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        text = str(value).strip().lower().removeprefix("rule-")
        if not text.isdigit() or not 1 <= int(text) <= MAX_ID:
            self.fail(f"{value!r} is not a rule id (rule-4, or 4: what `pal jobs rule add` printed)", param, ctx)
        return int(text)


@rule.command("delete")
@click.argument("rule_id", type=RuleId(), metavar="RULE")
@click.pass_obj
def rule_delete(app: AppContext, rule_id: int) -> None:
    """Delete RULE: its id as `pal jobs rule add` printed it (rule-4) or the number `pal jobs
    rule list` shows (4)."""
    from pal_slurm.db.engine import session_scope
    from pal_slurm.db.sensitivity_store import delete_rule

    with session_scope(app.engine) as session:
        delete_rule(session, rule_id)
    click.echo(f"deleted rule-{rule_id}")


@rule.command("export")
@click.pass_obj
def rule_export(app: AppContext) -> None:
    """Print the `rules` list the submit filter gets (JSON; admin rules, then agreed learned classes)."""
    from pal_slurm.db.class_rules_store import load_class_rules
    from pal_slurm.db.engine import session_scope
    from pal_slurm.jobs.rules import filter_rules

    with session_scope(app.engine) as session:
        emit_json(filter_rules(load_class_rules(session)))
