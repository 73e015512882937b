"""Profiling (pal_slurm/profiler) and the GPU interface it measures through (pal_slurm/gpu)."""
