"""Classification (pal_slurm/classification): bins, factors, their stability and storage, and recovery."""
