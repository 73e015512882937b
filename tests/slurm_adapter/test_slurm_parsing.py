"""TRES/GRES strings and Slurm JSON (captured from real Slurm 22.05 and 24.11) -> typed records."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from pal_slurm.errors import SlurmError
from pal_slurm.slurm import filter_state, parse_json
from pal_slurm.slurm.cli_backend import CliBackend
from pal_slurm.slurm.model import BLOCKING_FLAGS, DRAIN_FLAGS, OUT_OF_SERVICE
from pal_slurm.slurm.tres import (
    parse_gres_alloc,
    parse_tres,
    typed_gpu_request,
)

DATA = Path(__file__).parents[1] / "data" / "slurm"


@pytest.mark.parametrize(("value", "count", "types", "prefix"), [
    ("gres:gpu:2", 2, (), "gres:"),
    ("gres/gpu:2", 2, (), "gres/"),
    ("gres/gpu=1", 1, (), "gres/"),
    ("gres/gpu:v100=1", 1, ("v100",), "gres/"),
    ("gres:gpu:v100_g1:1,gres:gpu:v100_g2:1", 2, ("v100_g1", "v100_g2"), "gres:"),
    ("gres:gpu:2,gres:mps:100", 2, (), "gres:"),
    ("gres/gpu", 1, (), "gres/"),
    ("gres:gpu:1k", 1024, (), "gres:"),
    ("gpu:3", 3, (), "gres:"),
    ("gres:mps:100", 0, (), "gres:"),
    ("", 0, (), "gres:"),
])
def test_tres_requests(value: str, count: int, types: tuple[str, ...], prefix: str) -> None:
    t = parse_tres(value)
    assert t.gpu_count == count and t.gpu_types == types and t.prefix == prefix and not t.unparsed


def test_tres_keeps_what_it_cannot_read_and_writes_back_with_the_same_prefix() -> None:
    t = parse_tres("gres/gpu:2,cpu=4,gres/shard:3")
    assert t.unparsed == ("cpu=4",)
    assert typed_gpu_request(t.prefix, {"h100_g3": 1, "h100_g0": 1}, t.without_gpus().items) == \
        "gres/gpu:h100_g0:1,gres/gpu:h100_g3:1,gres/shard:3"
    assert parse_tres("gres:gpu:a:b:c").unparsed == ("gres:gpu:a:b:c",)


def test_gres_alloc_strings() -> None:
    used = "gpu:v100_g0:1(IDX:0),gpu:v100_g1:0(IDX:N/A),gpu:v100_g2:1(IDX:2),gpu:v100_g3:0(IDX:)"
    u = parse_gres_alloc(used)
    assert [(x.type, x.count, x.indices) for x in u] == [
        ("v100_g0", 1, (0,)), ("v100_g1", 0, ()), ("v100_g2", 1, (2,)), ("v100_g3", 0, ())]
    assert [x.indices for x in parse_gres_alloc("gpu:a100:3(IDX:0-1,3)")] == [(0, 1, 3)]
    assert parse_gres_alloc("gpu:v100_g0:1,gpu:v100_g1:1")[1].type == "v100_g1"
    assert parse_gres_alloc(None) == ()


def test_squeue_22_05() -> None:
    doc = parse_json.load((DATA / "22.05" / "squeue.json").read_text(), "squeue --json")
    jobs = {j.job_id: j for j in parse_json.jobs_from_doc(doc)}
    run = jobs["323"]
    assert run.running and run.nodes == "pal-n2" and run.tres_per_node == "gres:gpu:v100_g1:1,gres:gpu:v100_g2:1"
    assert run.gres_detail == ("gpu:v100_g1:1(IDX:1),gpu:v100_g2:1(IDX:2)",)
    held = jobs["325"]
    assert held.pending and held.priority == 0 and held.state_reason == "JobHeldUser"
    assert held.comment == "pal:class=A" and held.name == "cap held" and held.memory_per_cpu_mb == 1000
    assert jobs["326"].tres_per_task == "gres:gpu:1" and jobs["327"].node_count == 2
    assert jobs["324"].tres_per_job == "gres:gpu:2"


def test_sinfo_22_05() -> None:
    doc = parse_json.load((DATA / "22.05" / "sinfo.json").read_text(), "sinfo --json")
    nodes = {n.name: n for n in parse_json.nodes_from_doc(doc)}
    assert set(nodes) == {"pal-n1", "pal-n2", "pal-n3", "pal-n4"}
    n2 = nodes["pal-n2"]
    assert n2.state == "MIXED" and n2.schedulable and n2.cpus == 8 and n2.alloc_cpus == 2
    assert n2.features == frozenset({"v100"}) and n2.partitions == ("gpu",)
    assert sorted(i for x in parse_gres_alloc(n2.gres_used) for i in x.indices) == [0, 1, 2, 3]
    assert n2.free_memory_mb == 16000 - 2000


def _v2411(name: str) -> Path:
    path = DATA / "24.11" / name
    if not path.exists():
        pytest.fail(f"missing capture {path}")
    return path


def test_squeue_24_11() -> None:
    doc = parse_json.load(_v2411("squeue.json").read_text(), "squeue --json")
    jobs = parse_json.jobs_from_doc(doc)
    running = [j for j in jobs if j.running]
    held = [j for j in jobs if j.pending]
    assert len(running) == 2 and len(held) == 3
    assert all(j.priority == 0 for j in held)
    typed = next(j for j in running if "g1" in j.tres_per_node)
    assert typed.tres_per_node.startswith("gres/gpu:") and parse_tres(typed.tres_per_node).gpu_count == 2
    assert any(j.admin_comment.startswith("pal:held") for j in held)


def test_nodes_24_11_from_scontrol_and_sinfo_refused() -> None:
    doc = parse_json.load(_v2411("scontrol-node.json").read_text(), "scontrol show node --json")
    nodes = {n.name: n for n in parse_json.nodes_from_doc(doc)}
    assert len(nodes) == 4 and all("v100" in n.features for n in nodes.values())
    busy = nodes["pal-n2"]
    assert busy.schedulable and parse_gres_alloc(busy.gres_used)
    sinfo = json.loads(_v2411("sinfo.json").read_text())
    if "sinfo" in sinfo:
        with pytest.raises(SlurmError, match="scontrol show node"):
            parse_json.nodes_from_doc(sinfo)


@pytest.mark.parametrize(("raw", "want"), [
    (5, 5), ("7", 7), ({"set": True, "infinite": False, "number": 3}, 3),
    ({"set": False, "infinite": False, "number": 0}, None), ({"set": True, "infinite": True, "number": 0}, None),
    (None, None), ("abc", None),
])
def test_numbers_of_both_versions(raw: object, want: int | None) -> None:
    assert parse_json.number(raw) == want


def test_bad_json_and_error_documents() -> None:
    with pytest.raises(SlurmError, match="not JSON"):
        parse_json.load("squeue: error: x", "squeue --json")
    with pytest.raises(SlurmError, match="Invalid"):
        parse_json.load(json.dumps({"errors": [{"error_number": 2017, "description": "Invalid job id"}]}), "x")


def test_node_states_both_spellings() -> None:
    a = parse_json.node_from_json({"name": "n", "state": "idle", "state_flags": ["DRAIN"]})
    b = parse_json.node_from_json({"name": "n", "state": ["IDLE", "DRAIN"]})
    c = parse_json.node_from_json({"name": "n", "state": ["MIXED"]})
    assert not a.schedulable and not b.schedulable and c.schedulable


def test_node_state_sets_nest_and_say_what_a_node_is() -> None:
    """The one definition of node states: a drain is out of service, out of service keeps new
    jobs off; a node only passing through (a reboot asked for) keeps new jobs off for now but is
    not out of service, so a job pinned to it is not rescued for that."""
    assert DRAIN_FLAGS < OUT_OF_SERVICE < BLOCKING_FLAGS
    drained = parse_json.node_from_json({"name": "n", "state": ["IDLE", "DRAIN"]})
    down = parse_json.node_from_json({"name": "n", "state": "down", "state_flags": []})
    failing = parse_json.node_from_json({"name": "n", "state": ["MIXED", "FAIL"]})
    rebooting = parse_json.node_from_json({"name": "n", "state": ["IDLE", "REBOOT_REQUESTED"]})
    assert drained.out_of_service == {"DRAIN"} and down.out_of_service == {"DOWN"}
    assert failing.out_of_service == {"FAIL"} and not rebooting.out_of_service
    assert drained.drained_or_down and down.drained_or_down
    assert not failing.drained_or_down and not rebooting.drained_or_down
    assert not any(n.schedulable for n in (drained, down, failing, rebooting))


@pytest.mark.parametrize("name", ["ALL", "all", "n[1-4]", "n1,n2", "", "n1 n2", "-n1", "NodeName=n1"])
def test_a_drain_names_exactly_one_node(name: str) -> None:
    """`NodeName=` also takes ALL, NodeSets and hostlists: the adapter refuses them before
    anything runs (no scontrol is needed to see the refusal)."""
    with pytest.raises(SlurmError, match="not the name of one Slurm node"):
        CliBackend(env={"PATH": "/nonexistent"}).drain_node(name, "pal: test")


def test_filter_state_escapes_everything() -> None:
    st = filter_state.FilterState(mode="enforce", heartbeat=123, stale_after=30, models=("v100",),
                                  rules=({"user": 'a"b\\c\n]]--', "name": "ünï $(id)", "class": "A", "id": "r1"},))
    text = filter_state.render(st)
    assert "rule id=r1 user=a%22b%5Cc%0A%5D%5D-- name=%C3%BCn%C3%AF%20%24%28id%29 class=A\n" in text
    assert text.isascii()
    with pytest.raises(ValueError):
        filter_state.FilterState(mode="bogus", heartbeat=0, stale_after=1)
    from conftest import require_tool

    lua = require_tool("lua5.1", "lua5.1")
    filter_path = Path(__file__).resolve().parents[2] / "spank_hooks" / "job_submit.lua"
    script = ("slurm = { SUCCESS = 0 }; PAL_FILTER_TEST = true\n"
              f"local pal = dofile({json.dumps(str(filter_path))})\n"
              f"local t = assert(pal.parse_state({json.dumps(text)}))\n"
              "io.write(t.mode, '|', t.rules[1].user, '|', t.rules[1].name, '|', t.rules[1].class, '|', t.heartbeat)")
    out = subprocess.run([lua, "-e", script], capture_output=True, check=True).stdout.decode()
    assert out == 'enforce|a"b\\c\n]]--|ünï $(id)|A|123'


def test_controller_down_22_05_is_unavailable_not_empty() -> None:
    """22.05's squeue --json exits 0 with an error document when slurmctld is down (captured)."""
    from pal_slurm.errors import SlurmUnavailable

    text = (DATA / "22.05" / "errors.txt").read_text()
    block = text.split("$ squeue --json\n", 1)[1].split("--- stdout\n", 1)[1].split("--- stderr", 1)[0]
    block = block.split("--- (stdout", 1)[0]
    with pytest.raises(SlurmUnavailable, match="Failed while looking for jobs"):
        parse_json.load(block, "squeue --json")


