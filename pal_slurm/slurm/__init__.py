"""The Slurm adapter: every conversation with Slurm goes through this package (see backend.py)."""
