"""Replaying traces on a real Slurm cluster: plain Slurm against pal-slurm, measured and predicted."""
