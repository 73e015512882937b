"""Prometheus metrics of the node agent: text exposition format over the stdlib HTTP server.

No dependency: the format is plain text (``# HELP``, ``# TYPE``, ``name{labels} value``),
and a scrape every 15-60 s needs no more than `http.server` in a daemon thread. The
default port 9477 is ours (9400 is dcgm-exporter's, 8080 everyone's, 6817 slurmctld's).

Labels are bounded by the hardware, never by the workload: node, gpu (UUID), minor, model,
and where needed class (the configured job classes), benchmark or reason (NVML's fixed
set of clocks-event reasons). No job ids, users or job names, so the number of series
does not grow with the number of jobs.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from pal_slurm.agent.job_profile_store import NodeFacts
from pal_slurm.profiler.telemetry import REASON_NAMES

__all__ = ["THROTTLE_REASONS", "AgentHealth", "GpuGauges", "MetricsServer", "render"]

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# NVML clocks-event (throttle) reason bits and their names: one table, the profiler's
THROTTLE_REASONS = REASON_NAMES


@dataclass
class GpuGauges:
    """Latest readings and counters of one GPU (mutated by the sampling loop only)."""

    uuid: str
    minor: int | None
    model: str
    sm_clock_mhz: float | None = None
    power_w: float | None = None
    temperature_c: float | None = None
    utilization_gpu: int | None = None
    utilization_memory: int | None = None
    samples: int = 0
    errors: int = 0
    job_active: bool = False
    drift_flagged: bool = False
    throttle_samples: list[int] = field(default_factory=lambda: [0] * len(THROTTLE_REASONS))

    def count_throttle(self, reasons: int | None) -> None:
        if reasons:
            for i, (bit, _name) in enumerate(THROTTLE_REASONS):
                if reasons & bit:
                    self.throttle_samples[i] += 1


@dataclass
class AgentHealth:
    backend: str
    version: str
    cycles: int = 0
    samples: int = 0
    sample_errors: int = 0
    last_cycle_s: float = 0.0
    active_jobs: int = 0
    jobmap_corrupt_files: int = 0
    profiles_queued: int = 0
    pending_writes: int = 0
    dropped_writes: int = 0
    db_errors: int = 0
    db_writes: int = 0
    last_write_ok: float | None = None
    facts_loaded: float | None = None


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(pairs: Iterable[tuple[str, object]]) -> str:
    inner = ",".join(f'{k}="{_escape(str(v))}"' for k, v in pairs if v is not None)
    return "{" + inner + "}" if inner else ""


def _num(value: float | bool) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    return repr(float(value))


class _Family:
    def __init__(self, name: str, kind: str, help_text: str) -> None:
        self.name, self.kind, self.help = name, kind, help_text
        self.lines: list[str] = []

    def add(self, labels: Sequence[tuple[str, object]], value: float | bool | None) -> None:
        if value is not None:
            self.lines.append(f"{self.name}{_labels(labels)} {_num(value)}")

    def text(self) -> str:
        if not self.lines:
            return ""
        return f"# HELP {self.name} {self.help}\n# TYPE {self.name} {self.kind}\n" + "\n".join(self.lines) + "\n"


class _Families:
    """The scrape's metric families in the order they first appear, each made on first use."""

    def __init__(self) -> None:
        self.by_name: dict[str, _Family] = {}

    def __call__(self, name: str, kind: str, help_text: str) -> _Family:
        if name not in self.by_name:
            self.by_name[name] = _Family(name, kind, help_text)
        return self.by_name[name]

    def text(self) -> str:
        return "".join(f.text() for f in self.by_name.values())


def render(node: str, gpus: Sequence[GpuGauges], health: AgentHealth, facts: NodeFacts) -> str:
    """The whole scrape, as text. Pure, so tests can check it without a socket."""
    fam = _Families()
    for g in gpus:
        _gpu_metrics(fam, node, g, facts)
    _agent_metrics(fam, node, health, facts)
    return fam.text()


