"""`pal gpus learn`: each GPU's passive speed from the ledger's finished jobs, and the fail-slow flags."""

from __future__ import annotations

import click

from pal_slurm.cli.context import AppContext
from pal_slurm.cli.numbers import Real
from pal_slurm.cli.render import Column, emit_json, emit_rows, prose, text_format_option
from pal_slurm.errors import PalError
from pal_slurm.numfmt import fmt_num


@click.command("learn")
@click.option("--apply", "apply", is_flag=True,
              help="Store the estimates (replacing the last ones) and open a fail-slow flag for each GPU newly "
                   "caught [default: only print what was found].")
@click.option("--days", type=Real(0.001, 3650), metavar="N",
              help="Finished jobs of the last N days count [default: [classification] passive_window_days].")
@text_format_option
@click.pass_obj
def learn_cmd(app: AppContext, apply: bool, days: float | None, fmt: str) -> None:
    """Learn each GPU's slowdown per job class from the run times of recurring jobs in the placer's
    ledger (jobs of one fingerprint run on different GPUs), and flag the GPUs whose jobs run slower
    than their benchmark factor says, for long enough (fail-slow: re-profile them).

    A multi-GPU job runs at the pace of its slowest GPU: its run time is evidence about the GPU
    estimated slowest, an upper bound for the others (docs/classification.md, "Passive speed").
    A dry run unless --apply; `pal gpus --passive` shows what is stored. Run it from a timer
    (systemd/pal-gpus-learn.timer). [classification] passive = off turns it off."""
    from pal_slurm.services.passive import learn

    if app.cfg.classification.passive == "off":
        raise PalError("passive speed is off ([classification] passive = \"off\"): nothing learned")
    out = learn(app.engine, app.cfg, days=days, apply=apply)
    skipped = {**dict(out.result.skipped), **dict(out.unusable)}
    flags = [{"gpu": f.gpu, "node": out.gpus.get(f.gpu, ("", None))[0], "slot": out.gpus.get(f.gpu, ("", None))[1],
              "class": f.job_class, "at": f.at, "cusum": f.cusum, "jobs": len(f.jobs),
              "passive_factor": f.passive_factor, "benchmark_factor": f.benchmark_factor,
              "opened": any(o.gpu == f.gpu for o in out.opened)} for f in out.flags]
    if fmt == "json":
        emit_json({"applied": out.applied, "runs": out.runs, "skipped": skipped, "estimates": len(out.result.estimates),
                   "stored": out.stored, "bounded_only": len(out.result.bounds), "fail_slow": flags,
                   "cleared": [{"gpu": u, "kind": k} for u, k in out.cleared], "notes": list(out.notes)})
        return
    gpus = {e.gpu for e in out.result.estimates}
    prose(f"{out.runs} finished job(s) read; {len(out.result.estimates)} estimate(s) of {len(gpus)} GPU(s); "
          f"{len(out.result.bounds)} GPU x class only bounded (never clearly set a job's pace)")
    for reason, n in sorted(skipped.items()):
        if n:
            prose(f"  not used: {n} job(s): {reason}")
    for note in out.notes:
        prose(f"pal: note: {note}")
    if flags:
        emit_rows(flags, [Column("node", lambda r: r["node"]), Column("slot", lambda r: r["slot"], "right"),
                          Column("class", lambda r: r["class"]),
                          Column("passive", lambda r: fmt_num(r["passive_factor"]), "right"),
                          Column("benchmark", lambda r: fmt_num(r["benchmark_factor"]), "right"),
                          Column("jobs", lambda r: r["jobs"], "right"),
                          Column("flag", lambda r: "opened" if r["opened"] else
                                 ("would open" if not out.applied else "already open"))],
                  fmt, title="Fail-slow: jobs ran slower than the benchmark factor says (re-profile these)")
    else:
        prose("no GPU caught fail-slow")
    for uuid, kind in out.cleared:
        prose(f"cleared the {kind.replace('_', '-')} flag of {uuid}: profiled again since it was raised")
    if out.applied:
        prose(f"stored {out.stored} estimate(s); `pal gpus --passive` shows them")
    else:
        click.echo("dry run: nothing stored; add --apply to store the estimates and open the flags", err=True)
