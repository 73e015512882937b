"""`pal gpus quarantine GPU`, `pal gpus release GPU`, `pal gpus quarantined`: one GPU slot out of
service (and back) without draining its node, through a holder job (pal_slurm/slurm/quarantine_model.py;
docs/admin-guide.md, "One GPU out of service")."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from pal_slurm.cli.context import AppContext
from pal_slurm.cli.render import Column, emit_rows, format_option, prose
from pal_slurm.errors import InputError

if TYPE_CHECKING:
    from pal_slurm.slurm.quarantine import QuarantineSlurm
    from pal_slurm.slurm.quarantine_model import Holder
    from pal_slurm.slurm.quarantine_plan import QuarantinePlan, ReleasePlan

#: the holder's pending reasons that mean "waits for the slot": anything else is a problem to report
WAITING_FOR_SLOT = frozenset({"Resources", "Priority", "None"})
#: how long --apply gives a holder on a free slot to start before it reports what Slurm shows
START_WAIT_S = 10.0


@click.command("quarantine")
@click.argument("gpu")
@click.option("--apply", "apply", is_flag=True, help="Submit the holder job (default: only print what would run).")
@click.option("--reason", default="", metavar="TEXT", help="Why (kept in the holder job's admin comment and the audit).")
@click.option("--partition", metavar="NAME",
              help="The holder's partition [default: the UP partition of the highest PriorityTier holding the node].")
@click.option("--force", is_flag=True,
              help="Take it out of service even when pending jobs would be left with nowhere to run (they wait).")
@click.pass_obj
def quarantine_cmd(app: AppContext, gpu: str, apply: bool, reason: str, partition: str | None, force: bool) -> None:
    """Take one GPU out of service without draining its node: a holder job pinned to its slot keeps
    every new job off it, while the node's other GPUs keep running jobs. Jobs running on it finish
    untouched; the holder takes it after them. It lasts until `pal gpus release GPU`, with no
    placer running and across restarts of Slurm. Costs: one CPU and 1 MB of the node, and the node
    takes no --exclusive job meanwhile. A dry run unless --apply.

    GPU: NODE:MINOR (the slot `pal gpus` lists), or a GPU UUID the database knows."""
    import time

    from pal_slurm.slurm.quarantine_model import Refused, clean_reason
    from pal_slurm.slurm.quarantine_plan import plan_quarantine

    node, minor = _slot_named(app, gpu)
    slurm = _slurm(app)
    try:
        plan = plan_quarantine(slurm.read(), node, minor, reason=clean_reason(reason) if reason.strip() else "",
                               user=_by(), now=time.time(), partition=partition, force=force)
        if plan.present:
            _present(slurm, plan, apply)
            return
        if apply:
            clean_reason(plan.tag.reason)  # a new holder carries its reason
    except Refused as exc:
        raise InputError(f"{node}:{minor}: not taken out of service: {exc}") from exc
    _say_checks(plan)
    if not apply:
        _dry_run(plan)
        return
    _apply_quarantine(app, slurm, plan)


def _present(slurm: QuarantineSlurm, plan: QuarantinePlan, apply: bool) -> None:
    """The slot has a holder already: say so; one requeued after a node failure is started now."""
    from pal_slurm.placer.writer import restart_holder
    from pal_slurm.slurm.quarantine_model import shown, start_now_argv

    for h in plan.present:
        if not h.requeued:
            click.echo(f"{plan.slot.name} ({plan.slot.gres_type}) is out of service already: {_holder_state(h)}")
        elif apply:
            restart_holder(slurm, h)
            click.echo(f"{plan.slot.name} ({plan.slot.gres_type}): holder job {h.job_id}, requeued after its node "
                       "failed, may start now: it takes the slot at Slurm's next scheduling pass")
        else:
            click.echo(f"would run: {shown(start_now_argv(h.job_id))}")
            click.echo(f"{plan.slot.name}: {_holder_state(h)}", err=True)


def _say_checks(plan: QuarantinePlan) -> None:
    """The pending jobs the quarantine would block (a refusal unless --force), those not checked."""
    for b in plan.blocked:
        click.echo(f"pal: {'warning' if plan.forced else 'error'}: {b.why}", err=True)
    if plan.unchecked:
        click.echo(f"pal: note: not checked, GPUs per task or per socket: pending job(s) {', '.join(plan.unchecked)}",
                   err=True)
    if plan.refused:
        raise InputError(f"{plan.slot.name}: not taken out of service: {len(plan.blocked)} pending job(s) would have "
                         "nowhere to run (above); --force takes it out anyway and they wait until it is released")


def _dry_run(plan: QuarantinePlan) -> None:
    from pal_slurm.slurm.quarantine_model import shown

    for argv in plan.commands:
        click.echo(f"would run: {shown(argv)}")
    click.echo(_costs(plan))
    click.echo(f"dry run: nothing changed; add --apply to take {plan.slot.name} out of service"
               + ("" if plan.tag.reason else " (with --reason TEXT)"), err=True)


def _costs(plan: QuarantinePlan) -> str:
    busy = (f"; job(s) {', '.join(plan.busy)} on it now finish untouched, and the holder takes it after them"
            if plan.busy else "")
    return (f"the holder job (partition {plan.partition}) takes 1 CPU and 1 MB of {plan.slot.node} until released, "
            f"and {plan.slot.node} takes no --exclusive job meanwhile{busy}")


def _apply_quarantine(app: AppContext, slurm: QuarantineSlurm, plan: QuarantinePlan) -> None:
    from pal_slurm.placer.writer import quarantine

    job_id = quarantine(slurm, plan.partition, plan.tag)
    holder = _read_back(slurm, job_id, wait_s=0.0 if plan.busy else START_WAIT_S)
    what = f"{plan.slot.name} ({plan.slot.gres_type})"
    if holder is not None and holder.holds:
        click.echo(f"{what} out of service: holder job {job_id} runs on it; no new job gets it until "
                   f"`pal gpus release {plan.slot.name} --apply`")
    elif holder is not None and holder.waiting and plan.busy and holder.state_reason in WAITING_FOR_SLOT:
        click.echo(f"{what} going out of service: holder job {job_id} waits for the job(s) on it "
                   f"({', '.join(plan.busy)}) to end, then takes it before any other job")
    else:
        state = "not read back" if holder is None else f"{holder.state} ({holder.state_reason})"
        click.echo(f"pal: warning: holder job {job_id} is {state}: until it runs, {what} is NOT out of service "
                   f"(see `scontrol show job {job_id}`)", err=True)
    _audit(app, job_id, "quarantined", plan.slot, plan.tag.reason or "(no reason given)", plan.tag.by)


@click.command("release")
@click.argument("gpu")
@click.option("--apply", "apply", is_flag=True, help="Cancel the holder job (default: only print what would run).")
@click.pass_obj
def release_cmd(app: AppContext, gpu: str, apply: bool) -> None:
    """Put a GPU taken out of service with `pal gpus quarantine` back in service: cancel its holder
    job; the slot takes jobs again at once. A dry run unless --apply.

    GPU: NODE:MINOR (the slot `pal gpus` lists), a GPU UUID the database knows, or PASSED: every
    GPU out of service that passed a re-profile (`pal profile submit --gpus GPU`, then `pal
    classify`): the classification in force has runs of it newer than its quarantine and grades
    it nothing stronger than `placement`; each other one is listed with why it stays out."""
    from pal_slurm.slurm.quarantine_model import Refused
    from pal_slurm.slurm.quarantine_plan import plan_release

    if gpu.strip().upper() == "PASSED":
        _release_passed(app, apply)
        return
    node, minor = _slot_named(app, gpu)
    slurm = _slurm(app)
    try:
        plan = plan_release(slurm.read(), node, minor)
    except Refused as exc:
        raise InputError(f"{node}:{minor}: not released: {exc}") from exc
    if not plan.holders:
        click.echo(f"{plan.slot.name} ({plan.slot.gres_type}) is not out of service (no holder job): nothing to "
                   "release")
        return
    _release(app, slurm, plan, apply)


def _release(app: AppContext, slurm: QuarantineSlurm, plan: ReleasePlan, apply: bool, why: str = "") -> None:
    from pal_slurm.placer.writer import release_quarantine
    from pal_slurm.slurm.quarantine_model import shown

    what = f"{plan.slot.name} ({plan.slot.gres_type})"
    if not apply:
        for argv in plan.commands:
            click.echo(f"would run: {shown(argv)}")
        click.echo(f"dry run: nothing changed; add --apply to put {plan.slot.name} back in service", err=True)
        return
    for h in plan.holders:
        release_quarantine(slurm, h)
        click.echo(f"released {what}: holder job {h.job_id} cancelled; the slot takes jobs again")
        _audit(app, h.job_id, "quarantine-released", plan.slot, f"released (out of service since {_since(h)}: "
               f"{h.tag.reason or 'no reason given'})" + (f"; {why}" if why else ""), _by())


def _release_passed(app: AppContext, apply: bool) -> None:
    """`pal gpus release PASSED`: the verdict on each GPU out of service; the passed ones released."""
    from datetime import UTC, datetime

    from pal_slurm.classification.release_check import verdict
    from pal_slurm.report.data import grade_outliers
    from pal_slurm.report.service import load_stored
    from pal_slurm.slurm.quarantine_plan import ReleasePlan

    slurm = _slurm(app)
    state = slurm.read()
    if not state.holders:
        click.echo("no GPU is out of service (no holder job in Slurm): nothing to release")
        return
    stored = load_stored(app.engine)
    actions = grade_outliers(stored, app.cfg.report.policy(), datetime.now(UTC))
    slots: dict[tuple[str, int], list[Any]] = {}
    for r in stored.results:
        if r.node and r.slot is not None:
            slots.setdefault((r.node, r.slot), []).append(r)
    by_slot: dict[tuple[str, int], list[Holder]] = {}
    for h in state.holders:
        by_slot.setdefault((h.slot.node, h.slot.minor), []).append(h)
    for (node, minor), mine in sorted(by_slot.items()):
        rows = slots.get((node, minor), [])
        uuids = {r.uuid for r in rows}
        since = datetime.fromtimestamp(min(h.tag.at for h in mine), UTC)
        if len(uuids) != 1:
            v = None
            why = ("the classification in force knows no GPU in that slot" if not uuids else
                   f"the classification in force has {len(uuids)} GPUs in that slot")
        else:
            v = verdict([r.last_profiled for r in rows], actions.get(next(iter(uuids))), since,
                        classified_at=stored.created_at, version=stored.version)
            why = v.why
        if v is None or not v.passed:
            click.echo(f"{node}:{minor} stays out of service: {why}")
            continue
        click.echo(f"{node}:{minor} passed: {why}")
        _release(app, slurm, ReleasePlan(mine[0].slot, tuple(mine)), apply, why=f"passed: {why}")


QUARANTINED_COLUMNS = [
    Column("gpu", lambda r: r["gpu"], wrap=False),
    Column("type", lambda r: r["type"]),
    Column("holder", lambda r: r["holder_job"], "right"),
    Column("state", lambda r: r["state"]),
    Column("since", lambda r: r["since"]),
    Column("by", lambda r: r["by"]),
    Column("reason", lambda r: r["reason"], wrap=True),
]


@click.command("quarantined")
@format_option
@click.pass_obj
def quarantined_cmd(app: AppContext, fmt: str) -> None:
    """The GPUs out of service (`pal gpus quarantine`), as Slurm shows their holder jobs: out of
    service (the holder runs on the slot), or going there (it waits for the jobs on it)."""
    rows = [_row(h) for h in _holders_now(_slurm(app))]
    if fmt == "table" and not rows:
        prose("no GPU is out of service (no holder job in Slurm)")
        return
    emit_rows(rows, QUARANTINED_COLUMNS, fmt, title="GPUs out of service (holder jobs)")


def _row(h: Holder) -> dict[str, Any]:
    return {"gpu": h.slot.name, "node": h.slot.node, "minor": h.slot.minor, "type": h.slot.gres_type,
            "holder_job": h.job_id, "state": _state_word(h), "since": _since(h), "by": h.tag.by,
            "reason": h.tag.reason, "slurm_state": h.state, "slurm_reason": h.state_reason}


def _state_word(h: Holder) -> str:
    if h.holds:
        return "out of service"
    if h.requeued:
        return ("NOT out of service: holder requeued after a node failure, waits for its begin time "
                "(`pal gpus quarantine GPU --apply` starts it now)")
    if h.waiting and h.state_reason in WAITING_FOR_SLOT:
        return "going (waits for the jobs on it)"
    return f"NOT out of service: holder {h.state.lower()} ({h.state_reason})"


def _holder_state(h: Holder) -> str:
    return f"holder job {h.job_id}, {_state_word(h)}, since {_since(h)}" + (f": {h.tag.reason}" if h.tag.reason else "")


def _since(h: Holder) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(h.tag.at, UTC).strftime("%Y-%m-%d %H:%M UTC")


def _slurm(app: AppContext) -> QuarantineSlurm:
    from pal_slurm.slurm.cli_backend import CliBackend
    from pal_slurm.slurm.quarantine import QuarantineSlurm

    return QuarantineSlurm(CliBackend(timeout=app.cfg.placer.command_timeout_s), pal_user=_user())


def _holders_now(slurm: QuarantineSlurm) -> list[Holder]:
    return slurm.holders()


def _read_back(slurm: QuarantineSlurm, job_id: str, wait_s: float) -> Holder | None:
    """The holder as Slurm shows it; on a free slot, given up to `wait_s` to start (slurmctld
    starts it at its next scheduling pass)."""
    import time

    deadline = time.monotonic() + wait_s
    while True:
        holder = next((h for h in _holders_now(slurm) if h.job_id == job_id), None)
        if holder is None or holder.holds or time.monotonic() >= deadline:
            return holder
        time.sleep(0.5)


def _user() -> str:
    """The user pal runs as: the holder jobs it submits are this user's in Slurm."""
    import os
    import pwd

    return pwd.getpwuid(os.getuid()).pw_name


