"""The Slurm adapter (pal_slurm/slurm) without a cluster: parsers on captured output, gres.conf, the
filter state and job_submit.lua (the tests of a real cluster are in tests/slurm)."""
