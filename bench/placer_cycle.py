#!/usr/bin/env python3
"""Time one placement-daemon cycle (`Placer.cycle()`) with 1,000 held jobs over 10,000 GPUs.

Target: our code's median cycle under 1 s, wall time (the placer's interval can be 1 s,
docs/admin-guide.md; docs/simulation.md states the figure): with 1,000 held and ~5,000 running
jobs on 10,000 GPUs, the running jobs with their expected ends (EndTime) and the held jobs with
time limits, so the policy weighs releases and waiting for better GPUs. Exit status 1, with a
"TARGET MISSED" line, when the median is over it (--target-s); 0 when it is met.

What runs: the real `pal_slurm.placer.cycle.Placer` with the configured policy (default: the
placer's default, pal-guard), the real filter-state writer, the real squeue/sinfo JSON parsers,
and a real SQLite database for the audit records and the job identities (wired as `pal placer`
wires them). Only slurmctld is replaced: `InMemorySlurm` (bench/pal_eval/fakes.py) implements the SlurmBackend
protocol over synthetic `squeue --json` / `sinfo --json` documents in the Slurm 22.05 shape
(built from tests/data/slurm/22.05), applies `scontrol update` / `release` to them, and
serialises them again when the daemon re-reads (so the verification step sees our updates).
It is a stand-in for slurmctld used ONLY to time our code: the time it spends (serialising
JSON, applying updates) is measured and shown apart as "slurmctld stand-in", and is not
part of the figure compared with the target.

What the figure leaves out: every Slurm command the placer issues. With the cli backend each
backend call is one process (squeue, sinfo, scontrol) and one slurmctld RPC, one after the
other: per cycle two full `squeue --json` reads (the cycle's, and the read-back of the jobs it
changed: 22.05's squeue --json lists every job), one `sinfo --json`, and per placed job five
`scontrol update`s on 22.05 (the tag recording the user's request, clearing the GPU request,
setting the placement, StartTime=now to release it, the final tag; four on 24.11, which
retypes in one update), besides holds moved on and jobs released unchanged. The stand-in counts each call the placer made in a cycle, by the command
the cli backend would run, and the summary prints them with a floor of their cost: the calls
times what starting one process costs on this machine (measured here, with nothing run in
it), before scontrol's own start-up and slurmctld's work. Slurm's real cost is measured on the
test cluster by bench/placer_latency.py.

The state: --nodes x --per-node GPUs (default 1,250 x 8 = 10,000) with per-slot GRES types
`h100_g<minor>`; --scenario burst (default, the worst case): per node 15 % idle, 35 % full,
the rest 1-7 GPUs busy, so most held jobs are placed in the cycle; steady: the cluster
full but for 3 % of the nodes with 1-3 GPUs free. The busy GPUs are held by running jobs
of 1-2 GPUs (about 4,800 of them in burst, 8,200 in steady; listed in squeue with their time
limit and EndTime, as on a real cluster); 20 jobs placed by an earlier cycle
have not started yet (their slots count as taken); --held pending jobs held through their
begin time (reason BeginTime, as job_submit.lua holds them) with `pal:held class=X` admin comments, classes A-D, 1-8 GPUs through tres_per_node (--gres /
--gpus-per-node) or tres_per_job (--gpus), ~2 % multi-node, ~1 % that the daemon releases
unchanged (per-task GPUs, named nodes); held jobs have time limits of 30 min to 1 day or
none. Factors: four levels per class, per (node, minor), each class its own level for a GPU,
slowdown = the level and PerfVar within 1 % of it (as classification makes them). Burst: the held jobs have just arrived, so their identities are new.

Each cycle starts from the same state (cycle 0 warms up and is not counted). Per cycle:
read/parse (parse_json of both squeue reads and the sinfo read), publish (filter state
file), identities (job identities to the database), view (cluster_view.build_view), plan
(shapes.plan_requests), place (policy.place), account (the per-job accounting ledger `pal placer`
always runs: following the jobs and what first fit would have given them; records kept in memory), apply (the rest: class lookup, decisions to
updates and admin comments, audit records, verification matching), audit (database flush).
Wall and CPU time (this thread's) are both shown: on a shared machine wall time includes
waiting for a core; the target is on wall time. Also printed: parse_json alone on the squeue
document.

Usage: bench/placer_cycle.py [--scenario burst|steady] [--nodes 1250] [--per-node 8] [--held 1000]
                             [--cycles 7] [--policy pal-guard] [--no-audit-db] [--profile] [--target-s 1]
"""

from __future__ import annotations

import argparse
import sys

from pal_eval.placer_cycle import TARGET_S, run
from pal_slurm.placement.model import DEFAULT_POLICY


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1250)
    ap.add_argument("--per-node", type=int, default=8)
    ap.add_argument("--held", type=int, default=1000)
    ap.add_argument("--cycles", type=int, default=7)
    ap.add_argument("--policy", default=DEFAULT_POLICY, help=f"the placer's policy [{DEFAULT_POLICY}, its default]")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--scenario", choices=("burst", "steady"), default="burst",
                    help="burst: ~4,000 GPUs free, most held jobs placed in the cycle (the worst case); "
                         "steady: the cluster full but for a few GPUs")
    ap.add_argument("--no-audit-db", action="store_true", help="no database: audit records stay in memory, identities are not recorded")
    ap.add_argument("--profile", action="store_true", help="cProfile one extra cycle and print the top functions")
    ap.add_argument("--target-s", type=float, default=TARGET_S,
                    help=f"the target: our code's median cycle, wall seconds [{TARGET_S:g}]")
    args = ap.parse_args()
    if args.cycles < 1:
        ap.error("--cycles must be at least 1")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
