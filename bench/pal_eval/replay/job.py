"""The program every replayed job runs inside Slurm (the batch script's body).

It learns which GPUs Slurm gave it from Slurm itself (its own entry in ``squeue --json``:
node list and per-node GRES detail; the slot type ``<model>_g<minor>`` names each GPU's
device minor), looks their raw PerfVar for its class up in the factors file the replay
wrote from the classification the cluster was configured from, and sleeps for

    work x the largest PerfVar over its GPUs x locality penalty (when it spans nodes)

-- the same runtime model as the simulator (pal_slurm.placement.cost.runtime_s). It
writes one JSON record (start, end, GPUs, factor, and Slurm's own StartTime, whole seconds
taken at allocation: how far it lies before the script's start is what the simulator's
``start_lead_s`` models) to the record directory; a job that
cannot find its GPUs or factors writes the reason and exits 1, so the replay reports it
instead of inventing a runtime.

The factors file is read once, when the script starts: a file replaced meanwhile (whole, by a
rename: harness.write_factors) reaches the jobs that start after it (bench/slow_slot.py slows one
slot so). Arguments: factors file, record directory, trace id, class, work (real seconds),
penalty; or, for a command line every run of one job shares (harness.sbatch_argv's
`same_command`), factors file, record directory, class, penalty, with the trace id and the work
in the environment (RUN_ENV).

Kept light (no numpy, no database): it starts once per job on a busy machine.
"""

from __future__ import annotations

import time

T0 = time.time()  # before the imports: the job's work starts when Slurm starts the script

import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

from pal_slurm.slurm.command import run_command  # noqa: E402
from pal_slurm.slurm.gresconf import slot_of_type  # noqa: E402
from pal_slurm.slurm.parse_json import jobs_from_doc, load  # noqa: E402
from pal_slurm.slurm.tres import parse_gres_alloc  # noqa: E402


def my_gpus(job_id: str, tries: int = 5) -> tuple[list[tuple[str, int]], float | None]:
    """(node, device minor) of every GPU this job holds, from Slurm's own view of it, and
    the job's StartTime as Slurm reports it (None if it reports none)."""
    from ClusterShell.NodeSet import NodeSet

    last = "not in squeue"
    for attempt in range(tries):
        out = run_command(["squeue", "--json", f"--jobs={job_id}"], timeout=60, check=False)
        if out.returncode == 0:
            for job in jobs_from_doc(load(out.stdout, "squeue --json")):
                if job.job_id != job_id:
                    continue
                held = [(node, minor)
                        for node, detail in zip(NodeSet(job.nodes), job.gres_detail)
                        for use in parse_gres_alloc(detail)
                        if use.name == "gpu" and use.count > 0 and (minor := slot_of_type(use.type)) is not None]
                if held:
                    return held, job.start_time
                last = f"no per-slot GPU in its GRES detail {job.gres_detail!r}"
        else:
            last = f"squeue failed: {out.stderr.strip()[:200]}"
        time.sleep(0.2 * (attempt + 1))
    raise RuntimeError(f"job {job_id}: cannot tell its GPUs ({last})")


#: where a run's own values are when its command line is every run's (harness.sbatch_argv's
#: `same_command`): its trace id and its work (real seconds)
RUN_ENV = ("PAL_REPLAY_TRACE_ID", "PAL_REPLAY_WORK_S")


def run(argv: list[str]) -> int:
    if len(argv) == 4:  # factors, records, class, penalty; the run's own values in its environment
        argv = [argv[0], argv[1], os.environ.get(RUN_ENV[0], ""), argv[2], os.environ.get(RUN_ENV[1], ""), argv[3]]
    factors_file, record_dir, trace_id, job_class, work_s, penalty = argv
    job_id = os.environ.get("SLURM_JOB_ID", "")
    record = {"job": job_id, "trace_id": trace_id, "start": T0, "host": os.environ.get("SLURMD_NODENAME", "")}
    out = Path(record_dir) / f"{trace_id}.json"
    try:
        factors = json.loads(Path(factors_file).read_text(encoding="utf-8"))
        gpus, slurm_start = my_gpus(job_id)
        if slurm_start is not None:
            record["slurm_start"] = slurm_start
        pvs = [factors[node][str(minor)][job_class] for node, minor in gpus]
        nodes = sorted({n for n, _ in gpus})
        factor = max(pvs) * (float(penalty) if len(nodes) > 1 else 1.0)
        sleep_s = float(work_s) * factor
        record.update(gpus=[[n, m] for n, m in gpus], factor=factor, pace=max(pvs), sleep_s=sleep_s)
        time.sleep(max(0.0, T0 + sleep_s - time.time()))
        record["end"] = time.time()
        rc = 0
    except Exception as exc:  # noqa: BLE001 - whatever it is, the replay must hear of it
        record.update(error=f"{type(exc).__name__}: {exc}", end=time.time())
        rc = 1
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(record), encoding="utf-8")
    tmp.replace(out)
    return rc


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
