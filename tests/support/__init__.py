"""What the tests share besides conftest.py's fixtures: the fakes that stand in for Slurm, NVML and
the faults a placer must survive, and the builders of jobs, nodes, clusters and placers that tests
of several modules use. One copy each, imported from here (the benchmarks' own stand-ins, which
some tests use too, stay in bench/pal_eval/fakes.py)."""
