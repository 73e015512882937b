"""Importing profiles (pal_slurm/ingest): the parsers, one row per physical GPU, the artifact end to end."""
