"""pal-slurm: variability-aware GPU placement for Slurm.

The package never does I/O at import time; configuration is loaded once by the
CLI entry point and passed down.
"""

__version__ = "0.1.0"
