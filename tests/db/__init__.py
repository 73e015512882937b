"""The database layer (pal_slurm/db): migrations, roles, TLS, the DDL in sql/."""
