"""The agent end to end with the simulated backend: job profiles into every database backend,
learning from them, drift flags, a database that is down, restarts, metrics over real HTTP,
and `pal agent --once` through the CLI."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import select

from pal_slurm.agent.aggregate import JobProfileRecord
from pal_slurm.agent.job_profile_store import NodeFacts, load_node_facts, write_items
from pal_slurm.agent.service import AgentService
from pal_slurm.agent.simload import SimLoad
from pal_slurm.services.classification import run_classification
from pal_slurm.cli.main import cli
from pal_slurm.config import AgentConfig, load_config
from pal_slurm.db import migrate
from pal_slurm.db.engine import make_engine, session_scope
from pal_slurm.db.models import Benchmark, Gpu, GpuFlag, JobProfile, JobSensitivity, Node, ProfileRun
from pal_slurm.gpu.simulated import SimBackend
from pal_slurm.gpu.simulated_fleet import make_fleet
from pal_slurm.services.ingest import import_records_now
from pal_slurm.db.sensitivity_store import learn, record_identity, sensitivity_rule
from conftest import ARTIFACT_CONFIG

T0 = 1_796_000_000.0 - 1_796_000_000.0 % 60
FLEET = make_fleet(nodes=2, gpus_per_node=4, seed=3)
NODE = FLEET.nodes[0]


class FakeClock:
    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def write_job(jobmap: Path, job: str, gpus: str, start: float, *, name: str = "", end: float | None = None) -> None:
    jobmap.mkdir(parents=True, exist_ok=True)
    text = f"format=pal-jobmap/1\njob_id={job}\nuser=u{job}\ngpus={gpus}\nstart={int(start)}\nname={name}\n"
    if end is not None:
        text += f"end={int(end)}\n"
    tmp = jobmap / f".{job}.tmp"
    tmp.write_text(text)
    tmp.replace(jobmap / f"{job}.job")


def end_job(jobmap: Path, job: str, end: float) -> None:
    path = jobmap / f"{job}.job"
    path.write_text(path.read_text() + f"end={int(end)}\n")


def make_service(tmp_path: Path, db_url: str | None, clock: FakeClock | None = None, *, busy=(), job_of_pid=None,
                 **settings) -> AgentService:
    clock = clock or FakeClock()
    load = SimLoad()
    backend = SimBackend(FLEET, (NODE,), load=load, clock=clock, busy=busy)
    cfg = AgentConfig(jobmap_dir=str(tmp_path / "jobmap" / "%n"), metrics_port=0, **settings)
    return AgentService(cfg, backend, node=NODE, db_url=db_url, state_file=tmp_path / "state.json", clock=clock,
                        on_jobs=load.assign, connect_timeout_s=2, job_of_pid=job_of_pid)


def run_cycles(service: AgentService, clock: FakeClock, seconds: int) -> None:
    for _ in range(seconds):
        clock.t += 1
        service.agent.cycle()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_cycle_writes_job_profiles_and_learning_finds_the_classes(db_url: str, tmp_path: Path) -> None:
    engine = make_engine(db_url)
    migrate.upgrade(engine)
    clock = FakeClock()
    service = make_service(tmp_path, db_url, clock)
    jobmap = service.jobmap_dir
    uuid = {d.minor: d.uuid for d in service.agent.devices.values()}
    write_job(jobmap, "101", "0-1", clock.t, name="resnet50-train")
    write_job(jobmap, "102", "2", clock.t, name="pagerank")
    write_job(jobmap, "103", "3", clock.t, name="bert-finetune")
    run_cycles(service, clock, 400)
    assert service.health.active_jobs == 3 and service.health.samples == 1600
    gauges = service.agent.gauges
    assert gauges[0].job_active and gauges[0].utilization_gpu == 92 and gauges[2].utilization_gpu == 14
    for job in ("101", "102", "103"):
        end_job(jobmap, job, clock.t)
    run_cycles(service, clock, 1)
    assert service.health.profiles_queued == 3 and not list(jobmap.glob("*.job"))  # collected and removed
    assert service.worker.step()
    assert len(service.queue) == 0 and service.health.last_write_ok is not None
    with session_scope(engine) as s:
        rows = {r.slurm_job_id: r for r in s.scalars(select(JobProfile))}
        assert set(rows) == {"101", "102", "103"}
        r = rows["101"]
        assert (r.node, r.user, r.gpus, r.gpu_uuids, r.samples) == (NODE, "u101", 2, [uuid[0], uuid[1]], 800)
        assert r.gpu_util_mean == 92.0 and r.gpu_util_p95 == 92.0 and r.mem_bw_util_mean == pytest.approx(28.0)
        assert r.started_at == datetime.fromtimestamp(T0, UTC) and r.duration_s == 400.0
        assert r.power_w_mean > rows["102"].power_w_mean and r.sm_clock_mhz_mean < rows["102"].sm_clock_mhz_mean
        assert r.fingerprint is None  # the agent does not know the command; learning fills it in
        for job, name in (("101", "resnet50-train"), ("102", "pagerank"), ("103", "bert-finetune")):
            record_identity(s, job, f"u{job}", name, f"python {name}.py")
        summary = learn(s, sensitivity_rule(load_config(None, env={"PAL_CONFIG": ARTIFACT_CONFIG, "HOME": str(tmp_path)})))
        assert summary.classified == 3
        learned = {row.name: row.job_class for row in s.scalars(select(JobSensitivity))}
    assert learned == {"resnet50-train": "A", "bert-finetune": "B", "pagerank": "D"}
    # the same profile written again (a retry after a lost commit) is not counted twice
    with session_scope(engine) as s:
        row = s.scalars(select(JobProfile).where(JobProfile.slurm_job_id == "102")).one()
        again = JobProfileRecord(row.slurm_job_id, row.node, row.user, tuple(row.gpu_uuids), row.started_at,
                                 row.ended_at, row.samples, None, None, None, None, None, None)
        assert write_items(s, [again]).profiles_skipped == 1
    service.worker.close()
    engine.dispose()


def test_database_down_buffers_bounded_then_recovers(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    closed = f"postgresql+psycopg://pal:secret@127.0.0.1:{free_port()}/pal"
    clock = FakeClock()
    service = make_service(tmp_path, closed, clock, pending_max=3, retry_min_s=1.0, retry_max_s=8.0)
    jobmap = service.jobmap_dir
    with caplog.at_level(logging.WARNING, logger="pal_slurm.agent.dbworker"):
        for i in range(5):
            write_job(jobmap, str(200 + i), str(i % 4), clock.t, name="io")
            run_cycles(service, clock, 10)
            end_job(jobmap, str(200 + i), clock.t)
            run_cycles(service, clock, 1)
        assert service.health.profiles_queued == 5
        assert not service.worker.step(now=100.0)  # connection refused: counted, backed off, not raised
        assert not service.worker.due(now=100.5) and service.worker.due(now=101.0)
        assert not service.worker.step(now=101.0)
        assert service.worker.backoff.next_at == 103.0  # 1 s, then 2 s
    assert service.health.db_errors == 2 and len(service.queue) == 3 and service.queue.dropped == 2
    assert [r.slurm_job_id for r in service.queue.snapshot()] == ["202", "203", "204"]  # the oldest went
    assert "secret" not in caplog.text and "retrying in" in caplog.text
    run_cycles(service, clock, 5)  # sampling never stopped
    assert service.health.samples == 4 * 60
    text = service.render_metrics()
    assert f'pal_agent_dropped_writes_total{{node="{NODE}"}} 2' in text
    assert f'pal_agent_db_errors_total{{node="{NODE}"}} 2' in text
    assert f'pal_agent_pending_writes{{node="{NODE}"}} 3' in text
    # the database comes back
    good = f"sqlite:///{tmp_path / 'pal.db'}"
    migrate.upgrade(make_engine(good))
    service.worker.url = good
    service.worker.close()
    assert service.worker.step(now=200.0) and len(service.queue) == 0 and service.health.db_writes == 1
    engine = make_engine(good)
    with session_scope(engine) as s:
        assert sorted(s.scalars(select(JobProfile.slurm_job_id))) == ["202", "203", "204"]
    engine.dispose()


def test_restart_keeps_pending_writes_and_running_jobs(tmp_path: Path) -> None:
    clock = FakeClock()
    closed = f"postgresql+psycopg://pal@127.0.0.1:{free_port()}/pal"
    first = make_service(tmp_path, closed, clock)
    jobmap = first.jobmap_dir
    write_job(jobmap, "301", "0", clock.t, name="resnet")
    write_job(jobmap, "302", "1", clock.t, name="pagerank")
    run_cycles(first, clock, 30)
    end_job(jobmap, "302", clock.t)
    run_cycles(first, clock, 1)
    first.stop.set()
    first.run(once=True, serve_metrics=False)  # stopped at once: straight to the shutdown path, which saves
    assert (tmp_path / "state.json").exists()
    second = make_service(tmp_path, f"sqlite:///{tmp_path / 'x.db'}", clock)
    assert not (tmp_path / "state.json").exists()  # consumed
    assert [r.slurm_job_id for r in second.queue.snapshot()] == ["302"]
    run_cycles(second, clock, 10)
    aggs = second.agent.active_aggregates()
    assert list(aggs) == ["301.job"] and aggs["301.job"].samples == 31 + 10


def test_drift_flag_reaches_gpu_flags(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'pal.db'}"
    engine = make_engine(url)
    migrate.upgrade(engine)
    clock = FakeClock()
    service = make_service(tmp_path, url, clock, drift_minutes=3, drift_margin=0.05)
    assert service.worker.step()  # facts loaded (none yet)
    dev = service.agent.devices[0]
    loaded_clock = FLEET.gpu(dev.uuid).sample(0.92, clock.t)["sm_clock_mhz"]
    service.agent.set_facts(NodeFacts(expected_clock={dev.uuid: loaded_clock * 1.10,
                                                      service.agent.devices[1].uuid: loaded_clock * 0.9}))
    write_job(service.jobmap_dir, "401", "0-1", clock.t, name="resnet")
    run_cycles(service, clock, 5 * 60)
    assert service.agent.gauges[0].drift_flagged and not service.agent.gauges[1].drift_flagged
    assert service.worker.step()
    with session_scope(engine) as s:
        flags = s.scalars(select(GpuFlag)).all()
        assert [(f.gpu_uuid, f.kind, f.node, f.cleared_at) for f in flags] == [(dev.uuid, "clock_drift", NODE, None)]
        assert flags[0].observed_mhz == pytest.approx(loaded_clock, abs=1) and "re-profile" in flags[0].detail
    assert f'pal_gpu_reprofile_flagged{{node="{NODE}",gpu="{dev.uuid}"' in service.render_metrics()
    service.worker.close()
    engine.dispose()


def test_node_facts_ignore_quarantined_profile_runs(engine) -> None:
    """A run `pal profile import --keep-suspect` stored quarantined is kept for the record only:
    its score is not the GPU's last score and its clock is not behind the expected clock."""
    at = datetime.fromtimestamp(T0, UTC)
    with session_scope(engine) as s:
        gpu = Gpu(uuid="GPU-q", node=Node(name="n1"), model="NVIDIA A100-SXM4-80GB")
        bench = Benchmark(name="resnet50", unit="ms", lower_is_better=True)
        s.add_all([gpu, bench])
        s.flush()
        for i, clock in enumerate((1400.0, 1410.0, 1390.0)):
            s.add(ProfileRun(run_key=f"ok-{i}", gpu_id=gpu.id, benchmark_id=bench.id, started_at=at + timedelta(
                minutes=i), score=100.0 + i, unit="ms", lower_is_better=True, sm_clock_mhz=clock, source="test"))
        # the five newest runs, absurd in score and clock, quarantined: unfiltered they would set both
        for i in range(5):
            s.add(ProfileRun(run_key=f"bad-{i}", gpu_id=gpu.id, benchmark_id=bench.id,
                             started_at=at + timedelta(hours=1, minutes=i), score=1e-300, unit="ms",
                             lower_is_better=True, sm_clock_mhz=9999.0, source="test",
                             quarantine="score 1e-300 ms is implausible"))
    with session_scope(engine) as s:
        facts = load_node_facts(s, ["GPU-q"])
    assert facts.expected_clock == {"GPU-q": pytest.approx(1400.0)}
    assert [(f.benchmark, f.score) for f in facts.scores["GPU-q"]] == [("resnet50", 102.0)]