def _by() -> str:
    """Who asked: the administrator behind sudo where there is one, else the user pal runs as."""
    import os

    return os.environ.get("SUDO_USER") or _user()


def _slot_named(app: AppContext, text: str) -> tuple[str, int]:
    """NODE:MINOR as given, or the slot of a GPU UUID (or its first 8+ hex digits) the database knows."""
    from pal_slurm.slurm.quarantine_model import parse_gpu

    named = parse_gpu(text)
    if named is not None:
        return named
    from pal_slurm.db.inventory_store import present_gpus

    want = text.strip().lower().removeprefix("gpu-")
    if len(want) < 8:
        raise InputError(f"GPU {text!r}: give NODE:MINOR (pal-n4:3) or a GPU UUID (at least its first 8 hex digits)")
    hits = [g for g in present_gpus(app.engine) if g.uuid and g.uuid.lower().removeprefix("gpu-").startswith(want)]
    if len(hits) != 1:
        raise InputError(f"GPU {text!r}: {'no GPU present in the database has that UUID' if not hits else 'ambiguous'}"
                         "; give NODE:MINOR (pal-n4:3)")
    if hits[0].minor is None or not hits[0].node:
        raise InputError(f"GPU {text!r}: the database knows no slot of it; give NODE:MINOR")
    return hits[0].node, int(hits[0].minor)


def _audit(app: AppContext, job_id: str, outcome: str, slot: Any, reason: str, user: str) -> None:
    """One row in the placements table, as the placer records its decisions (`pal placements`);
    where the database cannot take it, a warning: the holder's admin comment keeps the record."""
    from datetime import UTC, datetime

    from pal_slurm.placer.audit import Record, record_now

    rec = Record.gpu_action(job_id, outcome, gpu={"node": slot.node, "minor": slot.minor, "type": slot.gres_type},
                            reason=reason, at=datetime.now(UTC), user=user)
    try:
        record_now(app.engine, rec)
    except Exception as exc:  # noqa: BLE001 - any database error (PalError or a driver's): the action is done
        first = str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__
        click.echo(f"pal: warning: not recorded in the placements table ({first}); the holder job's admin "
                   "comment and this output are the record", err=True)
