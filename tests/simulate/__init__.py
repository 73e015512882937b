"""The simulators (pal_slurm/simulate): inputs, fleets, the tax, estimates, the CLI's plot and progress."""
