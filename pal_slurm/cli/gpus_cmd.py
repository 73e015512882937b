"""`pal gpus`: one row per GPU Slurm schedules, its slowdown factors and its action; `--actions`
the outlier GPUs alone, `--explain GPU` one GPU on both scales, `--passive` the factors its jobs
give beside the benchmark's (its subcommands: `pal gpus drain`, `pal gpus learn`)."""

from __future__ import annotations

from typing import Any

import click

from pal_slurm.cli.context import AppContext
from pal_slurm.cli.filters import model_option, node_option, select
from pal_slurm.cli.numbers import ident
from pal_slurm.cli.outlier_columns import action_columns, outlier_perfvars, short_ids
from pal_slurm.cli.render import Column, emit_json, emit_rows, format_option, prose, wide_option
from pal_slurm.errors import InputError
from pal_slurm.numfmt import fmt_num


def _gpu_columns(rows: list[dict[str, Any]], wide: bool) -> list[Column]:
    classes = sorted({c for r in rows for c in r["classes"]})
    ids = short_ids(r["uuid"] for r in rows)
    columns = [Column("node", lambda r: r["node"] or "unknown", wrap=False)]
    if wide:
        columns += [Column("uuid", lambda r: r["uuid"], wrap=False), Column("slot", lambda r: r.get("slot"), "right"),
                    Column("model", lambda r: r["model"])]
        for c in classes:
            columns.append(Column(f"{c} bin", lambda r, c=c: r["classes"][c]["bin"], "right"))
            columns.append(Column(f"{c} slowdown factor", lambda r, c=c: r["classes"][c]["slowdown"], "right"))
            columns.append(Column(f"{c} PerfVar", lambda r, c=c: r["classes"][c].get("perfvar"), "right"))
        columns += [Column("outlier", lambda r: "yes" if r["outlier"] else ""),
                    Column("action", lambda r: r.get("action") or ""),
                    Column("last profiled", lambda r: r["last_profiled"])]
        return columns
    columns.append(Column("slot", lambda r: r.get("slot"), "right"))
    # node and slot name the GPU as Slurm does: on a narrow terminal its short id goes first
    columns.append(Column("GPU", lambda r: ids[r["uuid"]], wrap=False, optional=True))
    if len({r["model"] for r in rows}) > 1:
        columns.append(Column("model", lambda r: r["model"]))

    def slowdown(r: dict[str, Any], c: str) -> str | None:
        entry = r["classes"][c]
        if entry["slowdown"] is None:
            return None
        return fmt_num(entry["slowdown"]) + ("!" if entry["outlier"] else "")

    columns += [Column(f"sf {c}", lambda r, c=c: slowdown(r, c), "right") for c in classes]
    columns += [Column("action", lambda r: r.get("action") or ""),
                Column("profiled", lambda r: (r["last_profiled"] or "")[:10] or None, optional=True)]
    return columns


#: Under `pal gpus`: what `sf`, `!` and `-` mean, and where the other scale is.
GPUS_LEGEND = ("sf X: slowdown factor for job class X, the value placement ranks by (1.000 = the typical GPU, "
               "> 1 slower); ! = outlier, in a bin of its own; - = not profiled. Not a PerfVar (the measurement "
               "`pal report` lists): `pal gpus --explain GPU` shows both and the rule between them.")


def _in_slot_order(row: dict[str, Any]) -> tuple[Any, ...]:
    """Nodes as Slurm counts them (n2 before n10), each node's GPUs by the slot Slurm schedules
    (the device minor of its GRES type), never by UUID."""
    from pal_slurm.slurm.gresconf import natural_key

    slot = row.get("slot")
    return (row.get("node") is None, natural_key(row.get("node") or ""), slot is None, slot or 0, row["uuid"])


def holds_slot(row: dict[str, Any]) -> bool:
    """A GPU Slurm schedules: on a known node, at a known slot."""
    return bool(row.get("node")) and row.get("slot") is not None


