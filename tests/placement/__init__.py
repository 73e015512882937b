"""The placement policies (pal_slurm/placement), on hand-built and random clusters."""
