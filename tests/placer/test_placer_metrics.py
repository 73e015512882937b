"""The controller's Prometheus export: per-GPU factors, bins and actions with dcgm-exporter's
labels, the tax and saving counters, and a scrape that answers while the database is down."""

from __future__ import annotations

import socket
import urllib.request
from datetime import UTC, datetime

import pytest
from prometheus_client.parser import text_string_to_metric_families

from pal_slurm.placer.exporter import Exporter, GpuFacts, PlacerMetrics
from pal_slurm.placer.ledger import JobAccount

GPUS = [GpuFacts("gpu01", 0, "GPU-aaa", {"A": 1.0, "B": 0.98}, {"A": 0, "B": 0}, None),
        GpuFacts("gpu01", 1, "GPU-bbb", {"A": 1.31, "B": None}, {"A": 2, "B": None}, "drain")]


def rec(partition: str, tax: float | None, saved: float | None, mode: str = "observe") -> JobAccount:
    at = datetime.now(UTC)
    return JobAccount(job_id="1", mode=mode, job_class="A", partition=partition, account="a", user="u", gpus=(),
                      started_at=at, ended_at=at, runtime_s=60, factor=None if tax is None else 1.2, tax_gpu_h=tax,
                      alternative=None, alternative_factor=None, saved_gpu_h=saved, version=1)


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_scrape_has_dcgm_labels_counters_and_goes_stale_when_the_database_is_down() -> None:
    up = {"db": True}

    def load() -> list[GpuFacts]:
        if not up["db"]:
            raise OSError("connection refused")
        return GPUS

    metrics = PlacerMetrics(load, clock=lambda: 1796000000.0)
    exporter = Exporter(metrics, free_port(), "127.0.0.1", refresh_s=3600)
    assert exporter.start()
    try:
        metrics.add_records([rec("gpu", 0.5, 0.4), rec("gpu", 0.25, 0.1), rec("gpu", None, None),
                             rec("big", 2.0, -0.5, mode="enforce")])
        url = f"http://127.0.0.1:{exporter.port}/metrics"
        got = samples(urllib.request.urlopen(url, timeout=5).read().decode())
        a = (("Hostname", "gpu01"), ("UUID", "GPU-bbb"), ("class", "A"), ("gpu", "1"))
        assert got[("pal_gpu_slowdown", a)] == 1.31 and got[("pal_gpu_bin", a)] == 2
        assert ("pal_gpu_slowdown", (("Hostname", "gpu01"), ("UUID", "GPU-bbb"), ("class", "B"), ("gpu", "1"))) \
            not in got  # unprofiled for B: no value, never a guess
        assert got[("pal_gpu_outlier_action", (("Hostname", "gpu01"), ("UUID", "GPU-bbb"), ("action", "drain"),
                                               ("gpu", "1")))] == 1
        assert not [k for k in got if k[0] == "pal_gpu_outlier_action" and ("UUID", "GPU-aaa") in k[1]]
        gpu = (("mode", "observe"), ("partition", "gpu"))
        assert got[("pal_variability_tax_gpu_hours_total", gpu)] == pytest.approx(0.75)
        assert got[("pal_saved_gpu_hours_total", gpu)] == pytest.approx(0.5)
        assert got[("pal_accounted_jobs_total", gpu)] == 2
        assert got[("pal_unaccounted_jobs_total", (("partition", "gpu"),))] == 1
        assert got[("pal_saved_gpu_hours_total", (("mode", "enforce"), ("partition", "big")))] == -0.5
        assert got[("pal_exporter_stale", ())] == 0
        assert got[("pal_exporter_last_refresh_timestamp_seconds", ())] == 1796000000.0
        up["db"] = False
        assert metrics.refresh() is False  # the database is down: the last values, marked stale
        again = samples(urllib.request.urlopen(url, timeout=5).read().decode())
        assert again[("pal_gpu_slowdown", a)] == 1.31 and again[("pal_exporter_stale", ())] == 1
        assert again[("pal_exporter_last_refresh_timestamp_seconds", ())] == 1796000000.0
    finally:
        exporter.stop()


def test_a_port_in_use_is_logged_and_the_placer_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        exporter = Exporter(PlacerMetrics(lambda: GPUS), port, "127.0.0.1")
        assert exporter.start() is False
    assert f"port {port} not opened" in caplog.text


def test_never_refreshed_is_stale() -> None:
    text = "".join(m.name for m in PlacerMetrics(lambda: GPUS).collect())
    assert "pal_exporter_stale" in text
    fams = {m.name: m for m in PlacerMetrics(lambda: GPUS).collect()}
    assert fams["pal_exporter_stale"].samples[0].value == 1


def test_the_placer_service_exports_the_classified_fleet(tmp_path) -> None:
    """start_metrics wired to a real database: the demo's 16 classified GPUs, with their minors."""
    from pal_slurm.config import ClassificationConfig, DatabaseConfig, PalConfig, PlacerConfig
    from pal_slurm.db.engine import make_engine
    from pal_slurm.demo.cluster_gpus import make_db
    from pal_slurm.placer.service import start_metrics

    url = make_db(tmp_path)
    port = free_port()
    cfg = PalConfig(database=DatabaseConfig(url=url), data_dir=tmp_path,
                    placer=PlacerConfig(metrics_port=port, metrics_address="127.0.0.1"))
    assert start_metrics(cfg.model_copy(update={"placer": PlacerConfig(metrics_port=0)}), lambda: None) is None  # type: ignore[arg-type, return-value]
    engine = make_engine(url)
    metrics = start_metrics(cfg, lambda: engine)
    assert metrics is not None and metrics.refresh()
    got = samples(urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode())
    factors = {dict(k[1])["UUID"]: v for k, v in got.items()
               if k[0] == "pal_gpu_slowdown" and dict(k[1])["class"] == "A"}
    assert len(factors) == 16 and all(0.5 < f < 3 for f in factors.values())
    assert {dict(k[1])["gpu"] for k in got if k[0] == "pal_gpu_slowdown"} == {"0", "1", "2", "3"}
    assert got[("pal_exporter_stale", ())] == 0


def test_the_endpoint_serves_a_bounded_number_of_connections_and_closes_silent_ones() -> None:
    """Idle connections cost a thread each in a root process: at most MAX_CONNECTIONS are held
    open at once (one more is closed unanswered), a silent one is closed after the timeout, and
    a scrape still works once they are gone."""
    import socket
    import threading
    import time
    import urllib.request

    from pal_slurm.metrics_http import metrics_server

    server = metrics_server("127.0.0.1", 0, lambda: (b"up 1\n", 200, "text/plain"), name="t",
                            max_connections=3, timeout_s=0.5)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    try:
        idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
        time.sleep(0.1)
        extra = socket.create_connection(("127.0.0.1", port))
        extra.settimeout(2)
        assert extra.recv(10) == b"", "the connection beyond the cap is closed at once"
        assert server.refused >= 1
        threads = threading.active_count()
        time.sleep(1.0)  # the silent ones are closed after timeout_s
        for s in idle:
            s.settimeout(2)
            assert s.recv(10) == b""
        assert threading.active_count() <= threads - 3 + 1
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            assert resp.read() == b"up 1\n"
    finally:
        server.shutdown()
        server.server_close()


def test_the_metrics_endpoints_listen_on_the_loopback_address_by_default() -> None:
    from pal_slurm.config import AgentConfig, PlacerConfig

    assert PlacerConfig().metrics_address == "127.0.0.1" and AgentConfig().metrics_address == "127.0.0.1"
