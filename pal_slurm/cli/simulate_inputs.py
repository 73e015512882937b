"""What `pal simulate` simulates, from its options: the fleet (--variability, --cluster) and the
traces (--trace, --synthetic), and what draining leaves of the fleet (--drain-baseline). Bad
values are refused as the options' errors, before any run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from pal_slurm.cli.context import AppContext
from pal_slurm.cli.numbers import MAX_GPUS_PER_NODE
from pal_slurm.errors import InputError


#: the largest simulated cluster: 4x the 4,096 GPUs the 100,000-job speed target is set on
#: (bench/sim_speed.py); beyond it a run takes hours and most of its memory is the cluster
MAX_SIM_GPUS = 16384


def parse_cluster(value: str) -> tuple[int, int]:
    """--cluster NODESxGPUS as (nodes, GPUs per node), within the simulator's limits."""
    m = re.fullmatch(r"\s*(\d{1,9})\s*[xX]\s*(\d{1,9})\s*", value)
    if not m or int(m[1]) < 1 or int(m[2]) < 1:
        raise click.BadParameter(f"{value!r}: expected NODESxGPUS, e.g. 16x4", param_hint="--cluster")
    if int(m[2]) > MAX_GPUS_PER_NODE:
        raise click.BadParameter(f"{value!r}: {int(m[2])} GPUs per node; at most {MAX_GPUS_PER_NODE}",
                                 param_hint="--cluster")
    if int(m[1]) * int(m[2]) > MAX_SIM_GPUS:
        raise click.BadParameter(f"{value!r}: {int(m[1]) * int(m[2]):,} GPUs; the simulator takes at most "
                                 f"{MAX_SIM_GPUS:,} (docs/simulation.md)", param_hint="--cluster")
    return int(m[1]), int(m[2])


def _shape_text(cluster: Any) -> tuple[int, str]:
    """(nodes, "96 nodes x 4 GPUs") of a Cluster, or "90 nodes, 2-8 GPUs each" when they differ."""
    per_node: dict[int, int] = {}
    for g in cluster.gpus:
        per_node[g.node] = per_node.get(g.node, 0) + 1
    counts = sorted(set(per_node.values()))
    nodes = len(per_node)
    if len(counts) == 1:
        return nodes, f"{nodes} nodes x {counts[0]} GPUs"
    return nodes, f"{nodes} nodes, {counts[0]}-{counts[-1]} GPUs each"


def variability_source(app: AppContext, value: str, cluster_shape: str | None, version: int | None,
                       model: str | None, seed: int) -> tuple[Any, int, dict[str, Any]]:
    """(the variability model, its GPUs, what `pal simulate` says it simulated: the "cluster" of
    the JSON, with `text` the line the table prints)."""

    def shape(nodes: int, gpn: int, where: str) -> dict[str, Any]:
        given = "--cluster" if cluster_shape else "default --cluster"
        return {"nodes": nodes, "gpus_per_node": gpn, "gpus": nodes * gpn, "source": where,
                "text": f"{nodes} nodes x {gpn} GPUs = {nodes * gpn} GPUs ({given} {nodes}x{gpn}); {where}"}

    from pal_slurm.placement.variability import cluster_from_gpus
    from pal_slurm.simulate.runner import ArtifactVariability, FixedVariability

    if model is not None and (value == "db" or value.startswith("parametric:")):
        raise click.BadParameter(f"{model!r} applies to --variability DIR (the artifact's CSVs), not {value!r}",
                                 param_hint="--variability-model")
    if value.startswith("parametric:"):
        if version is not None:
            raise click.UsageError("--classification goes with --variability db")
        from pal_slurm.simulate.fleets import parametric_from_spec

        nodes, gpn = parse_cluster(cluster_shape or "16x4")
        try:
            return (parametric_from_spec(value.removeprefix("parametric:"), nodes, gpn, seed), nodes * gpn,
                    shape(nodes, gpn, f"variability {value}"))
        except InputError as exc:
            raise click.BadParameter(str(exc), param_hint="--variability") from None
    if value == "db":
        if cluster_shape is not None:
            raise click.UsageError("--cluster does not apply to --variability db: the database's GPUs are the cluster")
        from pal_slurm.db.engine import session_scope
        from pal_slurm.db.migrate import require_current
        from pal_slurm.db.variability_store import load_variability

        require_current(app.engine)
        with session_scope(app.engine) as session:
            stored = load_variability(session, sorted(app.cfg.job_classes), version, at_slots_only=True)
        cluster = cluster_from_gpus(stored.gpus)
        nodes, text = _shape_text(cluster)
        where = (f"the database's GPUs at a slot, classification version {stored.version}"
                 + (f" ({stored.without_slot} GPU identities without a slot left out)" if stored.without_slot
                    else ""))
        return FixedVariability(cluster), cluster.size, {
            "nodes": nodes, "gpus_per_node": None if "," in text else cluster.size // max(nodes, 1),
            "gpus": cluster.size, "source": "db", "classification_version": stored.version,
            "identities_without_slot": stored.without_slot, "text": f"{text} = {cluster.size} GPUs; {where}"}
    if version is not None:
        raise click.UsageError("--classification goes with --variability db")
    from pal_slurm.simulate.artifact_draw import load_artifact_profiles

    nodes, gpn = parse_cluster(cluster_shape or "16x4")
    profiles = load_artifact_profiles(Path(value))
    if model == "per-gpu":
        from pal_slurm.simulate.fleets import PerGpuVariability

        return (PerGpuVariability(profiles, nodes, gpn), nodes * gpn,
                shape(nodes, gpn, f"each GPU one measured GPU of {value} (per-gpu)"))
    return (ArtifactVariability(profiles, nodes, gpn), nodes * gpn,
            shape(nodes, gpn, f"each GPU a run drawn from {value} (per-run)"))