def test_metrics_endpoint_over_http(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'pal.db'}"
    engine = make_engine(url)
    migrate.upgrade(engine)
    import_records_now(engine, FLEET.profile_records(runs_per_gpu=3))
    cfg = load_config(None, env={"PAL_CONFIG": ARTIFACT_CONFIG, "HOME": str(tmp_path)}, db_url=url)
    run_classification(engine, cfg, min_runs=2, allow_partial=True)
    engine.dispose()
    load = SimLoad()
    backend = SimBackend(FLEET, (NODE,), load=load)
    settings = AgentConfig(jobmap_dir=str(tmp_path / "jm"), interval_s=0.2, metrics_address="127.0.0.1")
    write_job(tmp_path / "jm", "501", "0", time.time(), name="resnet")
    service = AgentService(settings, backend, node=NODE, db_url=url, state_file=None, on_jobs=load.assign)
    port = service.start_metrics(0)  # a port the OS picked: no race with other test sessions
    runner = threading.Thread(target=service.run, kwargs={"duration_s": 30}, daemon=True)
    runner.start()
    try:
        deadline, text = time.monotonic() + 20, ""
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
                    ctype, text = resp.headers["Content-Type"], resp.read().decode()
                if "pal_gpu_slowdown_factor" in text and "pal_agent_samples_total" in text:
                    break
            except urllib.error.URLError:
                pass
            time.sleep(0.2)
        assert ctype.startswith("text/plain; version=0.0.4")
        uuids = [d.uuid for d in service.agent.devices.values()]
        for u in uuids:
            for job_class in "ABCD":
                assert f'gpu="{u}",minor="' in text and f'class="{job_class}"}}' in text
            assert f'pal_gpu_benchmark_score{{node="{NODE}",gpu="{u}"' in text
        assert 'benchmark="sgemm",unit="ms"' in text and f'pal_classification_version{{node="{NODE}"}} 1' in text
        assert f'pal_gpu_job_active{{node="{NODE}",gpu="{uuids[0]}",minor="0",' in text
        labels = " ".join(line.split("{", 1)[1].rsplit("}", 1)[0] for line in text.splitlines() if "{" in line)
        assert "501" not in labels and "u501" not in labels  # no per-job labels (values may hold any digits)
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/nope", timeout=5)
        assert err.value.code == 404
    finally:
        service.stop.set()
        runner.join(timeout=20)
    assert not runner.is_alive()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2)  # closed on stop


