"""The GPU interface the node profiler and the agent share: `interface` (the `GpuBackend`
protocol, its records and typed errors), `nvml` (real GPUs through NVML), `simulated` (a
seeded simulated fleet for machines without GPUs) and `choose` (which backend a node uses).
"""
