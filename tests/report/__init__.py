"""Reports (pal_slurm/report): actions, the HTML page, fairness."""
