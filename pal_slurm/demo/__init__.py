"""`pal demo`: pal-slurm shown to a newcomer, end to end, on parts that are all real code paths.

- `walkthrough`: `pal demo`: a simulated fleet is profiled, imported, classified and reported
  (terminal and HTML) into a fresh SQLite file;
- `on_slurm`: `pal demo --slurm`: the placement flow on the source checkout's real test cluster
  (filter, placer, sbatch, `pal explain`), with `slurm_cluster` (the cluster, through its script)
  and `slurm_jobs` (the jobs it submits, what they got); its classified test fleet,
  `cluster_gpus`, is also the real-cluster tests' (tests/slurm/placer_support.py), so the demo
  and the tests place on the same GPUs;
- `recovery`: how well a classification recovers a simulated fleet's true tiers (the demo's
  closing figure; the profiler's recovery test and bench use the same measure).
"""
