"""RestBackend against a real slurmrestd: the same jobs and nodes as CliBackend, writes through
scontrol, and every failure named (or read through squeue/sinfo, when falling back).

Needs the test cluster started with slurmrestd (PAL_TEST_SLURM_REST=1, see
tests/services/slurm-cluster.sh): the cluster's `env` then exports PAL_TEST_SLURM_REST_URL.
Without it these tests skip, or FAIL when PAL_REQUIRE_SLURM_REST=1.  Only the unreachable-URL
test needs no cluster.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pytest

from pal_slurm.errors import SlurmError, SlurmUnavailable
from pal_slurm.slurm.cli_backend import CliBackend
from pal_slurm.slurm.model import SlurmJob, SlurmNode
from pal_slurm.slurm.rest_backend import SHARED_GONE, RestBackend

from .conftest import SlurmCluster

T = TypeVar("T")

#: what the placer reads of a job / a node; both backends must agree on each
JOB_FACTS = ("job_id", "state", "priority", "tres_per_node", "tres_per_job", "admin_comment", "required_nodes",
             "gres_detail", "partition", "user", "begin_time")
NODE_FACTS = ("name", "state", "flags", "features", "active_features", "gres", "gres_used", "partitions", "cpus",
              "real_memory_mb")


def _rest_api() -> str:
    return os.environ.get("PAL_TEST_SLURM_REST_API") or "v0.0.38"


def _rest_url() -> str:
    url = os.environ.get("PAL_TEST_SLURM_REST_URL", "")
    if not url:
        why = ("PAL_TEST_SLURM_REST_URL is not set (start the cluster with PAL_TEST_SLURM_REST=1: "
               "tests/services/slurm-cluster.sh runs slurmrestd then)")
        if os.environ.get("PAL_REQUIRE_SLURM_REST") == "1":
            pytest.fail(f"slurmrestd unavailable but PAL_REQUIRE_SLURM_REST=1: {why}", pytrace=False)
        pytest.skip(f"slurmrestd unavailable: {why}")
    return url


def _token(cluster: SlurmCluster, user: str = "root", lifespan: int = 3600) -> str:
    out = cluster.scontrol("token", f"username={user}", f"lifespan={lifespan}").stdout
    m = re.search(r"SLURM_JWT=(\S+)", out)
    assert m, f"scontrol token printed {out!r}"
    return m[1]


def _forged(token: str) -> str:
    """The same claims (user, expiry) with a signature slurmctld's key did not make."""
    head, claims, _sig = token.split(".")
    return f"{head}.{claims}.{base64.urlsafe_b64encode(b'0' * 32).decode().rstrip('=')}"


def _agreeing(read: Callable[[], tuple[T, T]], tries: int = 5) -> tuple[T, T]:
    """Both backends' views, read again while they differ (a job of an earlier test may still
    be finishing between the two reads)."""
    cli, rest = read()
    for _ in range(tries - 1):
        if cli == rest:
            break
        time.sleep(0.5)
        cli, rest = read()
    return cli, rest


def _job_facts(jobs: list[SlurmJob], ids: set[str]) -> dict[str, dict[str, object]]:
    return {j.job_id: {f: getattr(j, f) for f in JOB_FACTS} for j in jobs if j.job_id in ids}


def _node_facts(nodes: list[SlurmNode]) -> dict[str, dict[str, object]]:
    return {n.name: {f: getattr(n, f) for f in NODE_FACTS} for n in nodes}


HELD_NOTE = "site: held class=A v1 at=1700000000"


@dataclass
class Rig:
    cluster: SlurmCluster
    url: str
    token: str
    node: str  # where `running` runs
    running: str  # RUNNING on pal-n3, GPU slot 1
    held: str  # PENDING, priority 0, --gpus=2, an admin comment like a tag
    pinned: str  # PENDING (held), required node pal-n2, --gres=gpu:2


