"""The evaluation harness (bench/, bench/pal_eval): exit status, node choice, the real-Slurm replay's
pure side."""
