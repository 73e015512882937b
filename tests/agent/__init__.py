"""The agent (pal_slurm/agent): its cycle, the job map, its pure parts."""
