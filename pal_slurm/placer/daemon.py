"""`pal placer`'s process: the Placer's home and the process settings of the daemon.

The Placer and its cycle live in placer/cycle.py (the stages, top to bottom); what it
writes to Slurm in placer/writer.py, its fail-open paths in placer/failopen.py and its
placement problem in placer/problem.py. The names here are the ones the service, the CLI,
the tests and the benchmarks import.
"""

from __future__ import annotations

from pal_slurm.placer.cycle import Placer
from pal_slurm.placer.cycle_report import CycleReport


def tune_gc() -> None:
    """Collector settings for the daemon process (`pal placer` calls this once at start).

    Each cycle builds and drops a large graph of short-lived objects (megabytes of squeue
    JSON as dicts, thousands of job records) that holds no reference cycles; with the default
    gen-0 threshold (700 allocations) the collector walks it again and again, which took a
    third of a 1,000-job cycle (bench/placer_cycle.py). Freezing what start-up loaded and
    collecting gen 0 every 200,000 net allocations keeps memory bounded and the cycle short.
    """
    import gc

    gc.freeze()
    gc.set_threshold(200_000, 50, 100)


__all__ = ["CycleReport", "Placer", "tune_gc"]
