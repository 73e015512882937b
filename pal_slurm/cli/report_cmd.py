"""`pal report` and `pal gpus`: what operators read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from pal_slurm.classification.actions import short_uuid
from pal_slurm.cli.context import AppContext
from pal_slurm.cli.numbers import Since, cutoff, ident
from pal_slurm.cli.filters import expand_hostlist, model_option, node_option, select
from pal_slurm.cli.render import Column, emit_json, emit_rows, format_option, prose, wide_option
from pal_slurm.errors import InputError
from pal_slurm.numfmt import fmt_num


def _bins_text(row: dict[str, Any]) -> str:
    """The report's bins cell (pal_slurm.report.data says how; imported here, when a table is drawn,
    because the report module reads the database's records: `pal report --help` stays light)."""
    from pal_slurm.report.data import bins_text as text

    return text(row)


def _regular_bins_text(row: dict[str, Any]) -> str | None:
    from pal_slurm.report.data import regular_bins

    return _bins_text(row) if regular_bins(row) else None


def _pv(key: str):  # type: ignore[no-untyped-def]
    return lambda r: None if r["perfvar"] is None else fmt_num(r["perfvar"][key])


def _pv_range(low: str, high: str):  # type: ignore[no-untyped-def]
    """One cell such as 0.946-1.122: a range that fits 80 columns whole."""
    return lambda r: None if r["perfvar"] is None else f"{fmt_num(r['perfvar'][low])}-{fmt_num(r['perfvar'][high])}"


def _perfvar_columns(wide: bool) -> list[Column]:
    """The PerfVar spread. --wide: min, p5, median, p95, max apart; otherwise the range (min-max)
    and the p5-p95 spread as one cell each, which fit 80 columns, and the median (always near 1)
    goes first when the terminal is narrow."""
    if wide:
        return [Column(f"PerfVar {k}", _pv(k), "right") for k in ("min", "p5", "median", "p95", "max")]
    return [Column("PerfVar\nmin-max", _pv_range("min", "max"), "right"),
            Column("PerfVar\np5-p95", _pv_range("p5", "p95"), "right"),
            Column("PerfVar\nmedian", _pv("median"), "right", optional=True)]


def benchmark_columns(wide: bool) -> list[Column]:
    """Per model x benchmark; the model is in the title (one table per model) unless --wide."""
    return [
        *([Column("model", lambda r: r["model"])] if wide else []),
        Column("benchmark", lambda r: r["benchmark"]),
        Column("GPUs", lambda r: r["gpus"], "right"),
        Column("unprofiled", lambda r: r["unprofiled"], "right", optional=not wide),
        *_perfvar_columns(wide),
        Column("bins: slowdown\nfactor x GPUs", _bins_text, wrap=True),
        Column("outliers", lambda r: len(r["outliers"]), "right"),
    ]


def class_columns(wide: bool) -> list[Column]:
    return [Column("class", lambda r: r["job_class"]), *benchmark_columns(wide)]


#: Under the report's tables: which scale each number is on.
REPORT_LEGEND = ("PerfVar: measured, a GPU's median time over its model's median GPU's (> 1 = slower), spread over "
                 "the GPUs. Bins: slowdown factor x GPUs, the factor placement ranks by (1.000 = the bin of the "
                 "model's median GPU). `pal gpus --explain GPU` shows one GPU on both scales.")


CSV_COLUMNS = [Column("job_class", lambda r: r.get("job_class")), Column("model", lambda r: r["model"]),
               Column("benchmark", lambda r: r["benchmark"]), Column("GPUs", lambda r: r["gpus"]),
               Column("unprofiled", lambda r: r["unprofiled"]),
               *[Column(h, lambda r, k=k: None if r["perfvar"] is None else r["perfvar"][k])
                 for h, k in (("PerfVar min", "min"), ("PerfVar p5", "p5"), ("PerfVar median", "median"),
                              ("PerfVar p95", "p95"), ("PerfVar max", "max"))],
               Column("bins (slowdown factor x GPUs)", _regular_bins_text),  # empty, as every missing cell
               Column("outliers", lambda r: " ".join(r["outliers"]))]


def short_ids(uuids: Any) -> dict[str, str]:
    """uuid -> the short form tables show (first 8 hex digits of an NVML UUID); a GPU whose
    short form another GPU shares keeps its full UUID, so a short id always names one GPU."""
    uuids = sorted(set(uuids))
    short = {u: short_uuid(u) for u in uuids}
    seen: dict[str, int] = {}
    for s in short.values():
        seen[s] = seen.get(s, 0) + 1
    return {u: (s if seen[s] == 1 else u) for u, s in short.items()}


