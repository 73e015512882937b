"""Pure placement: cluster snapshots, job requests, queue orders and policies.

The simulator (pal_slurm.simulate) and the live placement daemon call the same code here;
nothing in this package does I/O, reads a clock or knows which of the two is calling.
"""
