"""The placement daemon (pal_slurm/placer) over a recording backend, without Slurm."""