def _slow_on(a: dict[str, Any], perfvars: dict[tuple[str, str], float | None]) -> str:
    return ", ".join(f"{b} {fmt_num(perfvars.get((a['uuid'], b)))}" for b in a["benchmarks"])


def action_columns(wide: bool, ids: dict[str, str], perfvars: dict[tuple[str, str], float | None]) -> list[Column]:
    """One row per outlier GPU: where it is, what is slow (PerfVar per benchmark), what to do and why."""
    return [
        Column("node", lambda r: r["node"] or "unknown", wrap=False),
        Column("GPU", (lambda r: r["uuid"]) if wide else (lambda r: ids.get(r["uuid"], r["uuid"])), wrap=False),
        *([Column("model", lambda r: r["model"])] if wide else []),
        Column("PerfVar", lambda r: _slow_on(r, perfvars), wrap=True),
        Column("action", lambda r: r["action"]),
        Column("reason", lambda r: r["reason"], wrap=True),
    ]


def _perfvars(data: dict[str, Any]) -> dict[tuple[str, str], float | None]:
    return {(o["uuid"], item["benchmark"]): o["perfvar"]
            for item in data["benchmarks"] for o in item["outlier_details"]}


@click.group(invoke_without_command=True)
@format_option
@click.option("--html", "html_path", type=click.Path(path_type=Path, dir_okay=False), metavar="FILE",
              help="Also write a self-contained HTML page with plots to FILE.")
@click.option("--version", "version", type=ident(), metavar="N", help="Classification version [default: latest].")
@wide_option
@click.pass_context
def report(ctx: click.Context, fmt: str, html_path: Path | None, version: int | None, wide: bool) -> None:
    """Variability per GPU model x benchmark and per job class: PerfVar spread, bins with
    slowdown factors, and outliers with what to do about them (docs/admin-guide.md explains
    each action). JSON shape: docs/report-json.md.

    `pal report fairness` shows who got which GPUs and how long pal-slurm held their jobs."""
    if ctx.invoked_subcommand is not None:
        return
    app = ctx.find_object(AppContext)
    assert app is not None
    from pal_slurm.report.service import load_for_html, load_report

    if html_path is not None:
        from pal_slurm.report.page import write_html

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
    show_report(data, wide=wide)


def show_report(data: dict[str, Any], *, wide: bool = False) -> None:
    """The report as tables for people (also used by `pal demo`): one story with the JSON and
    the HTML -- the same regular bins, the same outlier counts, numbers rounded once (fmt_num)."""
    from pal_slurm.report.data import identity_text

    version = data["classification"]["version"]
    if data.get("identity"):
        prose("GPUs in the database: " + identity_text(data["identity"]))
    models = sorted({i["model"] for i in data["benchmarks"]}) if not wide else [None]
    for model in models:
        items = [i for i in data["benchmarks"] if model is None or i["model"] == model]
        classes = [i for i in data["job_classes"] if model is None or i["model"] == model]
        where = "" if model is None else f"{model}, "
        emit_rows(items, benchmark_columns(wide), "table", wide=wide,
                  title=f"GPU variability per benchmark ({where}classification version {version})")
        emit_rows(classes, class_columns(wide), "table", wide=wide,
                  title=f"Per job class ({where}the bins placement uses)")
    prose(REPORT_LEGEND)
    actions = data.get("actions", [])
    if actions:
        ids = short_ids(a["uuid"] for a in actions)
        emit_rows(actions, action_columns(wide, ids, _perfvars(data)), "table", wide=wide,
                  title="Outlier GPUs: what to do (docs/admin-guide.md, \"Outliers\")")
    else:
        prose("no outliers")


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
@wide_option
@click.pass_context
def gpus(ctx: click.Context, fmt: str, models: tuple[str, ...], nodes: tuple[str, ...], version: int | None,
         only_actions: bool, all_identities: bool, explain: str | None, wide: bool) -> None:
    """One row per GPU at a slot (the fleet Slurm schedules), each node's GPUs in slot order: node,
    slot (the device minor its GRES type names), GPU, slowdown factor per job class (sf; ! =
    outlier), the outlier's action, last profiled (--wide: full UUID, model, bins, PerfVars). `pal gpus drain` drains the nodes of severely slow or failing GPUs
    (a dry run unless --apply)."""
    if ctx.invoked_subcommand is not None:
        given = [f"--{n}" for n, v in (("model", models), ("node", nodes), ("version", version),
                                       ("actions", only_actions), ("all-identities", all_identities),
                                       ("explain", explain), ("wide", wide)) if v] + \
                (["--format"] if fmt != "table" else [])
        if given:  # `pal gpus --node X drain --apply` must not drain every node
            raise click.UsageError(f"{', '.join(given)} before `{ctx.invoked_subcommand}` would be ignored: "
                                   f"put the options after it (`pal gpus {ctx.invoked_subcommand} --help`)")
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
    cols = action_columns(wide or fmt == "csv", ids, _perfvars(data))
    if fmt == "table" and not actions:
        where = (f" on {', '.join(nodes)}" if nodes else "") + (f" of model {', '.join(models)}" if models else "")
        prose(f"no outlier GPUs{where}")
        return
    emit_rows(actions, cols, fmt, wide=wide, title="Outlier GPUs: what to do (docs/admin-guide.md, \"Outliers\")",
              legend="PerfVar: measured on that benchmark, the GPU's median time over its model's median GPU's.")


