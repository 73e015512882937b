"""`pal profile submit --gpus` for a GPU out of service: the profiling job runs in the GPU's own
slot, handed over by its holder job so that no other job gets the slot meanwhile
(pal_slurm/placer/writer.py, `profile_in_slot`; docs/admin-guide.md, "One GPU out of service")."""

from __future__ import annotations

import time

import click

from pal_slurm.cli.context import AppContext
from pal_slurm.cli.reprofile import ReprofilePlan, Target
from pal_slurm.errors import SlurmError
from pal_slurm.profiler.submit import SLOT_JOB_NAME, SubmitOptions, SubmitResult, slot_sbatch_argv
from pal_slurm.slurm.quarantine import QuarantineSlurm, SlurmState
from pal_slurm.slurm.quarantine_model import (
    JOB_ID_PLACEHOLDER,
    Holder,
    Refused,
    holder_partition,
    release_argv,
    shown,
    submit_argv,
    tag_argv,
)

#: how long the command gives the profiling job to take the slot before it reports what Slurm shows
START_WAIT_S = 15.0


def say_skipped(plan: ReprofilePlan) -> None:
    """The targets that get no job now, and why (stderr)."""
    for t, h in plan.waiting:
        click.echo(f"pal: note: {h.slot.name}: not profiled now: it is going out of service (holder job {h.job_id} "
                   "waits for the job(s) on it); submit again once it holds the slot", err=True)
    for t, h in plan.blocked:
        click.echo(f"pal: note: {t.node}:{'?' if t.minor is None else t.minor}: not profiled now: {h.slot.name} on the "
                   f"same node is out of service (holder job {h.job_id}), so no exclusive job can start on {t.node}; "
                   f"release it first, or profile {h.slot.name} in its slot (`pal profile submit --gpus "
                   f"{h.slot.name}`)", err=True)


def submit_in_slots(app: AppContext, slurm: QuarantineSlurm, state: SlurmState, plan: ReprofilePlan,
                    opts: SubmitOptions, *, dry_run: bool, by: str) -> list[SubmitResult]:
    """One profiling job per GPU out of service, each in its slot (the module doc); its result."""
    return [_one(app, slurm, state, t, h, opts, dry_run=dry_run, by=by) for t, h in plan.in_slot]


def _one(app: AppContext, slurm: QuarantineSlurm, state: SlurmState, t: Target, h: Holder, opts: SubmitOptions, *,
         dry_run: bool, by: str) -> SubmitResult:
    from pal_slurm.cli.quarantine_cmd import _audit
    from pal_slurm.placer.writer import profile_in_slot

    slot = h.slot
    earlier = [j.job_id for j in state.jobs if j.name == SLOT_JOB_NAME and (j.pending or j.running)
               and f"slot={slot.name} " in f"{j.comment} "]
    if earlier:  # one submitted before (a run cut short after its first step): not a second one
        return SubmitResult(slot.node, 1, [], slot=slot.name,
                            error=f"{slot.name}: not profiled again: profiling job(s) {', '.join(earlier)} for it "
                                  "already in Slurm (`scancel` them to submit anew)")
    try:
        partition = holder_partition(state.partitions, slot.node)
    except Refused as exc:
        return SubmitResult(slot.node, 1, [], error=f"{slot.name}: not profiled: {exc}", slot=slot.name)
    argv = slot_sbatch_argv(slot.node, slot.minor, slot.gres_type, partition, opts)
    if dry_run:
        for cmd in (argv, submit_argv(slot, partition, h.tag), tag_argv(JOB_ID_PLACEHOLDER, h.tag),
                    release_argv(h.job_id)):
            click.echo(f"would run: {shown(cmd)}", err=True)
        return SubmitResult(slot.node, 1, argv, slot=slot.name)
    try:
        job, holder = profile_in_slot(slurm, h, partition, argv)
    except SlurmError as exc:
        return SubmitResult(slot.node, 1, argv, error=f"{slot.name}: not profiled: {exc}", slot=slot.name)
    _audit(app, holder, "quarantined", slot, f"holder job {h.job_id} handed the slot to profiling job {job}; "
           f"out of service since the quarantine ({h.tag.reason or 'no reason given'})", by)
    return _started(slurm, SubmitResult(slot.node, 1, argv, job_id=job, slot=slot.name), holder)


def _started(slurm: QuarantineSlurm, res: SubmitResult, holder: str) -> SubmitResult:
    """`res` once its job took the slot. When it has not started within START_WAIT_S (it asks for
    more than the node has free: memory, CPUs), or the new holder took the slot first, the
    profiling job is cancelled, so that nothing stands between the new holder and the slot, and
    `res` says why: the GPU stays out of service, not profiled."""
    deadline = time.monotonic() + START_WAIT_S
    while True:
        jobs = {j.job_id: j for j in slurm.backend.jobs(only=[res.job_id or "", holder])}
        mine, kept = jobs.get(res.job_id or ""), jobs.get(holder)
        if mine is None or not mine.pending:
            return res  # running, or already done (a short profile)
        first = kept is not None and kept.running
        if first or time.monotonic() >= deadline:
            why = (f"the new holder {holder} took the slot first" if first else
                   f"the profiling job did not start within {START_WAIT_S:g} s")
            why += f" ({mine.state_reason})"
            try:
                slurm.cancel(res.job_id or "")
            except SlurmError as exc:
                why += f", and it could not be cancelled ({exc}): cancel it by hand (scancel {res.job_id})"
            else:
                why += "; it is cancelled"
            return SubmitResult(res.node, res.gpus, res.argv, job_id=res.job_id, slot=res.slot,
                                error=f"{why}: the GPU stays out of service, not profiled")
        time.sleep(0.5)


def reprofile_jobs(app: AppContext, opts: SubmitOptions, spec: str, asked: tuple[str, ...] | None, dry_run: bool
               ) -> tuple[tuple[str, ...], list[SubmitResult]] | None:
    """`--gpus SPEC`: the nodes to profile whole, and the profiling jobs of the GPUs out of service,
    submitted in their slots (pal_slurm/cli/slot_profile.py); None when no GPU is named or flagged."""
    from pal_slurm.cli.quarantine_cmd import _by, _slurm
    from pal_slurm.cli.reprofile import plan_reprofile, reprofile_targets

    targets = reprofile_targets(app.engine, spec, asked)
    if not targets:
        click.echo("no GPU has an open flag" + (" on those nodes" if asked else "") + ": nothing to re-profile"
                   if spec.strip().lower() == "flagged" else "none of those GPUs is on a known node: nothing to "
                   "re-profile")
        return None
    slurm = _slurm(app)
    try:
        state = slurm.read()
    except SlurmError as exc:
        if not dry_run:
            raise SlurmError(f"not submitted: Slurm not read, so the GPUs out of service are unknown ({exc})") from exc
        click.echo(f"pal: warning: Slurm not read ({exc}): not checked for GPUs out of service (`pal gpus "
                   "quarantine`); each node is shown profiled whole", err=True)
        return tuple(dict.fromkeys(t.node for t in targets)), []
    plan = plan_reprofile(targets, state.holders)
    say_skipped(plan)
    return plan.nodes, submit_in_slots(app, slurm, state, plan, opts, dry_run=dry_run, by=_by())


__all__ = ["reprofile_jobs", "say_skipped", "submit_in_slots"]
