"""Jobs (pal_slurm/jobs): fingerprints, rules, sensitivity, runtime history, user classes."""