@pytest.fixture(scope="module")
def rig(slurm_cluster: SlurmCluster) -> Iterator[Rig]:
    url = _rest_url()
    slurm_cluster.set_filter("off")  # plain Slurm: nothing of ours rewrites these jobs
    node = "pal-n3" if "pal-n3" in slurm_cluster.nodes else slurm_cluster.nodes[-1]
    pin = "pal-n2" if "pal-n2" in slurm_cluster.nodes else slurm_cluster.nodes[0]
    jobs = []
    try:
        running = slurm_cluster.submit(["--gres=gpu:v100_g1:1", f"--nodelist={node}", "--job-name=rest-run",
                                        "--wrap", "sleep 300"])
        jobs.append(running)
        held = slurm_cluster.submit(["--hold", "--gpus=2", "--job-name=rest-held", "--wrap", "true"])
        jobs.append(held)
        pinned = slurm_cluster.submit(["--hold", "--gres=gpu:2", f"--nodelist={pin}", "--job-name=rest-pinned",
                                       "--wrap", "true"])
        jobs.append(pinned)
        # an admin comment with spaces and '=' like pal's tags, but none a placer takes for its
        # own hold: the placer test of this module runs a real placer beside these jobs, in any order
        slurm_cluster.scontrol("update", f"jobid={held}", f"AdminComment={HELD_NOTE}")
        slurm_cluster.wait_state(running, "RUNNING", timeout=60)
        yield Rig(slurm_cluster, url, _token(slurm_cluster), node, running, held, pinned)
    finally:
        slurm_cluster.cancel(jobs)


def test_jobs_and_nodes_read_through_slurmrestd_match_the_cli(rig: Rig) -> None:
    cli = CliBackend(timeout=30)
    rest = RestBackend(rig.url, api=_rest_api(), token=rig.token, timeout=30, fallback_cli=False)
    ids = {rig.running, rig.held, rig.pinned}
    cli_jobs, rest_jobs = _agreeing(lambda: (_job_facts(cli.jobs(), ids), _job_facts(rest.jobs(), ids)))
    assert set(rest_jobs) == ids
    assert rest_jobs == cli_jobs

    run, held, pinned = rest_jobs[rig.running], rest_jobs[rig.held], rest_jobs[rig.pinned]
    assert run["state"] == "RUNNING" and run["priority"]
    assert re.fullmatch(r"gres[:/]gpu:v100_g1:1", str(run["tres_per_node"]))
    assert any("(IDX:1)" in g for g in run["gres_detail"])
    assert held["state"] == "PENDING" and held["priority"] == 0
    assert re.fullmatch(r"gres[:/]gpu:2", str(held["tres_per_job"])) and held["tres_per_node"] == ""
    assert held["admin_comment"] == HELD_NOTE
    assert pinned["required_nodes"] in ("pal-n2", rig.cluster.nodes[0])
    assert re.fullmatch(r"gres[:/]gpu:2", str(pinned["tres_per_node"]))

    cli_nodes, rest_nodes = _agreeing(lambda: (_node_facts(cli.nodes()), _node_facts(rest.nodes())))
    assert rest_nodes == cli_nodes
    assert set(rest_nodes) == set(rig.cluster.nodes)
    busy_node = rest_nodes[rig.node]
    assert "v100" in busy_node["features"]  # type: ignore[operator]
    assert "gpu:v100_g1:1" in str(busy_node["gres"])
    assert re.search(r"gpu:v100_g1:1\(IDX:1\)", str(busy_node["gres_used"]))