@click.group(invoke_without_command=True)
@format_option
@model_option
@node_option
@click.option("--version", "version", type=ident(), metavar="N", help="Classification version [default: latest].")
@click.option("--actions", "only_actions", is_flag=True,
              help="Only the outlier GPUs, each with its action (placement, re-profile, drain) and reason.")
@click.option("--all-identities", is_flag=True,
              help="Also list, apart, the GPU identities that hold no slot (runs of a UUID whose node or slot no "
                   "file gave): measured, but not a GPU Slurm schedules [default: only GPUs at a slot].")
@click.option("--explain", "explain", metavar="GPU",
              help="One GPU on both scales: PerfVar and slowdown factor per benchmark, and the rule between "
                   "them (GPU: its UUID, the short id tables show, or NODE:SLOT).")
@click.option("--passive", "passive", is_flag=True,
              help="Beside each benchmark factor, the passive one its finished jobs' run times give (`pal gpus "
                   "learn`): factor [95 % interval] and the jobs it paced; > or < where it is slower or faster "
                   "than the benchmark beyond both uncertainties; and the GPU's open flags (fail-slow, clock drift).")
@wide_option
@click.pass_context
def gpus(ctx: click.Context, fmt: str, models: tuple[str, ...], nodes: tuple[str, ...], version: int | None,
         only_actions: bool, all_identities: bool, explain: str | None, passive: bool, wide: bool) -> None:
    """One row per GPU at a slot (the fleet Slurm schedules), each node's GPUs in slot order: node,
    slot (the device minor its GRES type names), GPU, slowdown factor per job class (sf; ! =
    outlier), the outlier's action, last profiled (--wide: full UUID, model, bins, PerfVars). `pal gpus drain` drains the nodes of severely slow or failing GPUs
    (a dry run unless --apply); `pal gpus learn` learns each GPU's speed from its finished jobs
    (--passive shows it)."""
    if ctx.invoked_subcommand is not None:
        _nothing_before(ctx.invoked_subcommand, fmt, model=models, node=nodes, version=version, actions=only_actions,
                        all_identities=all_identities, explain=explain, passive=passive, wide=wide)
        return
    app = ctx.find_object(AppContext)
    assert app is not None
    if explain is not None:
        if only_actions or nodes or models or all_identities:
            raise click.UsageError("--explain GPU shows one GPU: it takes no --actions, --node, --model or "
                                   "--all-identities")
        _explain(app, explain, version, fmt)
        return
    if only_actions:
        _show_actions(app, models, nodes, fmt, version, wide)
        return
    from pal_slurm.report.service import load_gpu_rows

    every = load_gpu_rows(app.engine, version, app.cfg)
    slotted = [r for r in every if holds_slot(r)]
    if not slotted:  # nothing says where any GPU sits (UUID-only data): the identities are all there is
        if every and not all_identities:
            click.echo("pal: note: no GPU in the database holds a known slot: listing every GPU identity",
                       err=True)
        slotted, apart = every, []
    else:
        apart = [r for r in every if not holds_slot(r)]
    pool = slotted + apart if all_identities else slotted
    try:
        chosen = select(pool, nodes, models)
    except InputError as exc:
        if all_identities or not apart or not _quietly(select, apart, nodes, models):
            raise
        raise InputError(f"{exc}; only GPU identities that hold no slot match: --all-identities lists them") from None
    at_slot = {id(r) for r in slotted}
    rows = sorted((r for r in chosen if id(r) in at_slot), key=_in_slot_order)
    extra = sorted((r for r in chosen if id(r) not in at_slot), key=_in_slot_order)
    if passive:
        _show_passive(rows + extra, fmt, wide)
        return
    if fmt != "table":
        emit_rows(rows + extra, _gpu_columns(rows + extra, True), fmt)
        return
    emit_rows(rows, _gpu_columns(rows, wide), fmt, wide=wide,
              title=f"{len(rows)} GPUs at a slot: slowdown factor per job class", legend=GPUS_LEGEND)
    if extra:
        emit_rows(extra, _gpu_columns(extra, wide), fmt, wide=wide,
                  title=f"{len(extra)} GPU identities that hold no slot (a UUID measured without its node or "
                        "slot: one may be a GPU above, measured before its slot was known, or one since "
                        "replaced); not scheduled by Slurm as such")
    elif apart and not nodes and not models:
        prose(f"{len(apart)} GPU identities that hold no slot are not shown (--all-identities lists them)")