def drain_check(source: Any, loaded: list[Any], seed: int, threshold: float) -> dict[str, Any]:
    """What the drain leaves of the run's fleet (the runner re-draws the same one from the
    seed), refused before any run when a trace's job cannot run on it."""
    import random

    from pal_slurm.simulate.drain import check_drain_fits, drained

    left, names = drained(source.cluster(random.Random(seed)), threshold)
    try:
        for trace in loaded:
            check_drain_fits(trace, left, names)
    except InputError as exc:
        raise click.BadParameter(str(exc), param_hint="--drain-baseline") from None
    return {"threshold": threshold, "drained_nodes": names, "gpus_left": left.size}


@dataclass(frozen=True)
class SyntheticSpec:
    """What --synthetic asks for: `jobs` of the `workload` mix; the llm mix also needs the
    cluster's shape and its offered `load`."""

    jobs: int
    workload: str = "philly"
    nodes: int = 0
    gpus_per_node: int = 0
    load: float | None = None


def synthetic_spec(jobs: int | None, workload: str | None, load: float | None,
                   cluster: dict[str, Any]) -> SyntheticSpec | None:
    """--synthetic, --workload and --load together, refused where they do not fit each other or
    the cluster (the llm mix sizes its jobs in whole nodes, so it needs one node shape)."""
    if not jobs:
        if workload is not None or load is not None:
            raise click.UsageError("--workload and --load describe the --synthetic trace; give --synthetic N")
        return None
    workload = workload or "philly"
    if workload != "llm":
        if load is not None:
            raise click.UsageError("--load applies to --workload llm (the philly mix keeps its traces' arrival rate)")
        return SyntheticSpec(jobs)
    if not cluster.get("gpus_per_node"):
        raise click.UsageError("--workload llm sizes jobs in whole nodes and needs nodes of one size; the "
                               "database's nodes differ in GPUs (give --variability parametric:... --cluster NxG)")
    return SyntheticSpec(jobs, "llm", int(cluster["nodes"]), int(cluster["gpus_per_node"]), load)


def load_traces(paths: tuple[Path, ...], fmt: str, max_gpus: int, skip_invalid: bool,
                synthetic: SyntheticSpec | None, seed: int) -> list[Any]:
    from pal_slurm.simulate.trace_files import read_trace_file

    loaded = [read_trace_file(p, format=fmt, max_gpus=max_gpus, skip_invalid=skip_invalid) for p in paths]
    for path, trace in zip(paths, loaded):
        if not trace.jobs:  # a table of dashes (or of NaN) would look like a result
            raise InputError(_no_jobs(trace), source=str(path))
    if synthetic is not None and synthetic.workload == "llm":
        from pal_slurm.simulate.llm_workload import DEFAULT_LOAD, generate_llm

        loaded.append(generate_llm(synthetic.jobs, nodes=synthetic.nodes, gpus_per_node=synthetic.gpus_per_node,
                                   seed=seed, load=synthetic.load or DEFAULT_LOAD))
    elif synthetic is not None:
        from pal_slurm.simulate.synthetic import generate

        loaded.append(generate(synthetic.jobs, seed=seed, max_gpus=max_gpus))
    names = [t.name for t in loaded]
    if len(set(names)) != len(names):
        raise InputError(f"two traces have the same name: {', '.join(sorted(n for n in names if names.count(n) > 1))}")
    return loaded


def _no_jobs(trace: Any) -> str:
    """Why a trace gave nothing to simulate: only a header, or every row left out (and why)."""
    if not trace.skipped:
        return "no jobs to simulate (the file has a header and no job rows)"
    reasons: dict[str, int] = {}
    for _line, reason in trace.skipped:
        key = reason.split(" (")[0]
        reasons[key] = reasons.get(key, 0) + 1
    why = ", ".join(f"{n} {r}" for r, n in sorted(reasons.items(), key=lambda kv: -kv[1])[:4])
    return f"no jobs to simulate: all {len(trace.skipped)} rows were left out ({why})"
