"""`pal agent` as a service: the timed loop around `Agent.cycle`, systemd, metrics, DB thread, state file.

Startup: inventory the GPUs, reload the state file (pending writes and running jobs'
aggregates saved at the last stop), start the database thread and the metrics endpoint,
tell systemd READY=1. Then one cycle per interval, on a fixed schedule (a late cycle
skips ticks instead of bunching them), WATCHDOG=1 at half the WatchdogSec. On stop
(SIGTERM, --duration, --once): STOPPING=1, a last attempt to write what is pending, and
the state file for the next start, so a restart loses no finished job and no running
job's history.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pal_slurm import __version__
from pal_slurm.agent.aggregate import JobAggregate, JobProfileRecord
from pal_slurm.agent.core import Agent
from pal_slurm.agent.dbworker import DbWorker
from pal_slurm.agent.drift import DriftMonitor, DriftSettings
from pal_slurm.agent.jobmap import JobMapDir, JobMapEntry, expand_dir
from pal_slurm.agent.metrics import AgentHealth, MetricsServer, render
from pal_slurm.agent.pending import Backoff, PendingQueue
from pal_slurm.agent.procmap import read_job_id
from pal_slurm.atomic_write import write_atomically
from pal_slurm.agent.job_profile_store import GpuFlagRecord, WriteItem
from pal_slurm.config import AgentConfig
from pal_slurm.errors import PalError
from pal_slurm.gpu.interface import GpuBackend
from pal_slurm.systemd_notify import Notifier

__all__ = ["AgentService", "RunSummary", "load_state", "save_state"]

log = logging.getLogger(__name__)

STATE_FORMAT = "pal-agent-state/1"
_STATUS_EVERY_S = 60.0


@dataclass(frozen=True)
class RunSummary:
    cycles: int
    samples: int
    sample_errors: int
    profiles_queued: int
    pending: int
    dropped: int
    db_errors: int
    metrics_port: int | None


def save_state(path: Path, pending: list[WriteItem], jobs: dict[str, JobAggregate]) -> None:
    """Atomically write what a restart needs (synced: a crash leaves the old state or the new)."""
    items = [{"kind": "profile", **i.to_dict()} if isinstance(i, JobProfileRecord) else {"kind": "flag", **i.to_dict()}
             for i in pending]
    data = {"format": STATE_FORMAT, "saved_at": time.time(), "pending": items,
            "jobs": {name: agg.to_dict() for name, agg in jobs.items()}}
    path.parent.mkdir(parents=True, exist_ok=True)
    # 0600: the pending job profiles name users and their commands
    write_atomically(path, json.dumps(data, separators=(",", ":")), mode=0o600)


def load_state(path: Path) -> tuple[list[WriteItem], dict[tuple[str, str, float], JobAggregate]]:
    """The saved pending writes and aggregates; an unreadable file is reported and ignored, then removed."""
    if not path.exists():
        return [], {}
    try:
        data = json.loads(path.read_text())
        if data.get("format") != STATE_FORMAT:
            raise ValueError(f"format {data.get('format')!r} is not {STATE_FORMAT}")
        pending: list[WriteItem] = []
        for item in data["pending"]:
            kind = item.pop("kind")
            pending.append(JobProfileRecord.from_dict(item) if kind == "profile" else GpuFlagRecord.from_dict(item))
        jobs = {}
        for name, raw in data["jobs"].items():
            agg = JobAggregate.from_dict(raw)
            jobs[(name, agg.job_id, agg.start)] = agg
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("ignoring the agent state file %s: %s", path, exc)
        pending, jobs = [], {}
    try:
        path.unlink()
    except OSError:
        pass
    if pending or jobs:
        log.info("restored %d pending writes and %d running jobs from %s", len(pending), len(jobs), path)
    return pending, jobs


class AgentService:
    """Wires the agent's parts together; `run()` blocks until `stop` is set or the run is over."""

    def __init__(self, settings: AgentConfig, backend: GpuBackend, *, node: str, db_url: str | None,
                 state_file: Path | None, notifier: Notifier | None = None, stop: threading.Event | None = None,
                 metrics_port: int | None = None, on_jobs: Callable[[dict[int, JobMapEntry]], None] | None = None,
                 clock: Callable[[], float] = time.time, connect_timeout_s: int = 5,
                 job_of_pid: Callable[[int], str | None] | None = read_job_id) -> None:
        self.settings = settings
        self.node = node
        self.notifier = notifier or Notifier(env={})
        self.stop = stop or threading.Event()
        self.state_file = state_file
        self.health = AgentHealth(backend=backend.name, version=__version__)
        self.queue: PendingQueue[WriteItem] = PendingQueue(settings.pending_max)
        pending, restored = load_state(state_file) if state_file else ([], {})
        self.queue.extend(pending)
        drift = DriftMonitor(DriftSettings(settings.drift_margin, settings.drift_minutes, settings.drift_load_pct))
        self.jobmap_dir = expand_dir(settings.jobmap_dir, node)
        self.agent = Agent(backend, node, JobMapDir(self.jobmap_dir), self.queue, self.health, drift,
                           gpu_id=settings.gpu_id, clock=clock, on_jobs=on_jobs, restored=restored,
                           job_of_pid=job_of_pid)
        self.worker = DbWorker(db_url, self.queue, self.health, uuids=self.agent.uuids, on_facts=self.agent.set_facts,
                               backoff=Backoff(settings.retry_min_s, settings.retry_max_s),
                               facts_refresh_s=settings.facts_refresh_s, connect_timeout_s=connect_timeout_s)
        self.metrics: MetricsServer | None = None
        self._port = settings.metrics_port if metrics_port is None else metrics_port  # 0: off

    def render_metrics(self) -> str:
        gauges = [self.agent.gauges[i] for i in sorted(self.agent.gauges)]
        return render(self.node, gauges, self.health, self.agent.facts)

    def start_metrics(self, port: int) -> int:
        """Serve /metrics on `port` (0: any free port, for tests); returns the port. run() calls this."""
        try:
            self.metrics = MetricsServer(self.settings.metrics_address, port, self.render_metrics).start()
        except OSError as exc:
            raise PalError(f"cannot serve metrics on {self.settings.metrics_address}:{port}: "
                           f"{exc.strerror or exc} (set [agent] metrics_port, or 0 to turn metrics off)") from exc
        log.info("metrics on http://%s:%d/metrics", self.settings.metrics_address, self.metrics.port)
        return self.metrics.port

    def run(self, *, once: bool = False, duration_s: float | None = None, serve_metrics: bool = True) -> RunSummary:
        if serve_metrics and self._port > 0 and self.metrics is None:
            self.start_metrics(self._port)
        worker_thread = None
        if not once:
            worker_thread = threading.Thread(target=self.worker.run, args=(self.stop,), name="pal-agent-db",
                                             daemon=True)
            worker_thread.start()
        gpus = len(self.agent.devices)
        self.notifier.ready(f"sampling {gpus} GPUs every {self.settings.interval_s:g} s")
        log.info("pal agent %s on %s: %d GPUs (%s backend), every %g s, job map %s", __version__, self.node, gpus,
                 self.health.backend, self.settings.interval_s, self.jobmap_dir)
        watchdog_every = self.notifier.watchdog_interval_s
        begin = last_watchdog = last_status = time.monotonic()
        next_tick = begin
        try:
            while not self.stop.is_set():
                self.agent.cycle()
                now = time.monotonic()
                if watchdog_every is not None and now - last_watchdog >= watchdog_every:
                    self.notifier.watchdog()
                    last_watchdog = now
                if now - last_status >= _STATUS_EVERY_S:
                    self.notifier.status(self.status_line())
                    last_status = now
                if once or (duration_s is not None and now - begin >= duration_s):
                    break
                next_tick += self.settings.interval_s
                if next_tick < now:  # overran: skip the missed ticks rather than bunch them
                    next_tick = now + self.settings.interval_s
                self.stop.wait(next_tick - now)
        finally:
            self._shutdown(worker_thread, once)
        h = self.health
        return RunSummary(h.cycles, h.samples, h.sample_errors, h.profiles_queued, len(self.queue), self.queue.dropped,
                          h.db_errors, self.metrics.port if self.metrics else None)

    def status_line(self) -> str:
        h = self.health
        return (f"{len(self.agent.devices)} GPUs, {h.active_jobs} jobs, {h.samples} samples, "
                f"{h.pending_writes} pending writes, {h.dropped_writes} dropped, {h.db_errors} DB errors")

    def _shutdown(self, worker_thread: threading.Thread | None, once: bool) -> None:
        self.notifier.stopping()
        self.stop.set()
        if worker_thread is not None:
            worker_thread.join(timeout=15)
        if once:
            self.worker.step()  # facts and writes, inline
        self.worker.drain(deadline_s=5.0)
        self.worker.close()
        if self.state_file is not None:
            try:
                save_state(self.state_file, self.queue.snapshot(), self.agent.active_aggregates())
            except OSError as exc:
                log.warning("cannot save the agent state to %s: %s (pending writes and running jobs' history lost)",
                            self.state_file, exc.strerror or exc)
        if self.metrics is not None:
            self.metrics.stop()
        self.notifier.close()