def test_writes_go_through_scontrol_as_root_even_with_slurm_jwt_in_the_environment(
        rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    # With SLURM_JWT set, Slurm's commands authenticate with the token (here: user palrest)
    # and would be refused the update of root's job; the backend takes it out of the environment.
    monkeypatch.setenv("SLURM_JWT", _token(rig.cluster, user="palrest"))
    rest = RestBackend(rig.url, api=_rest_api(), timeout=30, fallback_cli=False)
    assert "SLURM_JWT" not in os.environ
    assert rest.user == "palrest"  # from the token's own claim
    # a job of this test's own: released at the end, it runs and is gone, and the module's
    # jobs stay as the other tests (in any order) expect them
    own = rig.cluster.submit(["--hold", "--gres=gpu:1", "--job-name=rest-write", "--wrap", "true"])
    rest.update_job(own, [("AdminComment", "pal: rest write test")])
    rest.hold(own)  # held already: scontrol accepts it again
    job = rig.cluster.job(own)
    assert job.get("AdminComment") == "pal: rest write test"
    assert job.get("Priority") == "0" and job.get("JobState") == "PENDING"
    # the begin-time hold job_submit.lua uses: moved on, then ended (through scontrol as well)
    now = time.time()
    rest.set_begin(own, now + 300, now)
    got = {j.job_id: j for j in CliBackend(timeout=30).jobs()}[own]
    assert got.begin_time is not None and 290 < got.begin_time - time.time() <= 301, got.begin_time
    rest.start_now(own)
    got = {j.job_id: j for j in CliBackend(timeout=30).jobs()}[own]
    assert got.begin_time is not None and got.begin_time <= time.time() + 1, got.begin_time
    rest.release(own)
    assert rig.cluster.job(own).get("Priority") != "0"
    # a palrest token reads root's jobs as well (no PrivateData on the test cluster)
    assert rig.held in {j.job_id for j in rest.jobs()}


def test_a_refused_token_is_a_slurm_error_naming_the_http_status(rig: Rig) -> None:
    rest = RestBackend(rig.url, api=_rest_api(), token=_forged(rig.token), timeout=30, fallback_cli=False)
    for read in (rest.jobs, rest.nodes):
        with pytest.raises(SlurmError) as err:
            read()
        # not "Slurm unavailable": slurmctld answers, it refused the token
        assert not isinstance(err.value, SlurmUnavailable), err.value
        message = str(err.value)
        # 22.05 answers 401/403 (or 500); 24.11 answers 511 Network Authentication Required
        assert re.search(r"HTTP (401|403|500|511)\b", message), message
        assert "token" in message and rig.token.split(".")[2] not in message


def test_an_expired_token_says_so(rig: Rig) -> None:
    token = _token(rig.cluster, lifespan=1)
    time.sleep(2.1)
    rest = RestBackend(rig.url, api=_rest_api(), token=token, timeout=30, fallback_cli=False)
    with pytest.raises(SlurmError, match=r"HTTP \d{3}.*token expired") as err:
        rest.jobs()
    assert not isinstance(err.value, SlurmUnavailable)


def test_a_wrong_api_version_names_it(rig: Rig) -> None:
    rest = RestBackend(rig.url, api="v0.0.1", token=rig.token, timeout=30, fallback_cli=False)
    with pytest.raises(SlurmError, match=r"HTTP 404.*does not serve API v0\.0\.1"):
        rest.nodes()


def test_by_default_a_failing_slurmrestd_falls_back_to_squeue_and_sinfo(
        rig: Rig, caplog: pytest.LogCaptureFixture) -> None:
    forged = _forged(rig.token)
    rest = RestBackend(rig.url, api=_rest_api(), token=forged, timeout=30)
    cli = CliBackend(timeout=30)
    ids = {rig.running, rig.held}
    caplog.clear()  # only what the reads log: an API without exclusivity (v0.0.45) is warned of at start
    with caplog.at_level(logging.WARNING, logger="pal_slurm.slurm.rest_backend"):
        cli_jobs, rest_jobs = _agreeing(lambda: (_job_facts(cli.jobs(), ids), _job_facts(rest.jobs(), ids)))
        assert set(rest_jobs) == ids and rest_jobs == cli_jobs
        assert {n.name for n in rest.nodes()} == set(rig.cluster.nodes)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings and all("squeue/sinfo" in w for w in warnings)
    assert any(re.search(r"HTTP \d{3}", w) for w in warnings)
    assert not any(forged in w or forged.split(".")[2] in w for w in warnings)

    # no token at all (e.g. a fail-safe unit without the environment file): CLI reads, one warning
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="pal_slurm.slurm.rest_backend"):
        bare = RestBackend(rig.url, api=_rest_api(), token="", timeout=30)
        assert rig.held in {j.job_id for j in bare.jobs()}
    assert [r.getMessage() for r in caplog.records if "no token" in r.getMessage()]


def _api(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in version[1:].split("."))


