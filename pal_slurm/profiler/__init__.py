"""The node profiler: what runs on every GPU node to measure its GPUs.

* The GPU interface it measures through is `pal_slurm.gpu` (shared with the agent):
  NVML on real GPUs, a simulated fleet elsewhere, and the rule choosing between them.
* `inventory`: upserts a scan into the database (a GPU that vanished is marked missing).
* `benchmarks`, `executors`, `runner`: run the benchmark programs of the top-level
  `profiler/` directory, one subprocess per GPU with a hard timeout, or the simulated
  physics, and turn the results into pal-profile/1 records.
* `submit`: one exclusive, low-priority profiling job per node through sbatch.

See docs/profiler.md.
"""