def _gpu_metrics(fam: _Families, node: str, g: GpuGauges, facts: NodeFacts) -> None:
    """One GPU's gauges and counters, its classes and benchmark scores from the database's facts."""
    base = (("node", node), ("gpu", g.uuid), ("minor", g.minor), ("model", g.model))
    fam("pal_gpu_sm_clock_mhz", "gauge", "SM clock at the last sample.").add(base, g.sm_clock_mhz)
    fam("pal_gpu_power_watts", "gauge", "Board power at the last sample.").add(base, g.power_w)
    fam("pal_gpu_temperature_celsius", "gauge", "GPU temperature at the last sample.").add(base, g.temperature_c)
    fam("pal_gpu_utilization_percent", "gauge", "Percent of time a kernel ran (last sample).").add(
        base, g.utilization_gpu)
    fam("pal_gpu_memory_bandwidth_utilization_percent", "gauge",
        "Percent of time the memory controller was busy (last sample).").add(base, g.utilization_memory)
    fam("pal_gpu_samples_total", "counter", "Telemetry samples taken.").add(base, g.samples)
    fam("pal_gpu_sample_errors_total", "counter", "Telemetry samples that failed.").add(base, g.errors)
    fam("pal_gpu_job_active", "gauge", "1 while a Slurm job is mapped to the GPU.").add(base, g.job_active)
    throttle = fam("pal_gpu_throttle_samples_total", "counter",
                   "Samples in which NVML reported the clocks-event (throttle) reason.")
    for (_bit, reason), count in zip(THROTTLE_REASONS, g.throttle_samples):
        throttle.add((*base, ("reason", reason)), count)
    for c in facts.classes.get(g.uuid, ()):
        labels = (*base, ("class", c.job_class))
        fam("pal_gpu_class_bin", "gauge", "Bin of the GPU for the job class in the latest classification "
            "(0 = fastest).").add(labels, c.bin)
        fam("pal_gpu_slowdown_factor", "gauge", "Slowdown factor of the GPU for the job class in the latest "
            "classification (1 = median).").add(labels, c.slowdown)
        fam("pal_gpu_outlier", "gauge", "1 if the latest classification fenced the GPU off as an outlier "
            "for the job class.").add(labels, c.outlier)
    for s in facts.scores.get(g.uuid, ()):
        labels = (*base, ("benchmark", s.benchmark), ("unit", s.unit))
        fam("pal_gpu_benchmark_score", "gauge", "Score of the GPU's most recent run of the benchmark.").add(
            labels, s.score)
        fam("pal_gpu_benchmark_timestamp_seconds", "gauge", "When that run started (Unix time).").add(
            labels, s.at.timestamp())
    fam("pal_gpu_expected_sm_clock_mhz", "gauge", "Lowest median SM clock the GPU held in its benchmarks "
        "(the drift check's reference).").add(base, facts.expected_clock.get(g.uuid))
    fam("pal_gpu_reprofile_flagged", "gauge", "1 if the GPU ran below its class under load and awaits "
        "re-profiling.").add(base, g.drift_flagged or g.uuid in facts.open_flags)


def _agent_metrics(fam: _Families, node: str, health: AgentHealth, facts: NodeFacts) -> None:
    """The agent's own health, and which classification its class metrics come from."""
    h = health
    node_l = (("node", node),)
    fam("pal_agent_info", "gauge", "The agent's version and GPU backend.").add(
        (*node_l, ("version", h.version), ("backend", h.backend)), 1)
    fam("pal_classification_version", "gauge", "Version of the classification run the class metrics come from.").add(
        node_l, facts.classification_version)
    fam("pal_agent_cycles_total", "counter", "Sampling cycles run.").add(node_l, h.cycles)
    fam("pal_agent_samples_total", "counter", "GPU samples taken, all GPUs.").add(node_l, h.samples)
    fam("pal_agent_sample_errors_total", "counter", "GPU samples that failed, all GPUs.").add(node_l, h.sample_errors)
    fam("pal_agent_cycle_duration_seconds", "gauge", "Wall time of the last sampling cycle.").add(node_l, h.last_cycle_s)
    fam("pal_agent_active_jobs", "gauge", "Slurm jobs with GPUs on this node now.").add(node_l, h.active_jobs)
    fam("pal_agent_jobmap_corrupt_files", "gauge", "Job mapping files skipped as corrupt now.").add(
        node_l, h.jobmap_corrupt_files)
    fam("pal_agent_profiles_queued_total", "counter", "Job profiles queued for the database.").add(
        node_l, h.profiles_queued)
    fam("pal_agent_pending_writes", "gauge", "Items waiting for the database.").add(node_l, h.pending_writes)
    fam("pal_agent_dropped_writes_total", "counter", "Items dropped because the pending queue was full.").add(
        node_l, h.dropped_writes)
    fam("pal_agent_db_errors_total", "counter", "Failed database attempts.").add(node_l, h.db_errors)
    fam("pal_agent_db_writes_total", "counter", "Successful database write batches.").add(node_l, h.db_writes)
    fam("pal_agent_last_successful_write_timestamp_seconds", "gauge",
        "Unix time of the last successful database write.").add(node_l, h.last_write_ok)
    fam("pal_agent_facts_loaded_timestamp_seconds", "gauge",
        "Unix time the classes, scores and expected clocks were last read from the database.").add(
        node_l, h.facts_loaded)


class MetricsServer:
    """Serves `render_fn()` at /metrics (and / for a one-line hint) in a daemon thread, on the
    bounded server every pal endpoint uses (pal_slurm.metrics_http: timeouts, a connection cap)."""

    def __init__(self, address: str, port: int, render_fn: Callable[[], str]) -> None:
        from pal_slurm.metrics_http import metrics_server

        self._server = metrics_server(address, port, lambda: (render_fn().encode(), 200, CONTENT_TYPE),
                                      name="pal-agent")
        self._thread = threading.Thread(target=self._server.serve_forever, name="pal-agent-metrics", daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> MetricsServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
