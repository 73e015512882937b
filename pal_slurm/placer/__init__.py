"""The placement daemon: held GPU jobs in, per-GPU-slot GRES requests out (its cycle: cycle.py)."""
