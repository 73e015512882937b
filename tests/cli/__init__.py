"""The `pal` command line (pal_slurm/cli) and its configuration (pal_slurm/config)."""