def test_pal_agent_once_through_the_cli(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'pal.db'}"
    runner = CliRunner()
    assert runner.invoke(cli, ["--db", url, "db", "upgrade"]).exit_code == 0
    jobmap = tmp_path / "jm" / "%n"
    node_dir = tmp_path / "jm" / NODE
    write_job(node_dir, "601", "0", time.time() - 60, end=time.time())  # ended while no agent ran
    write_job(node_dir, "602", "1,7", time.time(), name="bert")  # GPU 7 is not on this node
    (node_dir / "603.job").write_text("format=pal-jobmap/1\njob_id=603\ngpus=zero\nstart=1\n")
    conf = tmp_path / "pal.toml"
    conf.write_text(f'data_dir = "{tmp_path}"\n')
    result = runner.invoke(cli, ["--config", str(conf), "--db", url, "agent", "--backend", "sim", "--sim-nodes", "2",
                                 "--sim-seed", "3", "--once", "--jobmap-dir", str(jobmap), "--metrics-port", "0",
                                 "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["node"] == NODE and summary["backend"] == "sim" and summary["cycles"] == 1
    assert summary["samples"] == 4 and summary["profiles_queued"] == 0 and summary["db_errors"] == 0
    assert not (node_dir / "601.job").exists() and (node_dir / "602.job").exists()
    assert "603.job" in result.stderr or "603.job" in result.output
    state = json.loads((tmp_path / "agent-state.json").read_text())
    assert list(state["jobs"]) == ["602.job"] and state["jobs"]["602.job"]["samples"] == 1


def test_gpus_the_prolog_missed_are_found_from_the_jobs_processes(tmp_path: Path) -> None:
    """Slurm 22.05's Prolog lists one GPU of a multi-type job; the job's processes show the others."""
    from pal_slurm.gpu.interface import GpuProcess

    clock = FakeClock()
    owners = {4242: "701", 4243: "999"}  # 999: a job this node's mapping directory does not know
    service = make_service(tmp_path, None, clock, busy={2: [GpuProcess(4242)], 0: [GpuProcess(4243)]},
                           job_of_pid=owners.get)
    write_job(service.jobmap_dir, "701", "3", clock.t, name="resnet")
    run_cycles(service, clock, 1)
    assert sorted(i for i, g in service.agent.gauges.items() if g.job_active) == [2, 3]
    run_cycles(service, clock, 59)
    end_job(service.jobmap_dir, "701", clock.t)
    run_cycles(service, clock, 1)
    (profile,) = service.queue.snapshot()
    uuids = {d.index: d.uuid for d in service.agent.devices.values()}
    assert profile.gpu_uuids == (uuids[3], uuids[2]) and profile.samples == 120
    assert profile.gpu_util_mean == 92.0  # GPU 2 got the job's load once attributed


def test_service_talks_to_systemd(tmp_path: Path) -> None:
    """READY once started, WATCHDOG at half of WatchdogSec, STOPPING on the way out (real datagrams)."""
    import os

    from pal_slurm.systemd_notify import Notifier

    path = tmp_path / "notify"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(5)
    try:
        notifier = Notifier(env={"NOTIFY_SOCKET": str(path), "WATCHDOG_USEC": "400000",
                                 "WATCHDOG_PID": str(os.getpid())})
        load = SimLoad()
        settings = AgentConfig(jobmap_dir=str(tmp_path / "jm"), interval_s=0.1, metrics_port=0)
        service = AgentService(settings, SimBackend(FLEET, (NODE,), load=load), node=NODE, db_url=None,
                               state_file=None, notifier=notifier, on_jobs=load.assign)
        service.run(duration_s=1.5)
        got = []
        sock.settimeout(0.5)
        while True:
            try:
                got.append(sock.recv(4096).decode())
            except TimeoutError:
                break
    finally:
        sock.close()
    assert got[0] == "READY=1\nSTATUS=sampling 4 GPUs every 0.1 s" and got[-1] == "STOPPING=1"
    assert 3 <= got.count("WATCHDOG=1") <= 10  # every 0.2 s for 1.5 s (~7; slack for a busy machine)


def test_one_failing_gpu_does_not_stop_the_others(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A GPU lost at start is retried, one whose samples fail is counted (one warning), the rest go on."""
    from pal_slurm.gpu.interface import GpuQueryError

    class Flaky(SimBackend):
        broken = True

        def sample(self, index: int):  # type: ignore[no-untyped-def]
            if index == 2 and self.broken:
                raise GpuQueryError(index, "Unknown Error (simulated NVML)")
            return super().sample(index)

    clock = FakeClock()
    load = SimLoad()
    backend = Flaky(FLEET, (NODE,), load=load, clock=clock, lost=[1])
    settings = AgentConfig(jobmap_dir=str(tmp_path / "jm"), metrics_port=0)
    with caplog.at_level(logging.WARNING, logger="pal_slurm.agent.core"):
        service = AgentService(settings, backend, node=NODE, db_url=None, state_file=None, clock=clock,
                               on_jobs=load.assign)
        assert sorted(service.agent.devices) == [0, 2, 3]
        run_cycles(service, clock, 30)
        backend.broken = False
        run_cycles(service, clock, 5)
    gauges = service.agent.gauges
    assert (gauges[0].samples, gauges[2].samples, gauges[2].errors, gauges[3].samples) == (35, 5, 30, 35)
    assert service.health.sample_errors == 30
    messages = [r.getMessage() for r in caplog.records]
    assert sum("cannot inventory GPU 1" in m for m in messages) == 1
    assert sum("sampling failed" in m for m in messages) == 1 and any("answers again" in m for m in messages)
    assert 'pal_gpu_sample_errors_total{node="gpu001",gpu="' in service.render_metrics()
