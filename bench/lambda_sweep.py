#!/usr/bin/env python3
"""Locality-penalty sweep: how every policy degrades as crossing nodes gets costlier, in both
simulation modes, and whether our policies still beat pal on average JCT without a worse makespan.

Six Sia-Philly traces, 16 x 4 GPUs, Longhorn profiles (PAL artifact, hal-uw/blox-pal, MIT), FIFO.
Usage: bench/lambda_sweep.py [--lambdas 1.0,1.7,2.0,2.5,3.0] [--modes round,event] [--plot FILE]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--artifact", type=Path,
                    default=Path(os.environ.get("PAL_ARTIFACT_DIR", REPO / "tests/data/pal-artifact")))
    ap.add_argument("--lambdas", default="1.0,1.7,2.0,2.5,3.0")
    ap.add_argument("--modes", default="round,event")
    ap.add_argument("--plot", type=Path, help="write avg-JCT-ratio vs lambda per policy (.png)")
    args = ap.parse_args()
    if not (args.artifact / "traces").is_dir():
        print(f"lambda_sweep: no artifact data at {args.artifact}", file=sys.stderr)
        return 2

    from pal_slurm.placement.policies import policy_names
    from pal_slurm.simulate.metrics import geomean
    from pal_slurm.simulate.runner import ArtifactVariability, SimulationSpec, run_simulations
    from pal_slurm.simulate.traces import read_trace_file
    from pal_slurm.simulate.artifact_draw import load_artifact_profiles

    traces = tuple(read_trace_file(args.artifact / "traces/sia-philly" / f"workload-{i}.csv", max_gpus=64)
                   for i in range(1, 7))
    var = ArtifactVariability(load_artifact_profiles(args.artifact / "variability/longhorn"), 16, 4)
    names = policy_names()
    own = [p for p in names if p.startswith("pal-")]
    curves: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for mode in args.modes.split(","):
        print(f"\n== {mode} mode: per policy, geomean over 6 traces of (avg JCT / packed-sticky's) and of avg JCT in hours")
        print(f"{'lambda':>6s} " + " ".join(f"{p:>16s}" for p in names) + "   ours vs pal: JCT ratio, makespan ratio")
        for lam in (float(x) for x in args.lambdas.split(",")):
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
            for p in own:
                jct = geomean([res[(t.name, p)].avg_jct_s / res[(t.name, "pal")].avg_jct_s for t in traces])
                worst_mk = max(res[(t.name, p)].makespan_s / res[(t.name, "pal")].makespan_s for t in traces)
                vs.append(f"{p} {jct:.3f}, worst trace {worst_mk:.3f}")
            print(f"{lam:6.2f} " + " ".join(cells) + "   " + "; ".join(vs) + f"   ({time.perf_counter() - t0:.0f} s)")
    if args.plot:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        modes = args.modes.split(",")
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
        fig.savefig(args.plot)
        print(f"plot written to {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
