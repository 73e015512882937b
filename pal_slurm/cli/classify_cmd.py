"""`pal classify`: compute a new versioned classification from all stored runs."""

from __future__ import annotations

import click

from pal_slurm.cli.context import AppContext
from pal_slurm.cli.numbers import Real, Whole
from pal_slurm.cli.render import Column, emit_rows, format_option


@click.command()
@click.option("--hysteresis", type=Real(0, 1), metavar="H",
              help="Keep a GPU in its previous bin unless its PerfVar leaves that bin by more than H "
                   "(e.g. 0.01); default from the config (0 = off).")
@click.option("--min-runs", type=Whole(1, 100_000), help="Runs a GPU needs to be classified for a benchmark.")
@click.option("--model", "models", multiple=True, metavar="NAME", help="Only this GPU model (repeatable).")
@click.option("--method", type=click.Choice(["shrink", "bic", "pal-k2"]),
              help="How PerfVars become factors (default from the config: shrink); see docs/classification.md.")
@click.option("--note", default="", help="Free text stored with the run.")
@click.option("--allow-partial", is_flag=True,
              help="Store the classification even when a job class gets no GPU (its benchmark unmeasured): "
                   "the placer then treats that class's GPUs as unknown. Without it such a run is refused.")
@format_option
@click.pass_obj
def classify(app: AppContext, hysteresis: float | None, min_runs: int | None, models: tuple[str, ...],
             method: str | None, note: str, allow_partial: bool, fmt: str) -> None:
    """Bin every GPU per model and benchmark (PerfVar, slow and fast outliers, optimal 1-D k-means;
    K by BIC, split down to measurement noise) and store the result as a new classification version.

    Each job class is placed by its benchmark's factors ([job_classes]; by default what `pal profile
    run` measures: A train-resnet50, B and C train-bert, D stream). A run in which a class would get
    no GPU is refused, naming the class, what was measured and the fix (--allow-partial: stored anyway);
    the output lists each class with the GPUs it can be placed by."""
    from pal_slurm.services.classification import run_classification

    summary = run_classification(app.engine, app.cfg, hysteresis=hysteresis, min_runs=min_runs,
                                 models=list(models) or None, note=note, method=method,
                                 allow_partial=allow_partial)
    columns = [
        Column("model", lambda r: r["model"]), Column("benchmark", lambda r: r["benchmark"]),
        Column("GPUs", lambda r: r["gpus"], "right"), Column("unprofiled", lambda r: r["unprofiled"], "right"),
        Column("K", lambda r: r["k"], "right"), Column("bins", lambda r: r["bins"], "right"),
        Column("outliers", lambda r: r["outliers"], "right"),
    ]
    coverage = [c.as_dict() for c in summary.coverage]
    emit_rows(summary.groups, columns, fmt, title=f"classification version {summary.version}",
              json_data={"version": summary.version, "previous_version": summary.previous_version,
                         "groups": summary.groups, "job_classes": coverage, "partial": summary.partial},
              legend=None if fmt != "table" else "job classes: " + "; ".join(
                  f"{c.job_class} {c.benchmark} {c.classified}/{c.gpus} GPUs" for c in summary.coverage))
    for c in summary.coverage:
        if c.classified < c.gpus:
            what = "no GPU: placed by nothing" if c.classified == 0 else \
                f"{c.gpus - c.classified} of {c.gpus} GPUs unknown to it"
            click.echo(f"pal: warning: job class {c.job_class} ({c.benchmark}): {what}"
                       + (" (stored anyway: --allow-partial)" if c.classified == 0 else ""), err=True)
