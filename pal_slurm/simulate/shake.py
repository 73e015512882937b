"""Input shaking: a trace's arrivals moved by a few minutes, from a recorded seed (pure).

Why: a scheduler is chaotic. Moving every arrival of a Sia-Philly trace by at most one
trace minute changes plain Slurm's own average JCT on one trace by -25 % to +43 %
(measured with `bench/vs_slurm.py --shake`), so a single run per policy cannot tell a
policy's effect from the trace's luck. Tsafrir, Ouaknine and Feitelson ("Reducing
performance evaluation sensitivity and variability by input shaking", MASCOTS 2007)
recommend running each configuration on several slightly perturbed copies of the input
and comparing means: this is that perturbation, reproducible from its seed.
"""

from __future__ import annotations

import random
from dataclasses import replace

from pal_slurm.simulate.traces import Trace

#: how far an arrival may move, in trace seconds (+-): a few minutes, far below the
#: inter-arrival times that shape the load, far above the scheduler's event granularity
SHAKE_S = 300.0


def shaken(trace: Trace, seed: int, amplitude_s: float = SHAKE_S) -> Trace:
    """`trace` with every submit time moved by U[-amplitude_s, +amplitude_s] (never below 0),
    drawn from `seed` in job order; seed 0 returns the trace itself (the unshaken run)."""
    if amplitude_s < 0:
        raise ValueError(f"a shaking amplitude must be >= 0 seconds, got {amplitude_s!r}")
    if seed == 0 or amplitude_s == 0:
        return trace
    rng = random.Random(f"shake:{seed}")
    jobs = tuple(replace(j, submit_time=max(0.0, j.submit_time + rng.uniform(-amplitude_s, amplitude_s)))
                 for j in trace.jobs)
    return replace(trace, jobs=jobs, name=trace.name)
