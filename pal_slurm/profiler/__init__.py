"""The node profiler: what runs on every GPU node to measure its GPUs.

* `gpu`: the one GPU interface (inventory, telemetry, processes) and its typed errors;
  `nvml_backend` (real GPUs through nvidia-ml-py) and `sim_backend` (a node's slice of a
  seeded simulated fleet, `pal_slurm.simfleet`) implement it.
* `select`: which backend to use; the simulated one is never chosen on a node with GPUs.
* `inventory`: upserts a scan into the database (a GPU that vanished is marked missing).
* `benchmarks`, `executors`, `runner`: run the benchmark programs of the top-level
  `profiler/` directory, one subprocess per GPU with a hard timeout, or the simulated
  physics, and turn the results into pal-profile/1 records.
* `submit`: one exclusive, low-priority profiling job per node through sbatch.

See docs/profiler.md.
"""