def test_controller_down_22_05_sinfo_is_unavailable_not_no_nodes() -> None:
    """22.05's sinfo --json says `errno`, not `error_number`: still an error, not an empty cluster."""
    from pal_slurm.errors import SlurmUnavailable

    text = (DATA / "22.05" / "errors.txt").read_text()
    block = text.split("$ sinfo --json\n", 1)[1].split("--- stdout\n", 1)[1].split("--- stderr", 1)[0]
    block = block.split("--- (stdout", 1)[0]
    with pytest.raises(SlurmUnavailable, match="sinfo --json: Unspecified error"):
        parse_json.load(block, "sinfo --json")


def test_jobs_from_doc_only_and_active() -> None:
    doc = parse_json.load((DATA / "22.05" / "squeue.json").read_text(), "squeue --json")
    assert [j.job_id for j in parse_json.jobs_from_doc(doc, only={"325", "999"})] == ["325"]
    finished = {"jobs": [{"job_id": 1, "job_state": "COMPLETED"}, {"job_id": 2, "job_state": ["PENDING"]},
                         {"job_id": {"set": True, "infinite": False, "number": 3}, "job_state": ["CANCELLED"]}]}
    assert [j.job_id for j in parse_json.jobs_from_doc(finished, active_only=True)] == ["2"]
    assert [j.job_id for j in parse_json.jobs_from_doc(finished, only={"3"})] == ["3"]
