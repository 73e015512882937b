"""The agent's pure parts: bounded aggregates, the drift rule, the pending queue and backoff,
and the systemd notification protocol against a real AF_UNIX datagram socket."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import pytest

from pal_slurm.agent.aggregate import JobAggregate
from pal_slurm.agent.drift import DriftMonitor, DriftSettings
from pal_slurm.agent.metrics import AgentHealth, GpuGauges, render
from pal_slurm.agent.pending import Backoff, PendingQueue
from pal_slurm.agent.procmap import job_id_from_cgroup, read_job_id
from pal_slurm.agent.job_profile_store import ClassFact, NodeFacts
from pal_slurm.systemd_notify import Notifier


def test_aggregate_means_percentile_and_constant_size() -> None:
    agg = JobAggregate("9", "alice", 1000.0, ("GPU-a", "GPU-b"))
    for i in range(100):
        agg.add(i + 1, None, 30, 250.0, 1400.0 + i % 2)
    agg.add(None, None, None, None, None)  # a GPU that could not say: counted, not a zero
    rec = agg.profile("gpu001", 1100.0)
    assert rec.samples == 101 and rec.gpu_util_mean == pytest.approx(50.5) and rec.gpu_util_p95 == 95.0
    assert rec.mem_bw_util_mean == 30.0 and rec.power_w_mean == 250.0 and rec.sm_clock_mhz_mean == 1400.5
    assert rec.sm_active_mean is None and rec.duration_s == 100.0 and rec.gpu_uuids == ("GPU-a", "GPU-b")
    size = len(repr(agg.to_dict()))
    for _ in range(50_000):
        agg.add(77, 60.0, 40, 260.0, 1380.0)
    assert len(repr(agg.to_dict())) < size + 64  # bounded: counters grow in digits only
    again = JobAggregate.from_dict(agg.to_dict())
    assert again.profile("gpu001", 1100.0) == agg.profile("gpu001", 1100.0)
    assert JobAggregate("1", None, 5.0, ()).profile("n", 1.0).duration_s == 0.0  # clock skew: never negative


def _feed(mon: DriftMonitor, uuid: str, t0: float, minutes: int, clock: float, util: int = 95) -> list:
    events = []
    for s in range(minutes * 60):
        ev = mon.observe(uuid, t0 + s, util, clock)
        if ev is not None:
            events.append(ev)
    return events


def test_drift_flags_once_after_n_low_loaded_minutes() -> None:
    mon = DriftMonitor(DriftSettings(margin=0.05, minutes=10, load_threshold=80), {"g": 1400.0})
    t0 = 1_800_000_000 - 1_800_000_000 % 60
    assert _feed(mon, "g", t0, 9, 1300.0) == []  # 9 low minutes
    assert _feed(mon, "g", t0 + 540, 30, 1400.0 * 0.951) == []  # within the margin: ok minutes reset
    events = _feed(mon, "g", t0 + 2340, 12, 1300.0)
    assert len(events) == 1 and mon.flagged("g")
    ev = events[0]
    assert ev.minutes == 10 and ev.observed_mhz == pytest.approx(1300.0) and ev.expected_mhz == 1400.0
    assert "re-profile" in ev.describe(mon.settings)
    assert _feed(mon, "g", t0 + 3060, 20, 1300.0) == []  # one flag per episode
    _feed(mon, "g", t0 + 4260, 2, 1400.0)  # recovered
    assert not mon.flagged("g")
    assert len(_feed(mon, "g", t0 + 4380, 12, 1300.0)) == 1  # a new episode flags again


def test_drift_ignores_idle_unknown_and_unprofiled() -> None:
    mon = DriftMonitor(DriftSettings(minutes=2), {"g": 1400.0})
    t0 = 1_800_000_000 - 1_800_000_000 % 60
    assert _feed(mon, "g", t0, 30, 300.0, util=10) == []  # idle clocks say nothing
    assert _feed(mon, "other", t0, 30, 300.0) == []  # no expectation: not watched
    assert mon.observe("g", t0, None, 1000.0) is None and mon.observe("g", t0, 95, None) is None
    # idle gaps neither help nor hurt: low, idle, low, low -> flagged after 2 loaded low minutes
    _feed(mon, "g", t0 + 1800, 1, 1000.0)
    _feed(mon, "g", t0 + 1860, 5, 300.0, util=0)
    assert len(_feed(mon, "g", t0 + 2160, 2, 1000.0)) == 1
    mon.set_expected({"g": 1000.0})  # re-profiled: the episode starts over
    assert not mon.flagged("g") and mon.expected("g") == 1000.0


def test_pending_queue_drops_oldest_and_counts() -> None:
    q: PendingQueue[int] = PendingQueue(3)
    for i in range(5):
        q.put(i)
    assert q.snapshot() == [2, 3, 4] and q.dropped == 2
    batch = q.take(2)
    assert batch == [2, 3] and len(q) == 1
    q.put(5)
    q.put(6)
    q.give_back(batch)  # a failed write goes back in front; what no longer fits is the oldest
    assert q.snapshot() == [4, 5, 6]  # 2 and 3 were the oldest
    assert len(q) == 3 and q.dropped == 4
    with pytest.raises(ValueError):
        PendingQueue(0)


def test_backoff_doubles_to_the_cap_and_resets() -> None:
    b = Backoff(1.0, 10.0)
    assert b.ready(0.0)
    assert [b.failed(100.0) for _ in range(6)] == [1, 2, 4, 8, 10, 10]
    assert not b.ready(105.0) and b.ready(110.0)
    for _ in range(5000):
        b.failed(0.0)  # no overflow however long the outage
    b.succeeded()
    assert b.ready(0.0) and b.failed(0.0) == 1


def test_metrics_text_is_well_formed_and_label_safe() -> None:
    g = GpuGauges("GPU-1", 0, 'Tesla "V100"\\x', sm_clock_mhz=1380.0, utilization_gpu=97)
    g.count_throttle(0x4 | 0x20)
    g.count_throttle(0x4)
    facts = NodeFacts(classification_version=3, classes={"GPU-1": (ClassFact("A", 1, 1.06, False),)},
                      expected_clock={"GPU-1": 1395.0})
    text = render("gpu001", [g], AgentHealth(backend="sim", version="0"), facts)
    assert 'model="Tesla \\"V100\\"\\\\x"' in text
    assert 'pal_gpu_throttle_samples_total{node="gpu001",gpu="GPU-1",minor="0",model="Tesla \\"V100\\"\\\\x",' \
           'reason="sw_power_cap"} 2' in text
    assert 'class="A"} 1.06' in text and "pal_classification_version{node=\"gpu001\"} 3" in text
    names = [ln.split("{")[0].split(" ")[0] for ln in text.splitlines() if not ln.startswith("#")]
    helps = {ln.split()[2] for ln in text.splitlines() if ln.startswith("# HELP")}
    assert set(names) <= helps  # every sample belongs to a family with HELP and TYPE
    assert "job" not in " ".join(ln.split("{")[1] for ln in text.splitlines() if "{" in ln and "job_active" not in ln)


# --------------------------------------------------------------------------- systemd notify

@pytest.fixture
def notify_socket(tmp_path: Path):
    path = tmp_path / "notify"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(2)
    yield path, sock
    sock.close()


def test_notify_messages_arrive(notify_socket) -> None:
    path, sock = notify_socket
    n = Notifier(env={"NOTIFY_SOCKET": str(path), "WATCHDOG_USEC": "20000000", "WATCHDOG_PID": str(os.getpid())})
    assert n.enabled and n.watchdog_interval_s == 10.0
    assert n.ready("sampling 8 GPUs") and n.watchdog() and n.status("line one\nline two") and n.stopping()
    got = [sock.recv(4096).decode() for _ in range(4)]
    assert got == ["READY=1\nSTATUS=sampling 8 GPUs", "WATCHDOG=1", "STATUS=line one line two", "STOPPING=1"]
    n.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="abstract sockets are Linux-only")
def test_notify_abstract_namespace() -> None:
    name = f"pal-test-{os.getpid()}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + name)
    sock.settimeout(2)
    try:
        assert Notifier(env={"NOTIFY_SOCKET": "@" + name}).ready()
        assert sock.recv(100) == b"READY=1"
    finally:
        sock.close()


def test_notify_is_a_no_op_outside_systemd(tmp_path: Path) -> None:
    assert not Notifier(env={}).ready() and Notifier(env={}).watchdog_interval_s is None
    other_pid = Notifier(env={"NOTIFY_SOCKET": "/x", "WATCHDOG_USEC": "100", "WATCHDOG_PID": "1"})
    assert other_pid.watchdog_interval_s is None  # the watchdog is for another process
    gone = Notifier(env={"NOTIFY_SOCKET": str(tmp_path / "nobody-listens")})
    assert gone.enabled and gone.ready() is False and gone.status("x") is False  # errors are not raised


@pytest.mark.parametrize("text, job", [
    ("0::/system.slice/slurmstepd.scope/job_4711/step_batch/user/task_0\n", "4711"),  # cgroup v2 (22.05+)
    ("12:devices:/slurm/uid_1000/job_815/step_0\n11:memory:/slurm/uid_1000/job_815/step_0\n", "815"),  # v1
    ("0::/slurm_pal-n1/uid_0/job_77\n", "77"),
    ("0::/user.slice/user-1000.slice/session-3.scope\n", None),
    ("0::/system.slice/my_job_123x/foo\n", None),
    ("", None),
])
def test_job_id_from_cgroup(text: str, job: str | None) -> None:
    assert job_id_from_cgroup(text) == job


def test_read_job_id_from_proc(tmp_path: Path) -> None:
    (tmp_path / "99").mkdir()
    (tmp_path / "99" / "cgroup").write_text("0::/system.slice/slurmstepd.scope/job_5/step_0\n")
    assert read_job_id(99, tmp_path) == "5" and read_job_id(100, tmp_path) is None


def test_the_agent_state_file_is_root_only(tmp_path: Path) -> None:
    """The pending job profiles name users and their commands: 0600, whatever the umask."""
    import os
    import stat

    from pal_slurm.agent.service import load_state, save_state

    old = os.umask(0o022)
    try:
        path = tmp_path / "agent-state.json"
        save_state(path, [], {})
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert load_state(path) == ([], {})
    finally:
        os.umask(old)
