#!/usr/bin/env python3
"""Node agent overhead: CPU as % of one core and memory over a simulated hour, 8 GPUs x 1 Hz.

Targets (a node agent must not slow the jobs it watches), at 8 GPUs x 1 Hz over a simulated hour:
  - the agent's own code under 1 % of one core: the CPU of its calls in part 1 less the time
    inside the simulated backend's sample(), the stand-in for NVML (on a real node six NVML
    queries per GPU sample, not measured here; both are printed);
  - memory flat: RSS at the end of the hour at most 2 MiB above its start.
Exit status 1, with a "TARGET MISSED" line, when either is missed. Part 2's real-time figure
(the whole process, the NVML stand-in and the threads' wake-ups included) is printed beside
them, with no target.

Part 1, simulated hour: the agent's real code paths (mapping-directory scan, one sample per
GPU through the simulated GPU backend, per-job aggregates, drift checks, job profiles
queued and written to a SQLite database by the DB worker, a Prometheus scrape rendered
every 15 s) run 3,600 cycles against a simulated clock, so the hour takes well under a
minute. Jobs come and go on every GPU (5-30 min each, mapping files written as the
prolog and epilog would). CPU is this process's CPU time spent in those calls divided by
the 3,600 simulated seconds: what the agent would cost per second of real time. The time
inside the simulated backend's physics model (a stand-in for NVML) is shown apart.
RSS is printed at the start, middle and end of the hour.

Part 2, real time: `AgentService.run` for --real-seconds at 1 Hz with its DB thread and
the metrics HTTP server, CPU of the whole process over that wall time.

Usage: bench/agent_overhead.py [--gpus 8] [--hours 1] [--real-seconds 20] [--busy 1.0]
                               [--target-pct 1] [--max-rss-growth-mib 2]
"""

from __future__ import annotations

import argparse
import sys

from pal_eval.agent_overhead import MAX_RSS_GROWTH_MIB, TARGET_PCT, run


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--hours", type=float, default=1.0)
    ap.add_argument("--busy", type=float, default=1.0, help="chance a free GPU gets a new job each second")
    ap.add_argument("--real-seconds", type=float, default=20.0, help="0 skips the real-time run")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--target-pct", type=float, default=TARGET_PCT,
                    help=f"the target: the agent's own CPU, %% of one core [{TARGET_PCT:g}]")
    ap.add_argument("--max-rss-growth-mib", type=float, default=MAX_RSS_GROWTH_MIB,
                    help=f"the target: RSS growth over the simulated time, MiB [{MAX_RSS_GROWTH_MIB:g}]")
    args = ap.parse_args()
    if args.hours * 3600 < 2:
        ap.error("--hours must cover at least 2 simulated seconds")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
