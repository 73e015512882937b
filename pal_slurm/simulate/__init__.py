"""The trace simulator and its inputs.

- `pal_slurm.simulate.traces`: job traces (Sia-Philly CSVs, ``sacct -P`` exports) parsed
  into frozen `TraceJob`s, plus the artifact's model -> class and iteration-time tables.
- `pal_slurm.simulate.synthetic`: Philly-like synthetic traces, deterministic per seed.
- `pal_slurm.simulate.artifact_draw`: per-GPU PerfVar and slowdown factors per job class
  drawn exactly as the PAL artifact draws them. The variability model itself (and the
  clusters built from real GPUs) is pal_slurm.placement.variability, shared with the
  placement daemon; pal_slurm.db.variability_store loads it from a classification.

Input modules are pure (text or parameters in, frozen dataclasses out); only the
``read_*``/``load_*`` conveniences open files. Nothing is imported here, so importing the
package costs nothing.
"""