def test_an_exclusive_job_reads_exclusive_through_the_api_the_start_warning_names(rig: Rig) -> None:
    """Job records say whether a job is exclusive up to data_parser v0.0.44; v0.0.45 (Slurm 26.05)
    does not, and the backend's start warning names v0.0.44, which 26.05 still serves: checked
    here on the newest API this slurmrestd serves (and on v0.0.44 where the newest is v0.0.45)."""
    newest = _rest_api()
    readable = newest if _api(newest) < SHARED_GONE else "v0.0.44"
    job = rig.cluster.submit(["--hold", "--exclusive", "--gpus=1", "--job-name=rest-exclusive", "--wrap", "true"])
    try:
        cli = CliBackend(timeout=30)
        rest = RestBackend(rig.url, api=readable, token=rig.token, timeout=30, fallback_cli=False)
        assert [j.exclusive for j in cli.jobs() if j.job_id == job] == [True]
        assert [j.exclusive for j in rest.jobs() if j.job_id == job] == [True]
        assert [j.exclusive for j in rest.jobs() if j.job_id == rig.held] == [False]
        if readable != newest:  # the gap the warning is about, as it is today
            blind = RestBackend(rig.url, api=newest, token=rig.token, timeout=30, fallback_cli=False)
            assert [j.exclusive for j in blind.jobs() if j.job_id == job] == [False]
    finally:
        rig.cluster.cancel([job])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_unreachable_slurmrestd_is_slurm_unavailable() -> None:
    rest = RestBackend(f"http://127.0.0.1:{_free_port()}", token="a.b.c", timeout=5, fallback_cli=False)
    for read in (rest.jobs, rest.nodes):
        with pytest.raises(SlurmUnavailable, match=r"slurmrestd http://127\.0\.0\.1:\d+ (jobs|nodes): .*refused"):
            read()


def test_the_user_and_the_expiry_come_from_the_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLURM_JWT_USER", raising=False)
    claims = base64.urlsafe_b64encode(json.dumps({"sun": "alice", "exp": 1}).encode()).decode().rstrip("=")
    rest = RestBackend("http://127.0.0.1:6820", token=f"SLURM_JWT=h.{claims}.s\n", fallback_cli=False)
    assert rest.user == "alice"
    assert rest._expired().startswith("1970-01-01")  # the local expiry check


def test_the_placer_places_a_held_job_reading_through_slurmrestd(
        rig: Rig, tmp_path: Path) -> None:
    """`pal placer` with slurm_backend = "rest" and SLURM_JWT in its environment (as the unit's
    environment file gives it): a plain GPU job is held by the filter, placed and run, and no
    read fell back to squeue/sinfo."""
    from .placer_support import A_PERFVAR, PlacerProcess, make_db, write_config

    cluster = rig.cluster
    tmp = tmp_path
    cluster.filter_state.unlink(missing_ok=True)  # the placer writes it; wait for that below
    gets = _rest_gets(cluster)
    cfg = write_config(tmp, make_db(tmp), cluster.filter_state, mode="enforce", interval=0.5)
    with cfg.open("a", encoding="utf-8") as fh:  # [placer] is the file's last section
        fh.write(f'slurm_backend = "rest"\nrest_url = "{rig.url}"\nrest_api = "{_rest_api()}"\n')
    placer = PlacerProcess(cfg, {**cluster.env, "SLURM_JWT": rig.token}, tmp / "placer.log")
    first = len(cluster.submitted)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and "\nmode enforce\n" not in _text(cluster.filter_state):
            time.sleep(0.2)
        assert "\nmode enforce\n" in _text(cluster.filter_state), placer.output()
        cluster.kill_switch.unlink(missing_ok=True)
        time.sleep(2.3)  # job_submit.lua re-reads the state file at most every 2 s
        jid = cluster.submit(["--gres=gpu:1", "--pal-class=A", "--wrap",
                              "echo NODE=$SLURMD_NODENAME; echo SLURM_JOB_GPUS=$SLURM_JOB_GPUS"])
        cluster.wait_state(jid, {"COMPLETED"}, timeout=60)
        info, env = cluster.job(jid), cluster.job_env(jid)
    finally:
        cluster.kill_switch.touch()
        placer.stop()
        cluster.cancel(cluster.submitted[first:])
    assert info["AdminComment"].startswith("pal: placed class=A"), (info.get("AdminComment"), placer.output())
    assert A_PERFVAR[(env["NODE"], int(env["SLURM_JOB_GPUS"]))] < 0.9  # the fast group of the test fleet
    assert "squeue/sinfo" not in placer.output() and rig.token not in placer.output()
    assert _rest_gets(cluster) > gets + 2  # its reads did reach slurmrestd


def _rest_gets(cluster: SlurmCluster) -> int:
    """GET requests for jobs and nodes in the test cluster's slurmrestd log."""
    text = _text(cluster.dir / "log" / "slurmrestd.out")
    return len(re.findall(r"GET /slurm/v[\d.]+/(?:jobs|nodes)\b", text))


def _text(path: Path) -> str:
    try:
        return path.read_text(encoding="ascii", errors="replace")
    except OSError:
        return ""
