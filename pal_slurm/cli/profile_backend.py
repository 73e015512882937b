"""The options that choose the GPUs `pal profile inventory` and `pal profile run` read (NVML or a
seeded simulated fleet), and the profiler's request they make: one set of options for both."""

from __future__ import annotations

from typing import Any

import click

from pal_slurm.cli.numbers import MAX_NODES, Real, Whole, seed


BACKEND_HELP = ("auto: NVML when this node has NVIDIA GPUs, else stop and say so; nvml: real GPUs; "
                "sim: a seeded simulated fleet (refused on a node with GPUs unless --force-sim).")


def backend_options(fn: Any) -> Any:
    """--backend and the simulated fleet's options, shared by inventory and run."""
    options = [
        click.option("--backend", type=click.Choice(["auto", "nvml", "sim"]), default="auto", show_default=True,
                     help=BACKEND_HELP),
        click.option("--force-sim", is_flag=True, help="Allow --backend sim on a node that has NVIDIA GPUs."),
        click.option("--node", "node", metavar="NAME",
                     help="This node's name in the database [default: $SLURMD_NODENAME or the host name]."),
        click.option("--sim-nodes", type=Whole(1, MAX_NODES), default=16, show_default=True,
                     help="Simulated fleet: nodes."),
        click.option("--sim-gpus-per-node", type=Whole(1, 32), default=4, show_default=True,
                     help="Simulated fleet: GPUs per node."),
        click.option("--sim-seed", type=seed(), default=0, show_default=True, help="Simulated fleet: seed."),
        click.option("--sim-model", type=click.Choice(["V100", "H100"]), default="V100", show_default=True,
                     help="Simulated fleet: GPU model."),
        click.option("--sim-bad-fraction", type=Real(0, 1), default=0.03, show_default=True,
                     help="Simulated fleet: share of defective GPUs (derated power, failed cooler, HW slowdown)."),
        click.option("--sim-node", "sim_only", metavar="NAME[,NAME...]",
                     help="Simulate only these nodes of the fleet (gpu001, ...) [default: all]."),
        click.option("--sim-this-node", "sim_this_node", is_flag=True,
                     help="Simulate only this node (--node, else $SLURMD_NODENAME or the host name): "
                          "--sim-gpus-per-node GPUs at its slots, seeded by --sim-seed and its name, so each "
                          "node of a cluster profiled by `pal profile submit` reports GPUs of its own "
                          "(--sim-nodes and --sim-node do not apply)."),
        click.option("--sim-busy", metavar="IDX[,IDX...]", help="Simulate another process on these GPUs."),
        click.option("--sim-lost", metavar="IDX[,IDX...]", help="Simulate these GPUs fallen off the bus."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def backend_request(kw: dict[str, Any]) -> Any:
    from pal_slurm.gpu.choose import SimOptions, parse_indices, parse_names
    from pal_slurm.profiler.service import BackendRequest

    from pal_slurm.profiler.service import node_name

    node = kw.pop("node")
    if node is not None:  # it is stored, and `pal slurm gres-conf` writes it into Slurm's configuration
        from pal_slurm.slurm.gresconf import name_problem

        if (problem := name_problem(node, "node")) is not None:
            raise click.BadParameter(problem, param_hint="--node")
    this_node = kw.pop("sim_this_node")
    only = parse_names(kw.pop("sim_only"))
    if this_node and only:
        raise click.UsageError("--sim-this-node simulates this node alone: --sim-node does not apply")
    sim = SimOptions(nodes=kw.pop("sim_nodes"), gpus_per_node=kw.pop("sim_gpus_per_node"), seed=kw.pop("sim_seed"),
                     model=kw.pop("sim_model"), bad_fraction=kw.pop("sim_bad_fraction"), only_nodes=only,
                     busy=parse_indices(kw.pop("sim_busy"), "--sim-busy") or (),
                     lost=parse_indices(kw.pop("sim_lost"), "--sim-lost") or (),
                     as_node=(node or node_name()) if this_node else None)
    return BackendRequest(backend=kw.pop("backend"), force_sim=kw.pop("force_sim"), sim=sim, node=node)
