"""Prometheus metrics of the controller's placer: per GPU its factor per class, bin and
outlier action, its passive factor (`pal gpus learn`) and open flags; per partition the variability tax and the saving as counters.

Labels match dcgm-exporter's so a site can join the two: `Hostname` (the node), `gpu` (the
device minor number, dcgm-exporter's GPU index) and `UUID`; plus `class` (A-D), `action`,
`partition` and `mode` (observe, enforce). Bounded by the hardware and the configuration,
never by the workload: no job ids, users or accounts.

Never fails the placer: the GPU gauges are refreshed from the database by a thread of their
own; while the database is down a scrape answers with the last values, and
`pal_exporter_stale` is 1 with `pal_exporter_last_refresh_timestamp_seconds` saying since
when. The counters are summed in memory from the placer's job records (since the placer
started, as Prometheus counters are). Port and metric names: docs/admin-guide.md, "Metrics".
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from pal_slurm.placer.ledger import JobAccount

log = logging.getLogger(__name__)

#: the controller exporter's default port (the node agent's is 9477, dcgm-exporter's 9400)
DEFAULT_PORT = 9478


@dataclass(frozen=True)
class GpuFacts:
    """One GPU as the latest classification has it."""

    hostname: str
    minor: int | None
    uuid: str
    slowdown: dict[str, float | None]  # class -> factor
    bins: dict[str, int | None]  # class -> bin index
    action: str | None  # the outlier's graded action, None for a regular GPU
    #: class -> the passive factor its finished jobs give (`pal gpus learn`), where it has one
    passive: dict[str, float] = field(default_factory=dict)
    #: its open flags' kinds (fail_slow, clock_drift)
    flags: tuple[str, ...] = ()


@dataclass
class _State:
    gpus: tuple[GpuFacts, ...] = ()
    refreshed_at: float = 0.0
    stale: bool = True
    error: str | None = None
    # (partition, mode) -> [tax GPU-h, saved GPU-h, accounted jobs]; partition -> unaccounted jobs
    sums: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    unaccounted: dict[str, int] = field(default_factory=dict)


class PlacerMetrics(Collector):
    """The collector: reads only memory, so a scrape never waits on the database."""

    def __init__(self, load_gpus: Callable[[], Sequence[GpuFacts]], clock: Callable[[], float] = time.time) -> None:
        self._load = load_gpus
        self._clock = clock
        self._lock = threading.Lock()
        self._state = _State()

    # -- inputs -----------------------------------------------------------------------------------
    def refresh(self) -> bool:
        """Reload the GPU facts; on any error keep the last ones and mark them stale."""
        try:
            gpus = tuple(self._load())
        except Exception as exc:  # noqa: BLE001 - the exporter never fails the placer
            with self._lock:
                self._state.stale = True
                self._state.error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
            log.warning("metrics: GPU facts not refreshed, serving the last ones (%s)", self._state.error)
            return False
        with self._lock:
            self._state.gpus, self._state.refreshed_at = gpus, self._clock()
            self._state.stale, self._state.error = False, None
        return True

    def add_records(self, records: Iterable[JobAccount]) -> None:
        """Count finished jobs' tax and saving (the accounting's `on_record`)."""
        with self._lock:
            for r in records:
                if r.tax_gpu_h is None:
                    self._state.unaccounted[r.partition] = self._state.unaccounted.get(r.partition, 0) + 1
                    continue
                acc = self._state.sums.setdefault((r.partition, r.mode), [0.0, 0.0, 0])
                acc[0] += max(r.tax_gpu_h, 0.0)
                acc[1] += r.saved_gpu_h or 0.0
                acc[2] += 1

    # -- the scrape ---------------------------------------------------------------------------------
    def collect(self) -> Iterable[Any]:
        with self._lock:
            st = _State(self._state.gpus, self._state.refreshed_at, self._state.stale, self._state.error,
                        {k: list(v) for k, v in self._state.sums.items()}, dict(self._state.unaccounted))
        labels = ["Hostname", "gpu", "UUID"]
        factor = GaugeMetricFamily("pal_gpu_slowdown", "Slowdown factor of the GPU for a job class "
                                   "(1.0 = the typical GPU of its model; higher = slower)", labels=[*labels, "class"])
        bins = GaugeMetricFamily("pal_gpu_bin", "Performance bin of the GPU for a job class (0 = fastest)",
                                 labels=[*labels, "class"])
        action = GaugeMetricFamily("pal_gpu_outlier_action", "1 for an outlier GPU's graded action "
                                   "(placement, re-profile, drain; pal gpus --actions)", labels=[*labels, "action"])
        passive = GaugeMetricFamily("pal_gpu_slowdown_passive", "Slowdown factor of the GPU for a job class as its "
                                    "finished jobs' run times give it (pal gpus learn; beside pal_gpu_slowdown)",
                                    labels=[*labels, "class"])
        flag = GaugeMetricFamily("pal_gpu_flag", "1 for each open re-profiling request of the GPU (fail_slow: its "
                                 "jobs ran slower than its benchmark; clock_drift: the node agent's clocks)",
                                 labels=[*labels, "kind"])
        for g in st.gpus:
            base = [g.hostname, "" if g.minor is None else str(g.minor), g.uuid]
            for cls, f in sorted(g.slowdown.items()):
                if f is not None:
                    factor.add_metric([*base, cls], f)
            for cls, b in sorted(g.bins.items()):
                if b is not None:
                    bins.add_metric([*base, cls], b)
            if g.action:
                action.add_metric([*base, g.action], 1)
            for cls, f in sorted(g.passive.items()):
                passive.add_metric([*base, cls], f)
            for kind in g.flags:
                flag.add_metric([*base, kind], 1)
        yield from (factor, bins, action, passive, flag)
        tax = CounterMetricFamily("pal_variability_tax_gpu_hours", "GPU-hours finished jobs lost to "
                                  "slower-than-typical GPUs", labels=["partition", "mode"])
        saved = CounterMetricFamily("pal_saved_gpu_hours", "GPU-hours the placer's choice saved (enforce: against "
                                    "Slurm's first fit) or would have saved (observe)", labels=["partition", "mode"])
        jobs = CounterMetricFamily("pal_accounted_jobs", "Finished GPU jobs with a known tax",
                                   labels=["partition", "mode"])
        unacc = CounterMetricFamily("pal_unaccounted_jobs", "Finished GPU jobs whose GPUs or factors were unknown",
                                    labels=["partition"])
        for (part, mode), (t, s, n) in sorted(st.sums.items()):
            tax.add_metric([part, mode], t)
            saved.add_metric([part, mode], s)
            jobs.add_metric([part, mode], n)
        for part, n in sorted(st.unaccounted.items()):
            unacc.add_metric([part], n)
        yield from (tax, saved, jobs, unacc)
        yield GaugeMetricFamily("pal_exporter_stale", "1 when the last refresh of the GPU facts failed (the values "
                                "are the last good ones)", value=1 if st.stale else 0)
        yield GaugeMetricFamily("pal_exporter_last_refresh_timestamp_seconds", "When the GPU facts were last "
                                "read from the database (0: never)", value=st.refreshed_at)


class Exporter:
    """The HTTP endpoint and the refresh thread; `start` never raises (a port in use is logged)."""

    def __init__(self, metrics: PlacerMetrics, port: int, address: str = "", refresh_s: float = 60.0) -> None:
        self.metrics = metrics
        self.port = port
        self.address = address
        self.refresh_s = refresh_s
        self.registry = CollectorRegistry()
        self.registry.register(metrics)
        self._stop = threading.Event()
        self._server: Any = None

    def start(self) -> bool:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        from pal_slurm.metrics_http import DEFAULT_ADDRESS, metrics_server

        try:
            self._server = metrics_server(self.address or DEFAULT_ADDRESS, self.port,
                                          lambda: (generate_latest(self.registry), 200, CONTENT_TYPE_LATEST),
                                          name="pal-placer")
        except OSError as exc:
            log.error("metrics: port %s not opened (%s); the placer runs without metrics", self.port, exc)
            return False
        threading.Thread(target=self._server.serve_forever, name="pal-placer-metrics", daemon=True).start()
        threading.Thread(target=self._loop, name="pal-metrics-refresh", daemon=True).start()
        log.info("metrics: http://%s:%d/metrics", self.address or DEFAULT_ADDRESS, self.port)
        return True

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.metrics.refresh()
            self._stop.wait(self.refresh_s)

    def stop(self) -> None:
        self._stop.set()
        if self._server is not None:
            self._server.shutdown()


def gpu_facts(rows: Sequence[dict[str, Any]], minors: dict[str, int | None]) -> list[GpuFacts]:
    """GpuFacts from `pal gpus` rows (pal_slurm.report.data.gpu_rows, with actions) and UUID -> minor."""
    return [GpuFacts(hostname=str(r.get("node") or ""), minor=minors.get(r["uuid"]), uuid=str(r["uuid"]),
                     slowdown={c: v.get("slowdown") for c, v in r["classes"].items()},
                     bins={c: v.get("bin") for c, v in r["classes"].items()}, action=r.get("action"),
                     passive={c: float(v["factor"]) for c, v in (r.get("passive") or {}).items()},
                     flags=tuple(sorted(r.get("flags") or {})))
            for r in rows]


__all__ = ["DEFAULT_PORT", "Exporter", "GpuFacts", "PlacerMetrics", "gpu_facts"]
