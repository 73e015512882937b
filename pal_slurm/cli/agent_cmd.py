"""`pal agent`: the telemetry agent of a GPU node (run by systemd/pal-agent.service)."""

from __future__ import annotations

import dataclasses
import signal
import socket
import threading
from pathlib import Path
from types import FrameType

import click

from pal_slurm.cli.context import AppContext
from pal_slurm.cli.numbers import Real, Whole, seed
from pal_slurm.cli.render import emit_json, text_format_option


@click.command()
@click.option("--backend", type=click.Choice(["auto", "nvml", "sim"]), default=None,
              help="GPU backend [default: [agent] backend, auto = NVML; sim only when asked].")
@click.option("--force-sim", is_flag=True, help="Allow the simulated backend on a node that has NVIDIA GPUs.")
@click.option("--node", metavar="NAME", help="Node name in profiles and metrics [default: short host name; "
              "with --backend sim the simulated node].")
@click.option("--interval", type=Real(0.05, 60), help="Seconds between samples [default 1].")
@click.option("--jobmap-dir", metavar="DIR", help="Where pal-prolog.sh writes job mapping files (%n = node name) "
              "[default: /run/pal/jobs].")
@click.option("--metrics-port", type=Whole(0, 65535), help="Prometheus port, 0 = off [default 9477].")
@click.option("--once", is_flag=True, help="One cycle, write what is pending, exit (tests, checks).")
@click.option("--duration", type=Real(0, 366 * 86_400), metavar="S", help="Run S seconds, then exit.")
@click.option("--sim-seed", type=seed(), default=0, show_default=True, help="Simulated fleet seed.")
@click.option("--sim-nodes", type=Whole(1, 4096), default=16, show_default=True,
              help="Simulated fleet size (same defaults as `pal profile run --backend sim`).")
@click.option("--sim-gpus", type=Whole(1, 32), default=4, show_default=True,
              help="Simulated GPUs per node.")
@text_format_option
@click.pass_obj
def agent(app: AppContext, backend: str | None, force_sim: bool, node: str | None, interval: float | None,
          jobmap_dir: str | None, metrics_port: int | None, once: bool, duration: float | None, sim_seed: int,
          sim_nodes: int, sim_gpus: int, fmt: str) -> None:
    """Sample every GPU of this node (1 Hz by default), profile the Slurm jobs on them, flag GPUs that
    run below their class, and serve Prometheus metrics.

    Which job uses which GPU comes from the files spank_hooks/pal-prolog.sh and pal-epilog.sh write.
    Finished job profiles go to the database; while it is down they wait in a bounded queue. Under
    systemd (Type=notify) it reports READY, STATUS and WATCHDOG. See docs/agent.md.
    """
    from pal_slurm.agent.service import AgentService
    from pal_slurm.agent.simload import SimLoad
    from pal_slurm.gpu.choose import choose_backend, probe_nvidia
    from pal_slurm.systemd_notify import Notifier

    cfg = app.cfg
    settings = cfg.agent.model_copy(update={k: v for k, v in {
        "interval_s": interval, "jobmap_dir": jobmap_dir, "backend": backend}.items() if v is not None})
    choice = choose_backend(settings.backend, probe_nvidia(), force_sim=force_sim)
    sim_load = None
    if choice == "sim":
        from pal_slurm.gpu.simulated import SimBackend
        from pal_slurm.gpu.simulated_fleet import make_fleet

        fleet = make_fleet(nodes=sim_nodes, gpus_per_node=sim_gpus, seed=sim_seed)
        node = node or settings.node or fleet.nodes[0]
        sim_load = SimLoad()
        gpu_backend = SimBackend(fleet, (node,), load=sim_load)
    else:
        from pal_slurm.gpu.choose import open_backend

        node = node or settings.node or socket.gethostname().split(".")[0]
        gpu_backend = open_backend("nvml", node=node)
    stop = threading.Event()

    def _stop(signum: int, _frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, _stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        service = AgentService(settings, gpu_backend, node=node, db_url=cfg.db_url,
                               state_file=Path(settings.state_file) if settings.state_file else cfg.data_dir / "agent-state.json",
                               notifier=Notifier(), stop=stop, metrics_port=metrics_port,
                               on_jobs=sim_load.assign if sim_load else None,
                               connect_timeout_s=min(cfg.database.connect_timeout_s, 10))
        summary = service.run(once=once, duration_s=duration)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        gpu_backend.close()
    data = {"node": node, "backend": choice, **dataclasses.asdict(summary)}
    if fmt == "json":
        emit_json(data)
    else:
        click.echo(f"pal agent on {node}: {summary.cycles} cycles, {summary.samples} samples "
                   f"({summary.sample_errors} failed), {summary.profiles_queued} job profiles, "
                   f"{summary.pending} pending, {summary.dropped} dropped, {summary.db_errors} DB errors")
