"""The `pal` command line: commands parse input, call pal_slurm.services, and render."""
