"""Locality-penalty sweep: every policy as crossing nodes gets costlier (bench/lambda_sweep.py)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from pal_eval.paths import longhorn, sia_philly

#: (mode, policy) -> [(lambda, geomean avg JCT in hours)]
Curves = dict[tuple[str, str], list[tuple[float, float]]]


def run(artifact: Path, lambdas: list[float], modes: list[str], plot: Path | None) -> int:
    if not (artifact / "traces").is_dir():
        print(f"lambda_sweep: no artifact data at {artifact}", file=sys.stderr)
        return 2
    from pal_slurm.placement.policies import policy_names
    from pal_slurm.simulate.artifact_draw import load_artifact_profiles
    from pal_slurm.simulate.runner import ArtifactVariability
    from pal_slurm.simulate.trace_files import read_trace_file

    traces = tuple(read_trace_file(sia_philly(artifact, i), max_gpus=64) for i in range(1, 7))
    var = ArtifactVariability(load_artifact_profiles(longhorn(artifact)), 16, 4)
    names = policy_names()
    curves: Curves = {}
    for mode in modes:
        print(f"\n== {mode} mode: per policy, geomean over 6 traces of (avg JCT / packed-sticky's) and of avg JCT in hours")
        print(f"{'lambda':>6s} " + " ".join(f"{p:>16s}" for p in names) + "   ours vs pal: JCT ratio, makespan ratio")
        for lam in lambdas:
            sweep_point(traces, var, names, mode, lam, curves)
    if plot:
        write_plot(plot, modes, names, curves)
        print(f"plot written to {plot}")
    return 0


def sweep_point(traces: tuple[Any, ...], var: Any, names: tuple[str, ...], mode: str, lam: float,
                curves: Curves) -> None:
    """One row: every policy at one lambda (its ratio and hours), and our policies against pal."""
    from pal_slurm.simulate.metrics import geomean
    from pal_slurm.simulate.runner import SimulationSpec, run_simulations

    t0 = time.perf_counter()
    spec = SimulationSpec(traces=traces, policies=names, variability=var, mode=mode,  # type: ignore[arg-type]
                          order="fifo", locality_penalty=lam, seed=42, baseline="packed-sticky")
    rep = run_simulations(spec)
    res = {(r.trace, r.policy): r.metrics for r in rep.results}
    cells = []
    for p in names:
        ratio = rep.summary[p]["avg_jct_ratio"]
        hours = geomean([res[(t.name, p)].avg_jct_s / 3600 for t in traces])
        curves.setdefault((mode, p), []).append((lam, hours))
        cells.append(f"{ratio:7.3f} {hours:7.1f}h")
    vs = []
    for p in (p for p in names if p.startswith("pal-")):
        jct = geomean([res[(t.name, p)].avg_jct_s / res[(t.name, "pal")].avg_jct_s for t in traces])
        worst_mk = max(res[(t.name, p)].makespan_s / res[(t.name, "pal")].makespan_s for t in traces)
        vs.append(f"{p} {jct:.3f}, worst trace {worst_mk:.3f}")
    print(f"{lam:6.2f} " + " ".join(cells) + "   " + "; ".join(vs) + f"   ({time.perf_counter() - t0:.0f} s)")


def write_plot(path: Path, modes: list[str], names: tuple[str, ...], curves: Curves) -> None:
    """Avg JCT against lambda per policy, one panel per mode (.png)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(5.5 * len(modes), 4), dpi=100)
    FigureCanvasAgg(fig)
    for k, mode in enumerate(modes):
        ax = fig.add_subplot(1, len(modes), k + 1)
        for p in names:
            pts = curves[(mode, p)]
            ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", label=p)
        ax.set_title(f"{mode} mode")
        ax.set_xlabel("locality penalty lambda")
        ax.set_ylabel("avg JCT, hours (geomean over 6 traces)")
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
    fig.axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