@gpus.command("drain")
@click.option("--apply", "apply", is_flag=True,
              help="Run scontrol (default: only print what would be done).")
@click.option("--node", "nodes", multiple=True, metavar="HOSTLIST",
              help="Only these nodes: a name or a Slurm hostlist (c006-[011-012]); repeatable.")
@click.option("--version", "version", type=ident(), metavar="N", help="Classification version [default: latest].")
@click.pass_obj
def drain_cmd(app: AppContext, apply: bool, nodes: tuple[str, ...], version: int | None) -> None:
    """Drain the nodes of the outlier GPUs graded `drain` (severely slow on a compute benchmark,
    or failing ECC/retired pages), with `scontrol update NodeName=N State=DRAIN Reason="pal: ..."`.

    A dry run unless --apply; one line per node. Only nodes Slurm lists by that exact name are
    drained (never `ALL` or a NodeSet); a node already drained or down keeps its state and its
    reason. Nodes of GPUs graded `placement` or `re-profile`, and unknown nodes, are never
    drained. Resume a node with `scontrol update NodeName=N State=RESUME` after its diagnostics pass."""
    from pal_slurm.classification.actions import drain_plan
    from pal_slurm.errors import PalError
    from pal_slurm.placer.writer import drain
    from pal_slurm.report.service import load_actions
    from pal_slurm.slurm.cli_backend import CliBackend

    actions = load_actions(app.engine, app.cfg, version)
    if nodes:  # a node the database does not know is a typo: say so before anything is drained
        from pal_slurm.report.service import fleet_names

        known, _models = fleet_names(app.engine)
        select([{"node": n} for n in known], nodes, ())
    nodes = tuple(dict.fromkeys(n for expr in nodes for n in expand_hostlist(expr)))
    full = drain_plan(actions)
    plan = [(n, reason) for n, reason in full if not nodes or n in nodes]
    for n in sorted(set(nodes) - {p[0] for p in full}):
        click.echo(f"{n}: no GPU there is graded `drain`; not drained")
    if not plan:
        click.echo("nothing to drain: no outlier GPU is graded `drain`" + (" on those nodes" if nodes else ""))
        return
    slurm = CliBackend(timeout=app.cfg.placer.command_timeout_s)
    try:  # Slurm's own node names: NodeName= also takes ALL, NodeSets and hostlists
        slurm_nodes = {n.name: n for n in slurm.nodes()}
    except PalError as exc:
        if apply:
            raise PalError(f"Slurm's node list not read ({exc}); nothing drained") from exc
        click.echo(f"pal: warning: Slurm's node list not read ({exc}); the plan is not checked against it",
                   err=True)
        slurm_nodes = None
    failed = 0
    for node_name, reason in plan:
        shown = f'scontrol update NodeName={node_name} State=DRAIN Reason="{reason}"'
        known = None if slurm_nodes is None else slurm_nodes.get(node_name)
        if slurm_nodes is not None and known is None:
            failed += 1
            click.echo(f"pal: error: {node_name}: not a node Slurm knows; not drained", err=True)
            continue
        if known is not None and known.drained_or_down:
            state = "+".join([known.state, *sorted(known.flags)])
            click.echo(f"{node_name}: already {state}; its state and reason are left as they are")
            continue
        if not apply:
            click.echo(f"would run: {shown}")
            continue
        try:
            drain(slurm, node_name, reason)
        except PalError as exc:
            failed += 1
            click.echo(f"pal: error: {node_name}: not drained: {exc}", err=True)
            continue
        click.echo(f"drained {node_name}: {reason}")
    if not apply:
        click.echo("dry run: nothing changed; add --apply to drain these nodes", err=True)
    if failed:
        raise PalError(f"{failed} of {len(plan)} node(s) not drained (see above)")


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