def _nothing_before(sub: str, fmt: str, **given: Any) -> None:
    """`pal gpus --node X drain --apply` must not drain every node: an option of `pal gpus` given
    before its subcommand is refused (UsageError), never ignored."""
    names = [f"--{n.replace('_', '-')}" for n, v in given.items() if v] + (["--format"] if fmt != "table" else [])
    if names:
        raise click.UsageError(f"{', '.join(names)} before `{sub}` would be ignored: "
                               f"put the options after it (`pal gpus {sub} --help`)")


def _quietly(fn: Any, *args: Any) -> Any:
    """fn(*args), or None when it raises InputError (and nothing on stderr either way)."""
    import contextlib
    import io

    with contextlib.redirect_stderr(io.StringIO()):
        try:
            return fn(*args)
        except InputError:
            return None


def _explain(app: AppContext, text: str, version: int | None, fmt: str) -> None:
    from pal_slurm.report.data import explain_gpu, resolve_gpu
    from pal_slurm.report.service import load_stored

    stored = load_stored(app.engine, version)
    data = explain_gpu(stored, resolve_gpu(stored, text))
    if fmt == "json":
        emit_json(data)
        return
    columns = [Column("benchmark", lambda r: r["benchmark"]),
               Column("classes", lambda r: " ".join(r["job_classes"]) or None),
               Column("runs", lambda r: r["runs"], "right"),
               Column("PerfVar", lambda r: r["perfvar"], "right"),
               Column("bin", lambda r: None if r["bin"] is None else
                      f"{r['bin']}{' (outlier)' if r['outlier'] else ''}"),
               Column("slowdown\nfactor", lambda r: None if r["slowdown"] is None else
                      fmt_num(r["slowdown"]) + ("!" if r["outlier"] else ""), "right"),
               Column("from PerfVar to slowdown factor", lambda r: r["rule"], wrap=True)]
    if fmt == "csv":  # plain values, one column each (no `!` on the factor)
        emit_rows(data["benchmarks"], [Column(k, lambda r, k=k: " ".join(r[k]) if k == "job_classes" else r[k])
                                       for k in ("benchmark", "job_classes", "runs", "perfvar", "bin",
                                                 "bin_slowdown", "slowdown", "outlier", "fast", "anchor", "rule")],
                  "csv")
        return
    where = data["node"] or "no known node"
    slot = f", slot {data['slot']}" if data["slot"] is not None else ", no known slot"
    prose(f"GPU {data['uuid']} ({data['model']}) on {where}{slot}; classification version "
          f"{data['classification_version']} (method {data['method']}); last profiled "
          f"{(data['last_profiled'] or '-')[:10]}")
    emit_rows(data["benchmarks"], columns, "table",
              legend=f"{data['scales']['perfvar']}. {data['scales']['slowdown'][0].upper()}"
                     f"{data['scales']['slowdown'][1:]}; the anchor is the centroid of that bin "
                     "(docs/classification.md, steps 5-6).")


