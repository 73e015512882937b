"""cons_tres's node choice on a real slurmctld: where the simulator's model of plain Slurm
(`slurm-reserving`'s chooser, pal_slurm.placement.cons_tres_fit) and first fit name different
nodes, Slurm picks what the model names. `make test` runs this on both Slurm versions.

The free GPUs per node come from Slurm itself (each node's GresUsed) after a blocker job is
running, so the model is asked about the state Slurm actually saw.

From 26.05 a job that may use one node only (`-N1`, or `-n`; a bare `--gres` or `--gpus` job
still goes the older way, seen on 26.05.5) skips that evaluation: slurmctld takes the first node by
weight that can run it (select/cons_tres `_get_one_res`), which is first fit. Jobs on more nodes
keep the tightest-run rule there too."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from pal_slurm.placement.cons_tres_fit import tightest_fit_nodes
from pal_slurm.placement.first_fit import first_fit_nodes
from pal_slurm.slurm.cli_backend import CliBackend
from pal_slurm.slurm.tres import parse_gres_alloc
from tests.slurm.conftest import SlurmCluster
from tests.slurm.placer_rig import wait_idle

GPUS_PER_NODE = 4
#: the Slurm that takes a one-node job's first fitting node (see the module)
ONE_NODE_FIRST_FIT_SINCE = (26, 5)


def free_gpus(cluster: SlurmCluster) -> np.ndarray:
    """Free GPUs per node, in configuration order, as Slurm counts them (sinfo's GresUsed; a node
    listed once per partition)."""
    rows = cluster.run(["sinfo", "-N", "-h", "-O", "NodeList:60,GresUsed:400"]).stdout.splitlines()
    used = {name: sum(u.count for u in parse_gres_alloc(gres) if u.name == "gpu")
            for name, gres in (row.split(None, 1) for row in rows if row.strip())}
    return GPUS_PER_NODE - np.array([used[node] for node in cluster.nodes])


def node_names(cluster: SlurmCluster, expanded: str) -> list[str]:
    return sorted(cluster.run(["scontrol", "show", "hostnames", expanded]).stdout.split())


@pytest.fixture
def blocked_cluster(slurm_cluster: SlurmCluster) -> Iterator[tuple[SlurmCluster, list[str]]]:
    wait_idle(slurm_cluster)
    jobs: list[str] = []
    try:
        yield slurm_cluster, jobs
    finally:
        slurm_cluster.cancel(jobs)


@pytest.mark.parametrize(("blocker_gpus", "probe", "per_node", "nodes", "one_node"), [
    # pal-n2 keeps one GPU free: a one-GPU job goes to that, the tightest node, not to pal-n1
    # (from 26.05 a -N1 job goes to pal-n1, first fit; one without -N still to pal-n2)
    (3, ["-N1", "--gres=gpu:1"], 1, 1, True),
    (3, ["--gres=gpu:1"], 1, 1, False),
    # pal-n2 full: the usable runs are [n1] and [n3, n4]; two whole nodes take the run that
    # suffices (n3, n4), where first fit takes n1 and n3
    (4, ["-N2", "--gres=gpu:4"], 4, 2, False),
])
def test_slurm_picks_the_nodes_cons_tres_fit_names_where_first_fit_differs(
        blocked_cluster: tuple[SlurmCluster, list[str]], blocker_gpus: int, probe: list[str], per_node: int,
        nodes: int, one_node: bool) -> None:
    cluster, jobs = blocked_cluster
    jobs.append(cluster.submit(["-w", cluster.nodes[1], f"--gres=gpu:{blocker_gpus}", "--wrap", "sleep 300"]))
    cluster.wait_state(jobs[0], "RUNNING")
    counts = free_gpus(cluster)
    model = tightest_fit_nodes(counts, per_node, nodes)
    first = first_fit_nodes(counts, per_node, nodes)
    assert model is not None and first is not None
    assert model.tolist() != first.tolist(), f"the case must tell the two apart (free GPUs {counts.tolist()})"
    jobs.append(cluster.submit([*probe, "--wrap", "sleep 1"]))
    cluster.wait_state(jobs[1], {"RUNNING", "COMPLETED"})
    got = node_names(cluster, cluster.job(jobs[1])["NodeList"])
    want = first if one_node and CliBackend(timeout=30).version() >= ONE_NODE_FIRST_FIT_SINCE else model
    assert got == [cluster.nodes[int(v)] for v in want], \
        f"Slurm chose {got}; free GPUs per node {counts.tolist()}; model {model.tolist()}, first fit {first.tolist()}"
