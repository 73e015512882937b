"""The trace simulator and its inputs.

- `pal_slurm.simulate.traces`: job traces as frozen `TraceJob`s, Sia-Philly CSVs parsed
  into them, plus the artifact's model -> class and iteration-time tables;
  `sacct_trace` parses ``sacct -P`` exports, `trace_rows` holds what both parsers share,
  `trace_files.read_trace_file` opens a file of either format.
- `pal_slurm.simulate.synthetic`: Philly-like synthetic traces, deterministic per seed.
- `pal_slurm.simulate.artifact_draw`: per-GPU PerfVar and slowdown factors per job class
  drawn exactly as the PAL artifact draws them. The variability model itself (and the
  clusters built from real GPUs) is pal_slurm.placement.variability, shared with the
  placement daemon; pal_slurm.db.variability_store loads it from a classification.

Input modules are pure (text or parameters in, frozen dataclasses out); only the
``read_*``/``load_*`` conveniences open files. Nothing is imported here, so importing the
package costs nothing.
"""