def _show_actions(app: AppContext, models: tuple[str, ...], nodes: tuple[str, ...], fmt: str, version: int | None,
                  wide: bool) -> None:
    # the report's graded actions carry their GPU's model and node: one classification load
    from pal_slurm.report.service import fleet_names, load_report

    data = load_report(app.engine, app.cfg, version)
    known_nodes, known_models = fleet_names(app.engine) if nodes or models else ([], [])
    actions = select(data["actions"], nodes, models, known_nodes=known_nodes, known_models=known_models)
    if fmt == "json":
        emit_json(actions)
        return
    ids = short_ids(a["uuid"] for a in actions)
    cols = action_columns(wide or fmt == "csv", ids, outlier_perfvars(data))
    if fmt == "table" and not actions:
        where = (f" on {', '.join(nodes)}" if nodes else "") + (f" of model {', '.join(models)}" if models else "")
        prose(f"no outlier GPUs{where}")
        return
    emit_rows(actions, cols, fmt, wide=wide, title="Outlier GPUs: what to do (docs/admin-guide.md, \"Outliers\")",
              legend="PerfVar: measured on that benchmark, the GPU's median time over its model's median GPU's.")


#: Under `pal gpus --passive`.
PASSIVE_LEGEND = ("sf X: the benchmark's slowdown factor for class X; passive X: the factor its finished jobs' run "
                  "times give (`pal gpus learn`), [its 95 % interval], n = the jobs whose pace it set; > slower, "
                  "< faster than the benchmark beyond both uncertainties; - = no estimate (too few jobs it paced). "
                  "flags: open re-profiling requests (fail-slow: its jobs ran slower than its benchmark for long "
                  "enough; clock-drift: the node agent saw its clock under load below its profile).")


def _passive_cell(r: dict[str, Any], c: str) -> str | None:
    p = r.get("passive", {}).get(c)
    if p is None:
        return None
    mark = {"slower": " >", "faster": " <"}.get(p["disagrees"] or "", "")
    return f"{fmt_num(p['factor'])} [{fmt_num(p['low'])}-{fmt_num(p['high'])}] n={p['paced']}{mark}"


def _show_passive(rows: list[dict[str, Any]], fmt: str, wide: bool) -> None:
    """`pal gpus --passive`: benchmark and passive factor side by side, and the open flags."""
    if fmt == "json":
        emit_json([{k: r.get(k) for k in ("node", "slot", "uuid", "model")} |
                   {"slowdown": {c: v.get("slowdown") for c, v in r["classes"].items()},
                    "passive": r.get("passive", {}), "flags": r.get("flags", {})} for r in rows])
        return
    classes = sorted({c for r in rows for c in r["classes"]} | {c for r in rows for c in r.get("passive", {})})
    ids = short_ids(r["uuid"] for r in rows)
    columns = [Column("node", lambda r: r["node"] or "unknown", wrap=False),
               Column("slot", lambda r: r.get("slot"), "right"),
               Column("GPU", lambda r: r["uuid"] if wide or fmt == "csv" else ids[r["uuid"]], wrap=False)]
    for c in classes:
        columns.append(Column(f"sf {c}", lambda r, c=c: (r["classes"].get(c) or {}).get("slowdown"), "right"))
        if fmt == "csv":
            for k in ("factor", "low", "high", "paced", "jobs", "gpu_hours", "disagrees"):
                columns.append(Column(f"passive {c} {k}", lambda r, c=c, k=k: (r.get("passive", {}).get(c) or {}).get(k),
                                      "right"))
        else:
            columns.append(Column(f"passive {c}", lambda r, c=c: _passive_cell(r, c), "right"))
    columns.append(Column("flags", lambda r: " ".join(k.replace("_", "-") for k in r.get("flags", {})) or None))
    learned = [p["computed_at"] for r in rows for p in r.get("passive", {}).values()]
    emit_rows(rows, columns, fmt, wide=wide, legend=PASSIVE_LEGEND,
              title=f"{len(rows)} GPUs: benchmark and passive slowdown factors" +
                    (f" (learned {max(learned)[:16]})" if learned else " (nothing learned yet: run `pal gpus learn`)"))
