"""The placement daemon: held GPU jobs in, per-GPU-slot GRES requests out (see daemon.py)."""
